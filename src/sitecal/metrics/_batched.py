"""Validation of the refit bootstrap's batched input: one probability matrix per resample.

The weighted statistics (:class:`~sitecal.metrics.SmoothECEStatistic`,
:class:`~sitecal.metrics.CalibrationSlopeStatistic`, :class:`~sitecal.metrics.CalibrationInterceptStatistic`)
offer ``batched(probs, labels, weights)`` with ``probs`` of shape (R, N, C), ``labels`` (N,) and row
weights (R, N): resample ``r`` has its own probabilities ``probs[r]`` (a refitted temperature) and its own
weights ``weights[r]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_probs
from sitecal.errors import DataError

__all__ = ["check_batched"]


def check_batched(
    probs: ArrayLike, labels: ArrayLike, weights: ArrayLike, *, func: str
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    """Validate ``(probs (R, N, C), labels (N,), weights (R, N))``; float64, int64, float64 out.

    Probability rows are checked as :func:`~sitecal._validation.check_probs` checks an (N, C) matrix;
    weights must be finite and >= 0 (a bootstrap's are integer counts).
    """
    p: NDArray[Any] = np.asarray(probs)
    if p.ndim != 3 or min(p.shape) < 1 or p.shape[2] < 2:
        raise DataError(
            f"The 'probs' parameter of {func} must be a 3-D array of shape (R, N, C), one (N, C) "
            f"probability matrix per resample, with R, N >= 1 and C >= 2. Got shape {p.shape}. "
            "For a single probability matrix use evaluate(prepare(probs, labels), weights)."
        )
    r, n, c = p.shape
    try:
        flat = check_probs(p.reshape(r * n, c), func=func)
    except DataError as exc:
        raise DataError(
            f"{exc} (Row k of the flattened (R * N, C) array is row k % {n} of resample k // {n}.)"
        ) from exc
    y = check_labels(labels, n=n, n_classes=c, func=func)
    w: NDArray[Any] = np.asarray(weights)
    if w.shape != (r, n):
        raise DataError(
            f"The 'weights' parameter of {func} must have shape ({r}, {n}), one weight per resample and "
            f"row of 'probs'. Got shape {w.shape}."
        )
    if w.dtype.kind not in "biuf":
        raise DataError(f"The 'weights' parameter of {func} must hold real numbers. Got dtype {w.dtype}.")
    wf = w.astype(np.float64)
    bad = ~np.isfinite(wf) | (wf < 0)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"The 'weights' parameter of {func} must hold finite weights >= 0. Got {float(wf[where])!r} "
            f"at index {where}."
        )
    return flat.reshape(r, n, c), y, wf
