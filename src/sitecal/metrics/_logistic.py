r"""Logistic recalibration fits under resampling weights, vectorised over resamples.

The calibration slope :math:`\hat b` of :math:`\mathrm{logit}\,P(y=1) = a + b z` and the calibration
intercept :math:`\hat\alpha` of :math:`\mathrm{logit}\,P(y=1) = \alpha + z` (``z`` the logit of the
event's predicted probability) are maximum-likelihood fits, not functions of per-row sums, so a
bootstrap needs one fit per resample. :func:`weighted_logistic_fit` runs them all at once: Newton
steps vectorised over the rows of a (B, N) weight matrix. Both
:class:`~sitecal.metrics.RecalibrationStatistic` (the top-label event) and
:class:`~sitecal.metrics.CalibrationSlopeStatistic` / :class:`~sitecal.metrics.CalibrationInterceptStatistic`
(the event of :func:`~sitecal.metrics.calibration_slope_intercept`) are built on it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from sitecal.metrics._clinical import LOGIT_CLIP, _newton

__all__ = ["batched_newton", "full_sample_start", "logit", "rowsum", "weighted_logistic_fit"]

_TOLERANCE = 1e-10
_MAX_ITER = 100


def logit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """``log(p / (1 - p))`` with ``p`` clipped to ``[LOGIT_CLIP, 1 - LOGIT_CLIP]`` (finite at 0 and 1)."""
    clipped = np.clip(p, LOGIT_CLIP, 1 - LOGIT_CLIP)
    out: NDArray[np.float64] = np.log(clipped) - np.log1p(-clipped)
    return out


def rowsum(a: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sum over the last axis of a (B, N) array, row by row."""
    # a reduction per row (no BLAS), so each resample's value does not depend on the chunk it is in
    out: NDArray[np.float64] = a.sum(axis=1)
    return out


def _rowdot(a: NDArray[np.float64], z: NDArray[np.float64]) -> NDArray[np.float64]:
    """``sum_n a[b, n] z[(b,) n]`` for ``z`` of shape (N,) or (B, N), without BLAS (einsum's own loops)."""
    out: NDArray[np.float64] = np.einsum("bn,n->b", a, z) if z.ndim == 1 else np.einsum("bn,bn->b", a, z)
    return out


