r"""Smooth ECE (Błasiok & Nakkiran, 2023): calibration error without bins.

The residuals ``r_i = c_i - y_i`` (top-label confidence minus correctness) are smoothed over the
confidence axis with a Gaussian kernel of width ``sigma``, reflected at 0 and 1 so that no mass leaves
[0, 1]; the smooth ECE at ``sigma`` is the integral of the absolute smoothed residual mass,

.. math:: \mathrm{smECE}_\sigma = \int_0^1 \Bigl|\frac{1}{n}\sum_i K_\sigma(t, c_i)\, r_i\Bigr|\, dt,
          \qquad K_\sigma(t, c) = \sum_{m \in \{c, -c, 2 - c\}} \varphi_\sigma(t - m),

and the smooth ECE is its value at the fixed point ``sigma* = smECE_sigma*`` (the bandwidth equal to
the error it measures; unique, as ``smECE_sigma`` does not increase with ``sigma``). It needs no bins,
is continuous in the predictions, and is a consistent calibration measure in the sense of Błasiok et al.
(2023). Computed here on a grid of 2,001 points of [0, 1] (trapezoid rule), the fixed point by
bisection to 1e-7; the ``relplot`` package, the authors' reference, rounds the predictions to a grid
and stops its bisection at 2^-10, so the two agree to a few thousandths, not exactly. The bootstrap
evaluates it for many resamples at once through :class:`~sitecal.metrics.SmoothECEStatistic`
(:mod:`sitecal.metrics._smooth_weighted`: the same grid, the smoothing by FFT).

References: J. Błasiok, P. Nakkiran. "Smooth ECE: Principled Reliability Diagrams via Kernel
Smoothing." arXiv:2309.12236, 2023.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_probs
from sitecal.metrics._calibration_error import top_label

__all__ = ["GRID_POINTS", "smooth_ece", "smooth_ece_at"]

#: Points of the grid of [0, 1] the smoothed residuals are integrated on (trapezoid rule).
GRID_POINTS = 2001
_GRID = np.linspace(0.0, 1.0, GRID_POINTS)
_TOLERANCE = 1e-7  # of the bandwidth's fixed point
_CHUNK = 4096  # rows per kernel block: (grid, chunk) floats stay near 64 MB


def _smoothed_mass(confidence: NDArray[np.float64], residual: NDArray[np.float64], sigma: float) -> float:
    """``int_0^1 |(1/n) sum_i K_sigma(t, c_i) r_i| dt`` on the grid."""
    total = np.zeros_like(_GRID)
    norm = 1.0 / (sigma * math.sqrt(2.0 * math.pi))
    for start in range(0, confidence.shape[0], _CHUNK):  # a loop over blocks of rows
        c = confidence[start : start + _CHUNK]
        r = residual[start : start + _CHUNK]
        kernel = np.zeros((_GRID.shape[0], c.shape[0]))
        for mirror in (c, -c, 2.0 - c):  # the Gaussian reflected at 0 and at 1
            d = (_GRID[:, None] - mirror[None, :]) / sigma
            kernel += np.exp(-0.5 * d * d)
        total += kernel @ r
    values = np.abs(total) * norm / confidence.shape[0]
    step = _GRID[1] - _GRID[0]
    return float(step * (values.sum() - 0.5 * (values[0] + values[-1])))


def smooth_ece_at(probs: ArrayLike, labels: ArrayLike, sigma: float) -> float:
    """Top-label smooth ECE at a fixed kernel width ``sigma`` > 0.

    >>> probs = [[0.9, 0.1]] * 50 + [[0.6, 0.4]] * 50
    >>> labels = [0] * 45 + [1] * 5 + [0] * 30 + [1] * 20  # calibrated: 90 % and 60 % correct
    >>> round(smooth_ece_at(probs, labels, 0.05), 6)
    0.0
    """
    func = "smooth_ece_at"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"The 'sigma' parameter of {func} must be a number > 0. Got {sigma!r}.")
    confidence, correct = top_label(p, y)
    return _smoothed_mass(confidence, confidence - correct, float(sigma))


def smooth_ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> float:
    """Top-label smooth ECE at its fixed-point bandwidth (Błasiok & Nakkiran 2023); ``n_bins`` unused.

    >>> probs = [[0.9, 0.1]] * 50 + [[0.6, 0.4]] * 50
    >>> over = [0] * 35 + [1] * 15 + [0] * 25 + [1] * 25  # 70 % and 50 % correct at 90 % and 60 %
    >>> round(smooth_ece(probs, over), 3)  # all residuals of one sign: their mean, (0.2 + 0.1) / 2
    0.15
    """
    func = "smooth_ece"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    confidence, correct = top_label(p, y)
    residual = confidence - correct
    # s - smECE_s rises in s: bisect for its root in (0, 1] (a residual mass is at most 1)
    low, high = 0.0, 1.0
    while high - low > _TOLERANCE:
        mid = (low + high) / 2
        low, high = (mid, high) if mid < _smoothed_mass(confidence, residual, mid) else (low, mid)
    return _smoothed_mass(confidence, residual, high)
