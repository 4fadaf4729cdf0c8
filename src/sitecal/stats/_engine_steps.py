"""Steps the bootstrap engines share: argument checks, resampled values, metrics before and after a refit.

``bootstrap_interval`` and ``bootstrap_metrics`` evaluate fixed probabilities on every resample
(:func:`resampled_values`); ``refit_bootstrap`` and ``crossfit_bootstrap`` also refit temperatures in every
resample and measure the evaluated rows before and after them (:class:`BeforeAfter`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_logits, check_option
from sitecal.errors import DataError
from sitecal.metrics import METRIC_NAMES, softmax
from sitecal.stats._evaluators import EvaluatorSet, auto_chunk_size, make_evaluator
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, Draws, map_chunks
from sitecal.stats._spec import BootstrapSpec
from sitecal.stats._term_sums import RefitStatistic, metrics_at_temperatures

__all__ = ["BeforeAfter", "checked_spec", "checked_split", "metric_names", "resampled_values"]


def checked_spec(spec: BootstrapSpec | None, *, func: str) -> BootstrapSpec:
    """``spec``, or ``BootstrapSpec()`` for None; a DataError naming ``func`` for anything else."""
    spec = BootstrapSpec() if spec is None else spec
    if not isinstance(spec, BootstrapSpec):
        raise DataError(f"The 'spec' parameter of {func} must be a BootstrapSpec. Got {type(spec).__name__}.")
    return spec


def metric_names(metrics: Sequence[str], *, func: str) -> tuple[str, ...]:
    """The names of ``metrics``, each one of :data:`~sitecal.metrics.METRIC_NAMES` and listed once."""
    if isinstance(metrics, str):
        raise DataError(f"The 'metrics' parameter of {func} must be a sequence of names, e.g. ('ece',).")
    names = tuple(check_option(m, name="metrics", func=func, options=METRIC_NAMES) for m in metrics)
    if not names or len(set(names)) != len(names):
        raise DataError(
            f"The 'metrics' parameter of {func} must list each metric once. Got {tuple(metrics)!r}."
        )
    return names


def checked_split(
    logits: ArrayLike, labels: ArrayLike, *, which: str, func: str
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """One split's logits (N, C) and labels (N,), checked as ``{which}_logits`` and ``{which}_labels``."""
    z = check_logits(logits, func=func, name=f"{which}_logits")
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func, name=f"{which}_labels")
    return z, y


def resampled_values(
    evaluators: EvaluatorSet, plan: ClusterPlan, *, seed: int, n_resamples: int, chunk_size: int, workers: int
) -> NDArray[Any]:
    """Every evaluator's replicates on the same resamples of ``plan``: shape (E, B).

    The resamples are drawn ``chunk_size`` at a time from the stream ``seed``
    (:func:`~sitecal.stats._resample.map_chunks`), ``workers`` chunks evaluated side by side; the values
    depend on neither. They keep the evaluators' dtype.
    """
    chunks = map_chunks(
        evaluators.replicates,
        plan,
        seed=seed,
        n_resamples=n_resamples,
        chunk_size=chunk_size,
        workers=workers,
    )
    return np.concatenate([values for _, _, values in chunks], axis=1)


@dataclass(frozen=True, eq=False)
class BeforeAfter:
    """The evaluated rows' metrics before calibration and after refitted temperatures, on shared draws.

    "Before" comes from per-cluster sums counted over each resample's draws, as
    :func:`~sitecal.stats.bootstrap_metrics` evaluates it on ``plan``; "after" calibrates each resample's
    drawn rows with that resample's log temperatures (:func:`metrics_at_temperatures`). Both read the
    same draws, so the change is paired.

    Attributes
    ----------
    statistics : tuple
        The statistics evaluated (a metric's companions for the studentised interval included).
    logits : numpy.ndarray, shape (N, C)
    labels : numpy.ndarray of int64, shape (N,)
    plan : ClusterPlan
        The evaluated rows' clusters (``plan.cluster_of_row``) and strata.
    probs : numpy.ndarray, shape (N, C)
        ``softmax(logits)``: the probabilities before calibration.
    before : EvaluatorSet
        The statistics' evaluators of ``probs``.
    row_temperature : numpy.ndarray of int64, shape (N,), or None
        Each row's column of a resample's log temperatures (cross-fitting: its fold); None: one log
        temperature per resample.
    """

    statistics: tuple[RefitStatistic, ...]
    logits: NDArray[np.float64]
    labels: NDArray[np.int64]
    plan: ClusterPlan
    probs: NDArray[np.float64]
    before: EvaluatorSet
    row_temperature: NDArray[np.int64] | None = None

    @classmethod
    def of(
        cls,
        statistics: Sequence[RefitStatistic],
        logits: NDArray[np.float64],
        labels: NDArray[np.int64],
        plan: ClusterPlan,
        row_temperature: NDArray[np.int64] | None = None,
    ) -> BeforeAfter:
        """The pair of ``statistics`` on the evaluated rows (``logits``, ``labels``) of ``plan``."""
        probs = softmax(logits)
        before = EvaluatorSet([make_evaluator(stat, (probs, labels), plan) for stat in statistics])
        return cls(tuple(statistics), logits, labels, plan, probs, before, row_temperature)

    def estimates(self, log_temperature: NDArray[np.float64]) -> NDArray[np.float64]:
        """Each statistic before and after the log temperature fitted on the data, shape (M, 2).

        ``log_temperature``: shape (1,), or (1, N) with each row's own (cross-fitting: its fold's).
        """
        after = metrics_at_temperatures(
            self.statistics, self.logits, self.labels, log_temperature, np.ones((1, self.plan.n))
        )[:, 0]
        return np.stack([self.before.estimates(self.plan.n_clusters), after], axis=1)

    def chunk_size(self, spec: BootstrapSpec, widest: int) -> int:
        """Resamples per chunk: ``spec.chunk_size``, else as many as memory allows.

        That is, no more than :data:`CHUNK_ELEMENTS` weights over ``widest`` columns (the most clusters, or
        rows, that a chunk's weights or solves span) and no more than the evaluators' sums allow
        (:func:`auto_chunk_size`).
        """
        b = spec.n_resamples
        return spec.chunk_size or min(
            max(1, min(b, CHUNK_ELEMENTS // widest)), auto_chunk_size(self.before.sized, self.plan, b)
        )

    def replicates(
        self, chunks: Iterable[tuple[Draws, NDArray[np.float64]]], n_resamples: int, workers: int
    ) -> NDArray[np.float64]:
        """Each statistic before and after, per resample: shape (M, 2, B).

        ``chunks`` gives each chunk's draws of ``plan``'s clusters, in resample order, with the chunk's
        log temperatures: shape (R,), or (R, S) with ``row_temperature``. ``workers`` threads calibrate
        the resamples (the values do not depend on it).
        """
        out = np.empty((len(self.statistics), 2, n_resamples))
        start = 0
        for draws, log_t in chunks:  # a loop over chunks of resamples
            stop = start + draws.size
            out[:, 0, start:stop] = self.before.replicates(draws)
            out[:, 1, start:stop] = metrics_at_temperatures(
                self.statistics,
                self.logits,
                self.labels,
                log_t,
                draws.weights,
                workers=workers,
                row_temperature=self.row_temperature,
                row_cluster=self.plan.cluster_of_row,
            )
            start = stop
        return out
