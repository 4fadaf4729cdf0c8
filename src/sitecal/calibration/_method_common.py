"""Pieces shared by the recalibration methods: the raw fit record, softmax helpers and note wording."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import log_softmax

__all__ = ["Params", "RawFit", "batch_softmax", "class_weights", "log_softmax_rows", "resamples_phrase"]

#: Fitted parameters by name, each with leading axis R.
Params = Mapping[str, NDArray[Any]]


@dataclass
class RawFit:
    """What a method's batched fit hands back to :func:`~sitecal.calibration.fit_method`.

    ``params`` arrays have leading axis ``R``; ``converged`` is (R,); ``notes`` are sentences.
    """

    params: dict[str, NDArray[Any]]
    converged: NDArray[np.bool_]
    notes: list[str] = field(default_factory=list)


def log_softmax_rows(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row-wise ``log softmax`` of (..., K) logits, exact in the tails (no ``log`` of a rounded 0)."""
    out: NDArray[np.float64] = log_softmax(z, axis=-1)
    return out


def batch_softmax(eta: NDArray[np.float64]) -> NDArray[np.float64]:
    """Softmax over the last axis; rows sum to 1 to rounding."""
    shifted = eta - eta.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    out: NDArray[np.float64] = e / e.sum(axis=-1, keepdims=True)
    return out


def class_weights(weights: NDArray[np.float64], labels: NDArray[np.int64], k: int) -> NDArray[np.float64]:
    """Total weight of each class in each weighting: (R, N) -> (R, K)."""
    onehot = np.zeros((labels.shape[0], k))
    onehot[np.arange(labels.shape[0]), labels] = 1.0
    out: NDArray[np.float64] = weights @ onehot
    return out


def resamples_phrase(mask: NDArray[np.bool_]) -> str:
    """Where a note applies: "" for a single fit, else "In resamples 3, 17 (2 of 1000): "."""
    r = mask.shape[0]
    if r == 1:
        return ""
    idx = np.flatnonzero(mask)
    shown = ", ".join(str(int(i)) for i in idx[:10]) + (", ..." if idx.shape[0] > 10 else "")
    return f"In resamples {shown} ({idx.shape[0]} of {r}): "