def batched_newton(
    w: NDArray[np.float64],
    y: NDArray[np.float64],
    z: NDArray[np.float64],
    *,
    slope: bool,
    defined: NDArray[np.bool_],
    start: tuple[float | NDArray[np.float64], float | NDArray[np.float64]],
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Weighted logistic MLE for every row of ``w`` at once; returns (coefficient, converged).

    ``w`` is (B, N); ``y`` and ``z`` are (N,), shared by every row, or (B, N), one per row (the refit
    bootstrap, where every resample has its own probabilities). ``slope=True`` fits ``a + b z`` and
    returns ``b``; ``slope=False`` fits ``alpha + z`` and returns ``alpha``; both start from ``start``
    (scalars or (B,) arrays: the full-sample estimate, near every resample's). Only rows flagged
    ``defined`` are fitted. Newton steps, each capped at 1 in its largest coefficient change (a trust
    region that stands in for step halving without a likelihood evaluation per step: the
    log-likelihood is concave, and a capped Newton step from a nearby start converges); a resample
    stops moving once its largest step is below 1e-10 relative to 1 + |coefficient|, so its value does
    not depend on the other resamples of the chunk. Resamples still moving after 100 steps are
    reported as not converged.
    """
    b_count = w.shape[0]
    a = np.broadcast_to(np.asarray(start[0], dtype=np.float64), (b_count,)).copy()
    b = np.broadcast_to(np.asarray(start[1] if slope else 1.0, dtype=np.float64), (b_count,)).copy()
    active = defined.copy()
    done = np.zeros(b_count, dtype=bool)
    wy = w * y
    g0_fixed, g1_fixed, z2 = rowsum(wy), _rowdot(wy, z), z * z
    zz = z[None, :] if z.ndim == 1 else z
    eta = np.empty_like(w)
    for _ in range(_MAX_ITER):  # a loop over Newton iterations, vectorised over resamples
        if not active.any():
            break
        np.multiply(b[:, None], zz, out=eta)
        eta += a[:, None]
        mu = expit(eta, out=eta)
        wmu = w * mu
        h = np.subtract(1.0, mu, out=mu)
        h *= wmu  # w mu (1 - mu)
        # row-wise sums without BLAS (einsum's own loops), so a resample's value is chunk-independent
        g0, i00 = g0_fixed - rowsum(wmu), rowsum(h)
        with np.errstate(divide="ignore", invalid="ignore"):
            if slope:
                g1 = g1_fixed - _rowdot(wmu, z)
                i01, i11 = _rowdot(h, z), _rowdot(h, z2)
                det = i00 * i11 - i01 * i01
                da = (i11 * g0 - i01 * g1) / det
                db = (i00 * g1 - i01 * g0) / det
            else:
                da = g0 / i00
                db = np.zeros(b_count)
            largest = np.maximum(np.abs(da), np.abs(db))
            scale = np.where(largest > 1.0, 1.0 / largest, 1.0)
        active &= np.isfinite(da) & np.isfinite(db)
        da = np.where(active, da * scale, 0.0)
        db = np.where(active, db * scale, 0.0)
        a, b = a + da, b + db
        rel = np.maximum(np.abs(da) / (1.0 + np.abs(a)), np.abs(db) / (1.0 + np.abs(b)))
        finished = active & (rel < _TOLERANCE)
        done |= finished
        active &= ~finished
    return (b if slope else a), done


def full_sample_start(z: NDArray[np.float64], y: NDArray[np.float64], *, slope: bool) -> tuple[float, float]:
    """Unweighted fit of (N,) data as a start for every resample: ``(a, b)`` or ``(alpha, 1)``.

    ``(0, 1)`` (the calibrated values) when the fit does not exist or does not converge; then every
    resample's fit starts there.
    """
    n = z.shape[0]
    events = float(y.sum())
    if not 0 < events < n:  # no fit here, and none in any resample either
        return (0.0, 1.0)
    if slope:
        coef, ok = _newton(np.stack([np.ones(n), z], axis=1), y, np.zeros(n), np.array([0.0, 1.0]))
        return (float(coef[0]), float(coef[1])) if ok else (0.0, 1.0)
    coef, ok = _newton(np.ones((n, 1)), y, z, np.zeros(1))
    return (float(coef[0]), 1.0) if ok else (0.0, 1.0)


def weighted_logistic_fit(
    w: NDArray[np.float64],
    y: NDArray[np.float64],
    z: NDArray[np.float64],
    *,
    slope: bool,
    start: tuple[float | NDArray[np.float64], float | NDArray[np.float64]],
) -> NDArray[np.float64]:
    """Calibration slope (``slope=True``) or intercept of each weighted data set; (B,), NaN if undefined.

    ``w`` (B, N) row weights; ``y`` the 0/1 event and ``z`` the logit of its probability, (N,) or
    (B, N). A value is NaN where the maximum-likelihood fit does not exist, exactly where
    :func:`~sitecal.metrics.calibration_slope_intercept` on the rows repeated by their weights gives
    NaN: no event or no non-event drawn; for the slope also ``z`` separating the drawn events from the
    drawn non-events (which includes a single drawn value of ``z``); or no convergence in 100 steps.
    """
    observed = rowsum(w * y)
    total = rowsum(w)
    defined = (observed > 0) & (observed < total)
    if slope:
        drawn = w > 0
        events, others = drawn & (y == 1.0), drawn & (y == 0.0)
        zz = z[None, :] if z.ndim == 1 else z
        min1 = np.where(events, zz, np.inf).min(axis=1)
        max1 = np.where(events, zz, -np.inf).max(axis=1)
        min0 = np.where(others, zz, np.inf).min(axis=1)
        max0 = np.where(others, zz, -np.inf).max(axis=1)
        defined &= ~((min1 >= max0) | (max1 <= min0))
    value, converged = batched_newton(w, y, z, slope=slope, defined=defined, start=start)
    result: NDArray[np.float64] = np.where(defined & converged, value, np.nan)
    return result
