"""The fit split's temperature in every resample of a refit bootstrap: batched refits, or precomputed values.

:func:`~sitecal.stats.refit_bootstrap` fits ``T_b`` on each resample of the fit split (all ``B`` fits of a
chunk in one batched solve, :class:`~sitecal.calibration.BatchedTemperatureSolver`), or takes precomputed
log temperatures (e.g. empirical-Bayes shrunk ones); ``bootstrap_temperature`` uses the same solves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.calibration import BatchedTemperatureSolver, TemperatureFit, fit_validated, temperature_bounds
from sitecal.errors import DataError
from sitecal.stats._refit_result import fit_stream_seed
from sitecal.stats._resample import ClusterPlan, draw_chunks
from sitecal.stats._spec import BootstrapSpec

__all__ = ["FitTemperature", "Given", "Solved", "precomputed", "solve_resamples"]

_FUNC = "refit_bootstrap"

#: Precomputed log temperatures: the estimate, the (B,) replicates, and the jackknife values (or None).
Given = tuple[float, NDArray[np.float64], NDArray[np.float64] | None]


@dataclass(frozen=True, eq=False)
class Solved:
    """Each resample's fitted log T, shape (B,), and what the batched solves certify (see RefitIntervals)."""

    log_temperature: NDArray[np.float64]
    n_exact: int
    n_at_bound: int
    max_error_bound: float


def solve_resamples(
    solver: BatchedTemperatureSolver, plan: ClusterPlan, spec: BootstrapSpec, chunk: int
) -> Solved:
    """Fit log T on every resample of the fit split (stream ``fit_stream_seed(spec.seed)``), by chunks."""
    s_rep = np.empty(spec.n_resamples)
    n_exact = n_bound = 0
    max_err = 0.0
    start = 0
    chunks = draw_chunks(
        plan, seed=fit_stream_seed(spec.seed), n_resamples=spec.n_resamples, chunk_size=chunk
    )
    for draws in chunks:  # a loop over chunks of resamples
        sol = solver.solve(draws.weights)
        stop = start + draws.size
        s_rep[start:stop] = sol.log_temperature
        n_exact += int(sol.exact.sum())
        n_bound += int(np.count_nonzero(sol.bound))
        max_err = max(max_err, float(sol.error_bound.max()))
        start = stop
    return Solved(s_rep, n_exact, n_bound, max_err)


@dataclass(frozen=True, eq=False)
class FitTemperature:
    """The fit split's temperature: fitted by the batched solver, or precomputed (``given``).

    Attributes
    ----------
    fit : TemperatureFit
        The fit on the whole fit split.
    estimate : float
        The point estimate of log T: the fit's, or the precomputed one.
    plan : ClusterPlan
        The fit split's.
    solver : BatchedTemperatureSolver or None
        None with precomputed temperatures.
    given : (float, numpy.ndarray, numpy.ndarray or None) or None
        The precomputed estimate, replicates and jackknife values (see :func:`precomputed`).
    """

    fit: TemperatureFit
    estimate: float
    plan: ClusterPlan
    solver: BatchedTemperatureSolver | None
    given: Given | None

    @classmethod
    def of(
        cls,
        z: NDArray[np.float64],
        y: NDArray[np.int64],
        plan: ClusterPlan,
        bounds: tuple[float, float],
        given: Given | None,
    ) -> FitTemperature:
        """The batched solver of the fit split (within ``bounds``), or its fit beside the ``given`` values."""
        if given is None:
            solver = BatchedTemperatureSolver(
                z, y, plan.cluster_of_row, plan.n_clusters, bounds=bounds, func=_FUNC
            )
            return cls(solver.fit, solver.fit.log_temperature, plan, solver, None)
        low, high = temperature_bounds(bounds, func=_FUNC)
        fit = fit_validated(z, y, tol=1e-10, max_iter=100, low=low, high=high)
        return cls(fit, given[0], plan, None, given)

    def replicates(self, spec: BootstrapSpec, chunk: int) -> Solved:
        """Each resample's log T: refitted on the resampled fit split, or the precomputed values."""
        if self.given is not None:
            return Solved(self.given[1].copy(), 0, 0, 0.0)
        assert self.solver is not None
        return solve_resamples(self.solver, self.plan, spec, chunk)

    def jackknife(self) -> NDArray[np.float64] | None:
        """Leave-one-fit-cluster-out log T: the precomputed values, or exact refits (None: one cluster)."""
        if self.given is not None:
            return self.given[2]
        assert self.solver is not None
        return self.solver.jackknife().log_temperature if self.solver.n_clusters > 1 else None


def precomputed(
    estimate: float | None, replicates: ArrayLike | None, jackknife: ArrayLike | None, spec: BootstrapSpec
) -> tuple[float, NDArray[np.float64], NDArray[np.float64] | None] | None:
    """Validate precomputed log temperatures: None, or (estimate, (B,) replicates, jackknife or None)."""
    func = "refit_bootstrap"
    if estimate is None and replicates is None and jackknife is None:
        return None
    if estimate is None or replicates is None:
        raise DataError(
            f"The 'log_temperature' and 'log_temperature_replicates' parameters of {func} go together: pass "
            "both (precomputed temperatures) or neither (fit T in every resample)."
        )
    s0 = float(estimate)
    rep = np.asarray(replicates, dtype=np.float64)
    if rep.shape != (spec.n_resamples,) or not (math.isfinite(s0) and np.isfinite(rep).all()):
        raise DataError(
            f"The 'log_temperature_replicates' parameter of {func} must hold spec.n_resamples = "
            f"{spec.n_resamples} finite values, shape ({spec.n_resamples},), with a finite "
            f"'log_temperature'. Got shape {rep.shape}."
        )
    jk = None
    if jackknife is not None:
        jk = np.array(jackknife, dtype=np.float64).reshape(-1)
        if not np.isfinite(jk).all():
            raise DataError(f"The 'log_temperature_jackknife' parameter of {func} must be finite.")
    elif spec.method == "bca":
        raise DataError(
            f"The 'log_temperature_jackknife' parameter of {func} is required with precomputed temperatures "
            "and spec.method='bca' (the acceleration needs the fit part's influence); pass the "
            "leave-one-cluster-out values, or use method='percentile'."
        )
    return s0, rep, jk
