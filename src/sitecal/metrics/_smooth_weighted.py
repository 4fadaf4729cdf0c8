r"""The smooth ECE under resampling weights, for many resamples at once (the bootstrap engine's form).

:func:`~sitecal.metrics.smooth_ece` evaluates the reflected Gaussian kernel at every (grid point, row)
pair for each bandwidth of its bisection: fine once, far too slow for a thousand resamples. Here every
resample's weighted residuals are binned once onto the same 2,001-point grid of [0, 1] (linear binning:
a row at ``c`` between grid points ``t_k <= c < t_{k+1}`` puts ``(1 - u) w r`` on ``t_k`` and ``u w r`` on
``t_{k+1}``, ``u = (c - t_k) / h``), and the smoothing of all resamples is a convolution, done by FFT:

.. math:: f_\sigma(t_j) = \sum_k H_k\, K_\sigma(t_j, t_k), \qquad
          H_k = \frac{\sum_i w_i\, r_i\, \lambda_k(c_i)}{\sum_i w_i},

with ``K_sigma`` the kernel of :mod:`sitecal.metrics._smooth` (the Gaussian and its reflections at 0 and
1) and ``lambda_k`` the linear-binning weights. The smooth ECE at ``sigma`` is the trapezoid rule of
``|f_sigma|`` on the grid, as in the exact function. The bandwidth's fixed point ``sigma = smECE_sigma``
(``sigma - smECE_sigma`` rises in ``sigma``; ``smECE_sigma`` never exceeds the binned residual mass
``U = sum_k |H_k|``, so the fixed point lies in ``(0, U]``) is found for every resample at once: first
bracketed by trying 0.15, then 0.29, then ``U`` (the largest bandwidths of the layouts below, so that a
small fixed point costs only short FFTs), then one step of fixed-point iteration (``smECE_sigma`` at a
``sigma`` above the fixed point lies below it), then the Illinois variant of regula falsi, with a
bisection every 8th step, until the bracket or ``|sigma - smECE_sigma|`` is below 1e-10. About 7 to 10
bandwidths per resample when residuals of both signs cancel; 1 or 2 when they all have one sign.

The convolution's kernel is given by its exact discrete Fourier transform (Poisson summation of the
Gaussian sampled at the grid spacing ``h``), so no kernel is sampled or truncated. Three layouts:

- ``sigma <= 0.15``: the data and its mirror image at 0 on a circle of circumference 2 (4,000 points).
  This is the kernel with *all* reflections (period 2); the ones beyond the three of the exact kernel sit
  at least 1 away from [0, 1], where the Gaussian is below ``exp(-1 / (2 * 0.15^2)) = 2e-10`` of its peak.
- ``0.15 < sigma <= 0.29`` and ``sigma > 0.29``: the three images of the exact kernel (at ``c``, ``-c``,
  ``2 - c``) on a circle of 8,192 or 18,432 points, whose wrapped copies lie at least 7 bandwidths away
  (``exp(-24.5)`` of the peak; ``sigma`` never exceeds 1).

Error against the exact function on the data repeated by the weights: the linear binning moves each row
by at most half a grid step (``h = 5e-4``), which changes ``f_sigma`` by a relative ``O((h / sigma)^2)``.
Measured at a fixed bandwidth on 2,000 rows: 1e-5 absolute at ``sigma = 0.005``, 1.5e-6 at 0.01, below
1e-7 from 0.05 on, but 1e-3 at 0.001; on resampled data (tests/metrics/test_smooth_weighted.py) below
4e-7 for smooth ECEs of 0.02 to 0.46. So within 1e-5 when the smooth ECE is at least 0.005 (a calibrated
group of up to about 10^5 studies; benchmarks/coverage_smooth_ece.md). Cost per resample: one real FFT
of 4,000 points per bandwidth tried, plus O(N) for the binning.

Each resample is reduced on its own (its rows of the arrays, its own iterations): the values do not
depend on which other resamples share a chunk, so the bootstrap's replicates are the same for any chunk
size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse

from sitecal._validation import check_labels, check_probs
from sitecal.metrics._calibration_error import top_label
from sitecal.metrics._smooth import GRID_POINTS

__all__ = ["SmoothECEStatistic", "smooth_ece_from_binned"]

_M = GRID_POINTS  # grid points of [0, 1], those of the exact function
_STEP = 1.0 / (_M - 1)
_PERIODIC = 2 * (_M - 1)  # a circle of circumference 2: the data and its mirror image at 0
_PERIODIC_UP_TO = 0.15  # bandwidths for which the reflections beyond the exact kernel's three are < 2e-10
#: (largest bandwidth, circle length): the three images of the exact kernel on a circle whose wrapped copies
#: lie at least 7 bandwidths away ((length - 2 (M - 1)) h >= 7 sigma); sigma never exceeds 1
_IMAGES = ((0.29, 8192), (1.0, 18432))
_TOLERANCE = 1e-10  # of the fixed point (bracket width, or |sigma - smECE_sigma|)
_MAX_STEPS = 200  # Illinois converges in about 7; a bisection every 8th step guarantees the bound
_BLOCK = 128  # resamples per block: the spectra of a block stay near 40 MB
_UNDERFLOW = 746.0  # exp(-x) is exactly 0 in float64 for x above 745.2
_ALIASED = 13.0  # bandwidths (in grid steps) below which the aliases q = -1, 1 are not exactly 0 at f <= 1/2


def _spectrum_periodic(mass: NDArray[np.float64]) -> NDArray[np.complex128]:
    """Spectrum of the masses and their mirror image at 0, on 2 (M - 1) points of a circle of length 2."""
    extended = np.concatenate([mass, mass[:, -2:0:-1]], axis=1)
    # the reflection of a point at 0 (or at 1) coincides with it: the exact kernel counts it twice
    extended[:, 0] += mass[:, 0]
    extended[:, _M - 1] += mass[:, -1]
    spectrum: NDArray[np.complex128] = np.fft.rfft(extended, axis=1)
    return spectrum


def _spectrum_images(mass: NDArray[np.float64], length: int) -> NDArray[np.complex128]:
    """Spectrum of the three images of the masses (at c, -c, 2 - c) on a circle of ``length`` points."""
    k = np.arange(_M)
    extended = np.zeros((mass.shape[0], length))
    extended[:, :_M] += mass
    extended[:, (-k) % length] += mass  # images at -c
    extended[:, 2 * (_M - 1) - k] += mass  # images at 2 - c
    spectrum: NDArray[np.complex128] = np.fft.rfft(extended, axis=1)
    return spectrum


def _kernel_spectrum(sigma: NDArray[np.float64], length: int) -> NDArray[np.float64]:
    """DFT of the Gaussian of width ``sigma`` (rows) sampled at the grid step, periodised over ``length``.

    Poisson summation: ``sum_n phi(n h) e^(-2 pi i k n / L)``
    ``= (1/h) sum_q e^(-2 pi^2 (sigma/h)^2 (k/L + q)^2)``.
    Only the first columns are returned, up to the last frequency where some row's value is not 0 in
    floating point (``exp`` underflows to exactly 0 below -745.2), so each row's values are the same
    whichever rows share the call; the aliases ``q = -1, 1`` are added only for rows where they are not
    exactly 0 (a bandwidth within 13 grid steps).
    """
    ratio = sigma / _STEP
    scale = -2.0 * math.pi**2 * ratio**2
    # 2 pi^2 s^2 f^2 > _UNDERFLOW for f > cutoff: those columns are 0 for every row
    cutoff = math.sqrt(_UNDERFLOW / (2.0 * math.pi**2)) / float(ratio.min()) * length
    columns = min(length // 2 + 1, math.ceil(cutoff) + 1)
    frequency = np.arange(columns) / length
    out = np.exp(scale[:, None] * frequency[None, :] ** 2)
    near = np.flatnonzero(ratio < _ALIASED)
    for q in (-1.0, 1.0):  # a loop over the two aliases that matter, for the rows where they do
        out[near] += np.exp(scale[near, None] * (frequency[None, :] + q) ** 2)
    out /= _STEP
    return out


def _trapezoid(values: NDArray[np.float64]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = _STEP * (values.sum(axis=1) - 0.5 * (values[:, 0] + values[:, -1]))
    return out


def _smoothed(
    spectra: NDArray[np.complex128], rows: NDArray[np.int64], sigma: NDArray[np.float64], length: int
) -> NDArray[np.float64]:
    """``int_0^1 |f_sigma|`` on the grid (trapezoid) for the given rows of ``spectra``, each at its sigma."""
    kernel = _kernel_spectrum(sigma, length)
    # the kernel is exactly 0 beyond its columns: the product's other columns stay 0
    product = np.zeros((rows.shape[0], length // 2 + 1), dtype=np.complex128)
    np.multiply(spectra[rows, : kernel.shape[1]], kernel, out=product[:, : kernel.shape[1]])
    smoothed = np.fft.irfft(product, n=length, axis=1)
    return _trapezoid(np.abs(smoothed[:, :_M]))


class _Block:
    """The spectra of a block of resamples; those of the image layouts made for a row when it needs them."""

    def __init__(self, mass: NDArray[np.float64]) -> None:
        self.mass = mass
        self.periodic = _spectrum_periodic(mass)
        self.images = [np.zeros((0, 0), dtype=np.complex128) for _ in _IMAGES]
        self.has_images = np.zeros((len(_IMAGES), mass.shape[0]), dtype=bool)

    def _image_spectra(self, layout: int, rows: NDArray[np.int64]) -> NDArray[np.complex128]:
        length = _IMAGES[layout][1]
        if self.images[layout].shape[0] == 0:
            self.images[layout] = np.zeros((self.mass.shape[0], length // 2 + 1), dtype=np.complex128)
        missing = rows[~self.has_images[layout, rows]]
        if missing.shape[0]:
            self.images[layout][missing] = _spectrum_images(self.mass[missing], length)
            self.has_images[layout, missing] = True
        return self.images[layout]

    def mass_at(self, rows: NDArray[np.int64], sigma: NDArray[np.float64]) -> NDArray[np.float64]:
        """``smECE_sigma`` of the given rows, each at its own bandwidth (in its layout)."""
        out = np.empty(rows.shape[0])
        periodic = sigma <= _PERIODIC_UP_TO
        if periodic.any():
            out[periodic] = _smoothed(self.periodic, rows[periodic], sigma[periodic], _PERIODIC)
        low = _PERIODIC_UP_TO
        for layout, (high, length) in enumerate(_IMAGES):  # a loop over two layouts
            these = (sigma > low) & ((sigma <= high) | (layout == len(_IMAGES) - 1))
            if these.any():
                spectra = self._image_spectra(layout, rows[these])
                out[these] = _smoothed(spectra, rows[these], sigma[these], length)
            low = high
        return out


def _fixed_point(mass: NDArray[np.float64]) -> NDArray[np.float64]:
    """The smooth ECE of each row of binned residual masses (R, M): Illinois iterations, vectorised."""
    block = _Block(mass)
    r = mass.shape[0]
    upper = np.abs(mass).sum(axis=1)  # smECE_sigma <= sum_k |H_k| at every sigma: the fixed point is below
    result = np.zeros(r)
    active = np.flatnonzero(upper > 0)  # no residual mass: smECE is 0 at every bandwidth
    if active.shape[0] == 0:
        return result
    lo = np.zeros(r)
    g_lo = -upper  # sigma - smECE_sigma is below 0 near 0 (a formal value: the secant's first end)
    hi = np.zeros(r)
    g_hi = np.zeros(r)
    # bracket the fixed point by the largest bandwidth of each layout in turn, then the upper end: a fixed
    # point below one of them is then found with that layout's FFTs (the shortest that serve) only
    rungs = (_PERIODIC_UP_TO, *(high for high, _ in _IMAGES[:-1]), math.inf)
    rows = active
    for rung in rungs:  # a loop over three rungs, each vectorised over the rows still below it
        if rows.shape[0] == 0:
            break
        hi[rows] = np.minimum(upper[rows], rung)
        value = block.mass_at(rows, hi[rows])
        g_hi[rows] = hi[rows] - value
        result[rows] = value
        rows = rows[(g_hi[rows] < 0) & (hi[rows] < upper[rows])]
        lo[rows], g_lo[rows] = hi[rows], g_hi[rows]  # the fixed point lies above this rung
    # the whole residual mass survives smoothing (all residuals of one sign): the fixed point is the upper
    # end, where sigma - smECE_sigma is 0 up to rounding
    active = active[np.abs(g_hi[active]) > _TOLERANCE]
    side = np.zeros(r, dtype=np.int8)  # which end moved last: -1 low, 1 high
    for step in range(_MAX_STEPS):  # a loop over iterations, each vectorised over the unfinished rows
        if active.shape[0] == 0:
            break
        a, b, ga, gb = lo[active], hi[active], g_lo[active], g_hi[active]
        # the first step is one of fixed-point iteration: smECE_sigma does not increase with sigma, so at
        # sigma above the fixed point, smECE_sigma lies at or below it (a lower end of the bracket)
        x = b - gb if step == 0 else (a * gb - b * ga) / (gb - ga)
        # safeguard: bisect when the secant point is not well inside the bracket, and every 8th step
        outside = ~((x > a) & (x < b)) | (step % 8 == 7)
        x = np.where(outside, 0.5 * (a + b), x)
        value = block.mass_at(active, x)
        gx = x - value
        result[active] = value
        below = gx < 0
        lo_rows, hi_rows = active[below], active[~below]
        lo[lo_rows], g_lo[lo_rows] = x[below], gx[below]
        g_hi[lo_rows] = np.where(side[lo_rows] == -1, 0.5 * g_hi[lo_rows], g_hi[lo_rows])
        side[lo_rows] = -1
        hi[hi_rows], g_hi[hi_rows] = x[~below], gx[~below]
        g_lo[hi_rows] = np.where(side[hi_rows] == 1, 0.5 * g_lo[hi_rows], g_lo[hi_rows])
        side[hi_rows] = 1
        done = (np.abs(gx) <= _TOLERANCE) | (hi[active] - lo[active] <= _TOLERANCE)
        active = active[~done]
    return result


def smooth_ece_from_binned(mass: NDArray[np.float64]) -> NDArray[np.float64]:
    """Smooth ECE of each row of residual masses binned on the 2,001-point grid: (R, 2001) -> (R,).

    ``mass[b, k]`` is resample ``b``'s weighted residual (confidence minus correctness) put on grid point
    ``k / 2000`` by linear binning, divided by the resample's total weight. Blocks of resamples are
    reduced one after the other (memory only: every resample is reduced on its own).
    """
    out = np.empty(mass.shape[0])
    for start in range(0, mass.shape[0], _BLOCK):  # a loop over blocks of resamples
        out[start : start + _BLOCK] = _fixed_point(mass[start : start + _BLOCK])
    return out


def _linear_bins(confidence: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Left grid point of each confidence and its share ``u`` on the right neighbour."""
    position = confidence * (_M - 1)
    left = np.minimum(np.floor(position).astype(np.int64), _M - 2)
    return left, position - left


