"""The result of a refit bootstrap (:class:`RefitIntervals`) and the seed of its fit-split draws.

:func:`sitecal.stats.refit_bootstrap` builds it; ``bootstrap_temperature`` uses the same draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sitecal.calibration import TemperatureFit
from sitecal.stats._intervals import interval_result
from sitecal.stats._replicate_table import MetricTable, ReplicateTable
from sitecal.stats._resample import ClusterPlan
from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = ["PROB_SETS", "RefitIntervals", "fit_stream_seed"]


PROB_SETS = ("before", "after")


def fit_stream_seed(seed: int) -> int:
    """Seed of the fit split's resampling stream, derived from ``spec.seed`` (independent of it).

    The evaluation split is resampled from ``numpy.random.default_rng(seed)`` itself, exactly as
    :func:`~sitecal.stats.bootstrap_metrics` would; the fit split from
    ``default_rng(fit_stream_seed(seed))``, with ``SeedSequence(seed).spawn``'s first child's state.
    """
    child = np.random.SeedSequence(seed).spawn(1)[0]
    return int(child.generate_state(1, np.uint64)[0] >> np.uint64(1))


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    a.setflags(write=False)
    return a


def _result(
    estimate: float,
    replicates: NDArray[np.float64],
    jackknife: NDArray[np.float64] | None,
    *,
    spec: BootstrapSpec,
    plan: ClusterPlan,
    note: str = "",
) -> BootstrapResult:
    return interval_result(
        estimate,
        replicates,
        jackknife,
        spec=spec,
        n=plan.n,
        n_clusters=plan.n_clusters,
        n_strata=plan.n_strata,
        note=note,
    )


@dataclass(frozen=True, eq=False)
class RefitIntervals(MetricTable):
    """Intervals of metrics before and after a temperature refitted in every resample.

    Attributes
    ----------
    table : ReplicateTable
        Metrics by ("before", "after") on the evaluation split's sizes: ``metrics``, ``prob_sets``,
        ``spec``, ``estimates`` (M, 2), ``replicates`` (M, 2, B) and ``jackknife`` ((M, 2, J) scaled
        influence values for BCa's acceleration, see :func:`refit_bootstrap`) read from it, as do
        :meth:`get` and :meth:`difference`.
    n_bins : int
    fit : TemperatureFit
        The temperature fitted on the whole fit split (the point estimate).
    fit_plan, eval_plan : ClusterPlan
        Rows, clusters and strata of each split.
    log_temperature_replicates : numpy.ndarray, shape (B,)
        ``s_b = log T_b``. Read-only.
    log_temperature_jackknife : numpy.ndarray or None, shape (fit clusters,)
        Leave-one-fit-cluster-out ``log T`` (BCa only).
    n_exact : int
        Resamples whose ``T_b`` came from the exact solver rather than the certified surrogate.
    n_at_bound : int
        Resamples whose fit stopped on a bound of T.
    max_error_bound : float
        Largest certified bound on ``|log T_b - log T_b*|`` over the resamples.
    log_temperature_estimate : float or None
        With precomputed temperatures (``refit_bootstrap(log_temperature=...)``): the point log T the
        after-calibration estimates use, and the estimate of ``.temperature``; None: ``fit``'s.
    """

    table: ReplicateTable
    n_bins: int
    fit: TemperatureFit
    fit_plan: ClusterPlan
    eval_plan: ClusterPlan
    log_temperature_replicates: NDArray[np.float64]
    log_temperature_jackknife: NDArray[np.float64] | None
    n_exact: int
    n_at_bound: int
    max_error_bound: float
    log_temperature_estimate: float | None = None

    @property
    def _s0(self) -> float:
        s = self.log_temperature_estimate
        return self.fit.log_temperature if s is None else s

    def _bound_note(self) -> str:
        if not self.n_at_bound:
            return ""
        return f"{self.n_at_bound} of {self.spec.n_resamples} resampled fits stopped on a bound of T."

    @property
    def log_temperature(self) -> BootstrapResult:
        """Interval of ``log T`` (fit split's sizes)."""
        return _result(
            self._s0,
            self.log_temperature_replicates,
            self.log_temperature_jackknife,
            spec=self.spec,
            plan=self.fit_plan,
            note=self._bound_note(),
        )

    @property
    def temperature(self) -> BootstrapResult:
        """Interval of ``T`` (the exponential of the log T interval's replicates)."""
        jk = self.log_temperature_jackknife
        return _result(
            self.fit.temperature if self.log_temperature_estimate is None else math.exp(self._s0),
            np.exp(self.log_temperature_replicates),
            None if jk is None else np.exp(jk),
            spec=self.spec,
            plan=self.fit_plan,
            note=self._bound_note(),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: spec, split sizes, the fit, T and log T intervals, metrics and differences."""
        sizes = {
            name: {"n": p.n, "n_clusters": p.n_clusters, "n_strata": p.n_strata}
            for name, p in (("fit", self.fit_plan), ("eval", self.eval_plan))
        }
        return {
            "spec": self.spec.to_dict(),
            "fit_stream_seed": fit_stream_seed(self.spec.seed),
            "n_bins": self.n_bins,
            "splits": sizes,
            "fit": self.fit.to_dict(),
            "temperature": self.temperature.to_dict(),
            "log_temperature": self.log_temperature.to_dict(),
            "n_exact": self.n_exact,
            "n_at_bound": self.n_at_bound,
            "max_error_bound": self.max_error_bound,
            **self.table.to_dict([("after", "before")]),
        }
