"""The predictions a model gave per analysed study: what the predict stage hands to evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["Predictions"]


@dataclass(frozen=True)
class Predictions:
    """Logits per study, by pseudonymised study key, and where they came from.

    Attributes
    ----------
    class_names : tuple of str
        The model's classes, in output order (the columns of ``logits``).
    study_keys, patient_keys : tuple of str
        Pseudonyms of the studies predicted and of their patients, one per row of ``logits``.
    logits : numpy.ndarray
        ``(N, C)`` float64, finite. Probabilities read from a file are stored as their logarithms.
    source : {"model", "file"}
        ``model``: computed here; ``file``: read from a predictions file (the model was not run here).
    failures : tuple of (str, str)
        ``(study key, reason)`` of each study the model could not predict (source ``model``).
    n_cached, n_model_failed, n_non_finite : int
        Logits reused from the cache; studies on which the forward pass raised; studies whose logits
        were not finite.
    """

    class_names: tuple[str, ...]
    study_keys: tuple[str, ...]
    patient_keys: tuple[str, ...]
    logits: np.ndarray
    source: Literal["model", "file"]
    failures: tuple[tuple[str, str], ...] = ()
    n_cached: int = 0
    n_model_failed: int = 0
    n_non_finite: int = 0

    def __post_init__(self) -> None:
        n = len(self.study_keys)
        if self.logits.shape != (n, len(self.class_names)) or len(self.patient_keys) != n:
            raise ValueError(
                f"Predictions: {n} study keys, {len(self.patient_keys)} patient keys and logits of shape "
                f"{self.logits.shape} for {len(self.class_names)} classes do not agree."
            )

    @property
    def n_computed(self) -> int:
        """Logits the model computed in this run."""
        return len(self.study_keys) - self.n_cached if self.source == "model" else 0

    def row_of(self) -> dict[str, int]:
        """Study key → its row of ``logits``."""
        return {key: i for i, key in enumerate(self.study_keys)}