@dataclass(frozen=True)
class _SmoothPrepared:
    binning: sparse.csr_array  # (M, N): row k holds each data row's residual share on grid point k
    n: int


@dataclass(frozen=True)
class SmoothECEStatistic:
    """Top-label smooth ECE (Błasiok & Nakkiran 2023) under resampling weights, many resamples at once.

    ``evaluate`` bins each resample's weighted residuals on the grid of the exact function and finds its
    bandwidth's fixed point (see :mod:`sitecal.metrics._smooth_weighted`); within 1e-5 of
    :func:`~sitecal.metrics.smooth_ece` on the rows repeated by their weights when the smooth ECE is at
    least 0.005. Cost per resample: O(N) for the binning and up to about ten FFTs of 4,000 points.

    Examples
    --------
    >>> import numpy as np
    >>> probs = [[0.9, 0.1]] * 40 + [[0.7, 0.3]] * 60
    >>> labels = [0] * 30 + [1] * 10 + [0] * 30 + [1] * 30  # 75 % and 50 % correct: over-confident
    >>> weights = np.array([[1.0] * 100, [2.0] * 40 + [0.0] * 60])
    >>> SmoothECEStatistic("smooth_ece")(probs, labels, weights=weights).round(4).tolist()  # mean residuals
    [0.18, 0.15]

    Attributes
    ----------
    name : str
        The metric's name in :mod:`sitecal.metrics.registry`.
    n_bins : int
        Unused (no bins); kept so that every weighted statistic has one.
    """

    name: str
    n_bins: int = 15

    def prepare(self, probs: ArrayLike, labels: ArrayLike) -> _SmoothPrepared:
        """Validate once and build the sparse map from rows to grid points."""
        func = f"metric_statistic({self.name!r}).prepare"
        p = check_probs(probs, func=func)
        y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
        confidence, correct = top_label(p, y)
        residual = confidence - correct
        left, share = _linear_bins(confidence)
        n = p.shape[0]
        rows = np.concatenate([left, left + 1])
        columns = np.concatenate([np.arange(n), np.arange(n)])
        values = np.concatenate([residual * (1.0 - share), residual * share])
        binning = sparse.csr_array((values, (rows, columns)), shape=(_M, n))
        binning.sum_duplicates()
        return _SmoothPrepared(binning, n)

    def evaluate(self, prepared: _SmoothPrepared, weights: NDArray[np.float64]) -> NDArray[np.float64]:
        """Smooth ECE under per-row weights of shape (B, N); returns (B,)."""
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        # a sparse product accumulates each resample's column on its own (no BLAS blocking)
        binned = np.asarray(prepared.binning @ np.ascontiguousarray(w.T)).T
        total = w.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mass = binned / total[:, None]
        out = smooth_ece_from_binned(np.where(total[:, None] > 0, mass, 0.0))
        return np.where(total > 0, out, np.nan)

    def evaluate_each(
        self, probs: NDArray[np.float64], labels: NDArray[np.int64], weights: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Smooth ECE of resample ``b``'s own probabilities ``probs[b]`` under ``weights[b]``.

        For the refit bootstrap, where each resample has its own temperature. ``probs`` (R, N, C) valid
        probabilities (no check), ``labels`` (N,), ``weights`` (R, N); returns (R,).
        """
        r, n, c = probs.shape
        confidence, correct = top_label(probs.reshape(r * n, c), np.tile(labels, r))
        left, share = _linear_bins(confidence)
        weighted = weights.reshape(-1) * (confidence - correct)
        flat = left + np.repeat(np.arange(r, dtype=np.int64) * _M, n)
        binned = np.bincount(flat, weights=weighted * (1.0 - share), minlength=r * _M)
        binned += np.bincount(flat + 1, weights=weighted * share, minlength=r * _M)
        total = weights.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mass = binned.reshape(r, _M) / total[:, None]
        out = smooth_ece_from_binned(np.where(total[:, None] > 0, mass, 0.0))
        return np.where(total > 0, out, np.nan)

    def __call__(
        self, probs: ArrayLike, labels: ArrayLike, *, weights: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Evaluate under per-row weights of shape (B, N); returns (B,)."""
        return self.evaluate(self.prepare(probs, labels), np.asarray(weights, dtype=np.float64))
