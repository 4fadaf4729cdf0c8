r"""Many temperature fits at once: one per bootstrap resample (or jackknife deletion) of the fit rows.

A resample is a vector of integer cluster weights ``w``; its fit minimises the weighted mean NLL

.. math:: f_w(s) = \frac{\sum_i w_i \ell_i(s)}{\sum_i w_i}, \qquad
          \ell_i(s) = \log\sum_k e^{\beta d_{ik}}, \quad \beta = e^{-s}, \quad d_{ik} = z_{ik} - z_{i y_i},

which is exactly what :func:`~sitecal.calibration.fit_temperature` minimises on the resampled rows
(each row repeated ``w_i`` times). Solving ``B`` of these one by one costs ``B`` full passes over the
data per Newton step. Here the per-row gradient :math:`\ell_i'(s)` is replaced, on an interval
``[a, b]`` that holds the resample optima, by its Chebyshev interpolant of degree ``Q - 1``; the
coefficients are summed per cluster once (``K x Q``), so a resample's gradient is the polynomial with
coefficients ``w . C`` and its root costs ``O(Q)`` per Newton step. The interpolation error is
measured per row at check points between the nodes, summed per cluster, and turned into a certified
bound on each resample's ``|s - s*|``; a resample whose bound exceeds ``CERTIFIED_S_ERROR``, or whose
root is not bracketed inside ``[a, b]`` (including optima on a bound of ``T``), is solved by an exact,
vectorised copy of ``fit_temperature``'s safeguarded Newton on its own weighted rows.

Every resample is solved from its own weights only (convergence masks freeze each one on its own
criterion, and weighted sums are row-wise numpy reductions, not BLAS products), so results do not
depend on how resamples are batched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev
from numpy.typing import NDArray

from sitecal._kernels import surrogate_roots
from sitecal.calibration._empirical_bayes import cluster_robust_variance
from sitecal.calibration._gradient_surrogate import (
    Sums,
    Surrogate,
    _interpolant,
    _interval_around,
    _row_terms,
)
from sitecal.calibration._temperature import (
    _NLL,
    DEFAULT_BOUNDS,
    TemperatureFit,
    fit_validated,
    temperature_bounds,
)

__all__ = [
    "CERTIFIED_S_ERROR",
    "BatchedSolution",
    "BatchedTemperatureSolver",
    "Surrogate",
    "family_surrogates",
]

#: Largest certified error in ``s = log T`` accepted from the surrogate (relative error in ``T``).
CERTIFIED_S_ERROR = 1e-9
#: Elements per temporary (resamples x rows x classes) array in the exact solver.
EXACT_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class BatchedSolution:
    """Log temperatures of a batch of weighted fits.

    Attributes
    ----------
    log_temperature : numpy.ndarray, shape (B,)
    exact : numpy.ndarray of bool, shape (B,)
        True where the exact solver was used (surrogate not certified or root outside its interval).
    bound : numpy.ndarray of int8, shape (B,)
        -1 / +1 where the fit stopped on the lower / upper bound of T (as ``fit_temperature`` would), else 0.
    error_bound : numpy.ndarray, shape (B,)
        Certified bound on ``|s - s*|`` for surrogate solutions; for exact ones, the tolerance-based
        ``|gradient| / hessian`` at the result.
    """

    log_temperature: NDArray[np.float64]
    exact: NDArray[np.bool_]
    bound: NDArray[np.int8]
    error_bound: NDArray[np.float64]


def _row_derivatives(d: NDArray[np.float64], beta: NDArray[np.float64]) -> Sums:
    """Per-row ``ell``, ``d ell / ds`` and ``d2 ell / ds2`` for rows ``d`` (R, N, C), betas (R,) -> (R, N)."""
    b = beta[:, None, None]
    z = b * d[None] if d.ndim == 2 else b * d
    m = z.max(axis=2, keepdims=True)
    e = np.exp(z - m)
    total = e.sum(axis=2, keepdims=True)
    p = e / total
    dd = d[None] if d.ndim == 2 else d
    mean_d = (p * dd).sum(axis=2)
    centred = dd - mean_d[:, :, None]
    var_d = (p * centred * centred).sum(axis=2)
    bb = beta[:, None]
    value = m[:, :, 0] + np.log(total[:, :, 0])
    return value, -bb * mean_d, bb * bb * var_d + bb * mean_d


def _row_sums(weights: NDArray[np.float64], columns: NDArray[np.float64]) -> NDArray[np.float64]:
    """``weights @ columns`` (B, K) x (K, J) -> (B, J), each output row from its own weights only.

    ``numpy.einsum`` without ``optimize`` runs one contiguous dot per (row, column), so a row's result
    does not depend on which other rows share the batch; BLAS ``matmul`` blocks across rows and does.
    """
    out: NDArray[np.float64] = np.einsum(
        "bk,jk->bj", weights, np.ascontiguousarray(columns.T), optimize=False
    )
    return out


class BatchedTemperatureSolver:
    """Fits of ``s = log T`` under many cluster weightings of the same rows.

    Parameters
    ----------
    logits : numpy.ndarray, shape (N, C), float64 (validated)
    labels : numpy.ndarray, shape (N,), int64 (validated)
    cluster_of_row : numpy.ndarray of int64, shape (N,)
        Cluster number in ``[0, n_clusters)`` of each row.
    n_clusters : int
    bounds : (float, float), default (0.05, 100.0)
        Bounds of T, as in :func:`~sitecal.calibration.fit_temperature`.
    func : str
        Name of the calling function, for error messages about ``bounds``.
    tol, max_iter
        Tolerance on ``|d f / d s|`` and step limit of the exact solver (and the full-data fit).
    fit : TemperatureFit, optional
        The full-data fit where the caller has it: ``fit_validated`` of these rows, in this order, with
        these ``bounds``, ``tol`` and ``max_iter`` (as :func:`~sitecal.calibration.fit_group_temperatures`
        fits a group's own or the global temperature); None: fitted here.
    surrogate : Surrogate, optional
        The surrogate of these clusters where it is shared with other fits (:func:`family_surrogates`);
        None: built here, on an interval around this fit.

    Attributes
    ----------
    fit : TemperatureFit
        The full-data fit (all weights 1), identical to ``fit_temperature(logits, labels)``.
    interval : (float, float)
        The surrogate's interval ``[a, b]`` in ``s`` (empty, ``(nan, nan)``, when the full fit hit a
        bound and every resample goes to the exact solver).
    degree : int
        Chebyshev nodes ``Q`` used.
    """

    def __init__(
        self,
        logits: NDArray[np.float64],
        labels: NDArray[np.int64],
        cluster_of_row: NDArray[np.int64],
        n_clusters: int,
        *,
        bounds: tuple[float, float] = DEFAULT_BOUNDS,
        func: str = "BatchedTemperatureSolver",
        tol: float = 1e-10,
        max_iter: int = 100,
        fit: TemperatureFit | None = None,
        surrogate: Surrogate | None = None,
    ) -> None:
        low, high = temperature_bounds(bounds, func=func)
        self._given = surrogate
        self._d = _NLL(logits, labels).d
        self._d_t = np.ascontiguousarray(self._d.T)
        self._cluster_of_row = cluster_of_row
        self._k = n_clusters
        self.n_clusters = n_clusters
        self._lo, self._hi = math.log(low), math.log(high)
        self._tol, self._max_iter = tol, max_iter
        if fit is None:
            fit = fit_validated(logits, labels, tol=tol, max_iter=max_iter, low=low, high=high)
        self.fit: TemperatureFit = fit
        self._row_counts = np.bincount(cluster_of_row, minlength=n_clusters).astype(np.float64)
        self.interval = (math.nan, math.nan)
        self.degree = 0
        self._coeffs = np.zeros((n_clusters, 0))
        self._errors = np.zeros(n_clusters)
        if self.fit.converged:
            self._build_surrogate()

    # -- surrogate ---------------------------------------------------------------------------------
    def _per_row(self, s: float) -> Sums:
        """Each row's ``ell``, ``d ell / ds`` and ``d2 ell / ds2`` at ``s``, computed class-major."""
        return _row_terms(self._d_t, s)

    def _build_surrogate(self) -> None:
        if self._given is not None:  # a family's shared surrogate (family_surrogates)
            interval, degree = self._given.interval, self._given.degree
            coeffs, errors = self._given.coeffs, self._given.errors
        else:
            a, b, curvature = _interval_around(
                self._d_t, self._cluster_of_row, self._k, self.fit.log_temperature, (self._lo, self._hi)
            )

            def certified(errors: NDArray[np.float64]) -> bool:
                return curvature > 0 and float(errors.sum()) / curvature <= 1e-3 * CERTIFIED_S_ERROR

            degree, coeffs, errors = _interpolant(self._d_t, self._cluster_of_row, self._k, (a, b), certified)
            interval = (a, b)
        self.interval, self.degree = interval, degree
        self._mid, self._rad = 0.5 * (interval[0] + interval[1]), 0.5 * (interval[1] - interval[0])
        self._coeffs = coeffs  # (K, Q)
        self._errors = errors

    def _surrogate(
        self, coeffs: NDArray[np.float64], errors: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.float64]]:
        """Roots of the gradient polynomials (B, Q) and whether each is certified."""
        dcoeffs = np.asarray(chebyshev.chebder(coeffs, axis=1), dtype=np.float64)
        x, slope, ok = surrogate_roots(coeffs, dcoeffs, errors)  # safeguarded Newton steps, per row
        h_final = slope / self._rad  # d g / d s (sum form)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = np.where(h_final > 0, errors / h_final, np.inf)
        ok &= bound <= CERTIFIED_S_ERROR
        return self._mid + self._rad * x, ok, bound

    # -- exact solver ------------------------------------------------------------------------------
    def _exact(
        self, row_weights: Callable[[NDArray[np.intp]], NDArray[np.float64]], r: int
    ) -> tuple[NDArray[np.float64], NDArray[np.int8], NDArray[np.float64]]:
        """``solve_log_temperature`` of :mod:`._temperature`, vectorised over ``r`` weightings.

        ``row_weights(rows)`` gives the (len(rows), N) row weights of the weightings numbered ``rows``;
        it is called a chunk at a time, so memory stays at about ``EXACT_CHUNK_ELEMENTS`` floats.
        """
        n, c = self._d.shape
        step = max(1, EXACT_CHUNK_ELEMENTS // max(n * c, 1))

        def objective(s: NDArray[np.float64], rows: NDArray[np.intp]) -> Sums:
            out = np.empty((3, s.shape[0]))
            for start in range(0, s.shape[0], step):  # a loop over chunks of weightings
                sl = slice(start, start + step)
                w = row_weights(rows[sl])
                total = w.sum(axis=1)
                for j, per_row in enumerate(_row_derivatives(self._d, np.exp(-s[sl]))):
                    out[j, sl] = np.multiply(w, per_row).sum(axis=1) / total
            return out[0], out[1], out[2]

        return _rtsafe(objective, r, lo=self._lo, hi=self._hi, tol=self._tol, max_iter=self._max_iter)

    # -- public ------------------------------------------------------------------------------------
    @property
    def at_bound(self) -> bool:
        """Whether the full-data fit stopped on a bound of T."""
        return self.fit.log_temperature in (self._lo, self._hi)

    def robust_variance(
        self, log_temperature: NDArray[np.float64], cluster_weights: NDArray[np.float64] | None = None
    ) -> NDArray[np.float64]:
        """Cluster-robust variance of fitted log temperatures (R,) under cluster weights (R, n_clusters).

        See :func:`~sitecal.calibration.cluster_robust_variance` (default weights: all 1).
        """
        return cluster_robust_variance(
            self._d, self._cluster_of_row, self._k, log_temperature, cluster_weights
        )

    def _solve(
        self,
        coeffs: NDArray[np.float64],
        errors: NDArray[np.float64],
        row_weights: Callable[[NDArray[np.intp]], NDArray[np.float64]],
    ) -> BatchedSolution:
        n = coeffs.shape[0]
        s = np.full(n, math.nan)
        bound = np.zeros(n, dtype=np.int8)
        err = np.full(n, math.inf)
        ok = np.zeros(n, dtype=bool)
        if self.degree:
            s, ok, err = self._surrogate(coeffs, errors)
        fail = np.flatnonzero(~ok)
        if fail.shape[0]:
            s_f, bound_f, err_f = self._exact(lambda rows: row_weights(fail[rows]), fail.shape[0])
            s[fail], bound[fail], err[fail] = s_f, bound_f, err_f
        return BatchedSolution(s, ~ok, bound, err)

    def solve(self, cluster_weights: NDArray[np.float64]) -> BatchedSolution:
        """Fits under cluster weights of shape (B, n_clusters)."""
        coeffs = (
            _row_sums(cluster_weights, self._coeffs)
            if self.degree
            else np.zeros((cluster_weights.shape[0], 0))
        )
        errors = _row_sums(cluster_weights, self._errors[:, None])[:, 0]
        return self._solve(coeffs, errors, lambda rows: cluster_weights[rows][:, self._cluster_of_row])

    @property
    def cluster_terms(self) -> NDArray[np.float64]:
        """Per cluster, its surrogate coefficients (``degree`` columns) then its error bound: (K, degree + 1).

        A weighting ``w``'s fit needs ``w @ cluster_terms`` only (:meth:`solve_summed`), which a caller
        holding many solvers over one set of patients can compute for all of them in one pass.
        """
        return np.concatenate([self._coeffs, self._errors[:, None]], axis=1)

    def solve_summed(
        self,
        summed: NDArray[np.float64],
        cluster_weights: Callable[[NDArray[np.intp]], NDArray[np.float64]],
    ) -> BatchedSolution:
        """Fits from ``w @ cluster_terms`` (B, degree + 1), computed by the caller for weightings ``w``.

        ``cluster_weights(rows)`` gives the (len(rows), n_clusters) weights of the weightings numbered
        ``rows``, for the few the surrogate cannot certify (solved exactly on their rows).
        """
        return self._solve(
            summed[:, : self.degree],
            summed[:, self.degree],
            lambda rows: cluster_weights(rows)[:, self._cluster_of_row],
        )

    def jackknife(self) -> BatchedSolution:
        """Leave-one-cluster-out fits, shape (n_clusters,)."""
        total_c = self._coeffs.sum(axis=0, keepdims=True)
        coeffs = total_c - self._coeffs
        errors = self._errors.sum() - self._errors
        cl = self._cluster_of_row
        return self._solve(coeffs, errors, lambda rows: (cl[None, :] != rows[:, None]).astype(np.float64))


def _rtsafe(
    objective: Callable[[NDArray[np.float64], NDArray[np.intp]], Sums],
    r: int,
    *,
    lo: float,
    hi: float,
    tol: float,
    max_iter: int,
) -> tuple[NDArray[np.float64], NDArray[np.int8], NDArray[np.float64]]:
    """Vectorised ``solve_log_temperature``: the same steps and stopping rules, resample by resample."""
    everyone = np.arange(r)
    _, g_lo, _ = objective(np.full(r, lo), everyone)
    _, g_hi, _ = objective(np.full(r, hi), everyone)
    at_lo = (g_lo >= 0.0) & (g_hi > 0.0)
    at_hi = ~at_lo & (g_hi <= 0.0) & (g_lo < 0.0)
    s = np.full(r, min(max(0.0, lo), hi))
    s[at_lo], s[at_hi] = lo, hi
    bound = np.where(at_lo, -1, np.where(at_hi, 1, 0)).astype(np.int8)
    a, b = np.full(r, lo), np.full(r, hi)
    step_old = np.full(r, hi - lo)
    grad, hess = np.zeros(r), np.zeros(r)
    active = np.flatnonzero(bound == 0)
    if active.shape[0]:
        _, grad[active], hess[active] = objective(s[active], active)
    eps = float(np.finfo(np.float64).eps)
    for _ in range(max_iter):  # a loop over Newton iterations
        if not active.shape[0]:
            break
        g, h, sa = grad[active], hess[active], s[active]
        done = np.abs(g) <= tol
        live = active[~done]
        if not live.shape[0]:
            break
        g, h, sa = g[~done], h[~done], sa[~done]
        aa = np.where(g < 0.0, sa, a[live])
        bb = np.where(g < 0.0, b[live], sa)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = np.where(h > 0.0, sa - g / h, np.nan)
        take = (aa < newton) & (newton < bb) & (np.abs(2.0 * g) <= np.abs(step_old[live] * h))
        new_s = np.where(take, newton, 0.5 * (aa + bb))
        step_old[live] = np.where(take, np.abs(newton - sa), 0.5 * (bb - aa))
        a[live], b[live], s[live] = aa, bb, new_s
        _, grad[live], hess[live] = objective(new_s, live)
        pinned = bb - aa <= 4.0 * eps * np.maximum(1.0, np.abs(new_s))
        active = live[~pinned]
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.where(hess > 0, np.abs(grad) / hess, np.inf)
    err[bound != 0] = 0.0
    return s, bound, err


def family_surrogates(
    logits: NDArray[np.float64],
    labels: NDArray[np.int64],
    cluster_of_row: NDArray[np.int64],
    n_clusters: int,
    members: Sequence[tuple[NDArray[np.int64], TemperatureFit]],
    *,
    bounds: tuple[float, float] = DEFAULT_BOUNDS,
    func: str = "family_surrogates",
) -> list[Surrogate]:
    """One surrogate shared by fits on overlapping sets of whole clusters of the same rows.

    ``members``: each fit's clusters (indices in ``[0, n_clusters)``, ascending; the fit's rows are all
    the rows of these clusters) and its full-data fit, converged. The shared interval holds every
    member's own (``WIDTH_IN_SE`` SEs around its fit); the degree is the first at which every member's
    error bound is as small as its own surrogate would need. Each row's interpolant is then the same in
    every member, so a cluster's coefficients are too: a caller refitting all the members sums each
    cluster's once (:class:`~sitecal.stats._solver_set.SolverSet`), however many members hold it.

    Returns each member's :class:`Surrogate` (its clusters' rows of the shared coefficients), for
    ``BatchedTemperatureSolver(..., surrogate=)``.
    """
    low, high = temperature_bounds(bounds, func=func)
    limits = (math.log(low), math.log(high))
    d_t = np.ascontiguousarray(_NLL(logits, labels).d.T)
    intervals, curvatures = [], []
    for clusters, fit in members:  # a loop over members: each its own interval, on its own rows
        rows = np.isin(cluster_of_row, clusters)
        local = np.searchsorted(clusters, cluster_of_row[rows])
        a, b, curvature = _interval_around(
            np.ascontiguousarray(d_t[:, rows]), local, clusters.shape[0], fit.log_temperature, limits
        )
        intervals.append((a, b))
        curvatures.append(curvature)
    shared = (min(a for a, _ in intervals), max(b for _, b in intervals))

    def certified(errors: NDArray[np.float64]) -> bool:
        return all(
            curvature > 0 and float(errors[clusters].sum()) / curvature <= 1e-3 * CERTIFIED_S_ERROR
            for (clusters, _), curvature in zip(members, curvatures, strict=True)
        )

    degree, coeffs, errors = _interpolant(d_t, cluster_of_row, n_clusters, shared, certified)
    return [Surrogate(shared, degree, coeffs[clusters], errors[clusters]) for clusters, _ in members]
