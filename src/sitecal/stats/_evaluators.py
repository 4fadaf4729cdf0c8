"""Statistic evaluators: a statistic bound to its data and cluster plan, its estimate and replicates.

Sums of per-cluster terms come straight from the drawn indices (:class:`~._drawn_sums.DrawnSums`; several
sum statistics of one plan share one pass, :class:`SharedSums`), other statistics from row weights. Each
resample is reduced independently of the others (no BLAS calls, whose blocking can depend on the batch
shape), so the replicates are bit for bit the same whatever the chunk (:mod:`._resample`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from sitecal.errors import DataError
from sitecal.metrics import SumMetricStatistic
from sitecal.stats._drawn_sums import DrawnSums
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, Draws

__all__ = [
    "Evaluator",
    "EvaluatorSet",
    "PreparedStatistic",
    "SharedSums",
    "SufficientStatistic",
    "auto_chunk_size",
    "make_evaluator",
]


@runtime_checkable
class SufficientStatistic(Protocol):
    """A statistic ``g(sum_i w_i t_i)`` of weighted sums of per-row terms (the fast path).

    ``row_terms(*data)`` returns the terms, shape (N, J); ``from_sums(S)`` maps weighted sums of shape
    (B, J) to the statistic, shape (B,). The engine sums the terms per cluster once, so a resample
    costs O(n_clusters * J) and a jackknife value O(J).
    """

    def row_terms(self, *data: Any) -> NDArray[np.float64]:
        """Per-row terms, shape (N, J)."""
        ...

    def from_sums(self, sums: NDArray[np.float64]) -> NDArray[np.float64]:
        """Statistic from weighted sums, (B, J) -> (B,)."""
        ...


@runtime_checkable
class PreparedStatistic(Protocol):
    """A statistic of per-row weights that wants one-off preparation (validation, sorting).

    ``prepare(*data)`` runs once; ``evaluate(prepared, weights)`` maps row weights (B, N) to (B,).
    An optional ``jackknife(prepared, cluster_of_row, n_clusters) -> (n_clusters,)`` method supplies
    exact leave-one-cluster-out values faster than n_clusters calls of ``evaluate``.
    """

    def prepare(self, *data: Any) -> Any:
        """One-off preparation of the data."""
        ...

    def evaluate(self, prepared: Any, weights: NDArray[np.float64]) -> NDArray[np.float64]:
        """Statistic under row weights, (B, N) -> (B,)."""
        ...


class Evaluator:
    """A statistic bound to its data and plan: estimate, replicates and jackknife values."""

    row_weights: bool  # whether evaluation needs (B, N) row weights
    elements_per_draw: int = 1  # elements per drawn cluster of its largest temporary

    def estimate(self) -> float:
        raise NotImplementedError

    def replicates(self, draws: Draws) -> NDArray[np.float64]:
        raise NotImplementedError

    def jackknife(self, chunk_size: int) -> NDArray[np.float64]:
        raise NotImplementedError


class _SumEvaluator(Evaluator):
    row_weights = False

    def __init__(self, statistic: SufficientStatistic, data: Sequence[Any], plan: ClusterPlan) -> None:
        if isinstance(statistic, SumMetricStatistic) and len(data) == 2:  # from sparse terms: no (N, J) array
            probs, labels = data
            self._cluster_sums = statistic.cluster_sums(probs, labels, plan.cluster_of_row, plan.n_clusters)
        else:
            terms = np.asarray(statistic.row_terms(*data), dtype=np.float64)
            if terms.ndim != 2 or terms.shape[0] != plan.n:
                raise DataError(
                    f"row_terms of {type(statistic).__name__} must return shape ({plan.n}, J). "
                    f"Got {terms.shape}."
                )
            order = np.argsort(plan.cluster_of_row, kind="stable")
            starts = np.searchsorted(plan.cluster_of_row[order], np.arange(plan.n_clusters))
            self._cluster_sums = np.add.reduceat(terms[order], starts, axis=0)  # (K, J), rows in order
        self._drawn: DrawnSums | None = None  # built on first use (SharedSums may sum these columns instead)
        self._statistic = statistic

    @property
    def _sums(self) -> DrawnSums:
        if self._drawn is None:
            self._drawn = DrawnSums(self._cluster_sums)
        return self._drawn

    @property
    def elements_per_draw(self) -> int:  # type: ignore[override]
        return self._sums.elements_per_draw

    @property
    def _total(self) -> NDArray[np.float64]:
        """The total as the resample that draws every cluster once, in order, computes it."""
        k = self._cluster_sums.shape[0]
        total: NDArray[np.float64] = self._sums(np.arange(k, dtype=np.int64)[None, :])[0]
        return total

    @property
    def cluster_sums(self) -> NDArray[np.float64]:
        """Per-cluster sums of the terms, (n_clusters, J)."""
        return self._cluster_sums

    def from_sums(self, sums: NDArray[np.float64]) -> NDArray[np.float64]:
        """The statistic of resampled sums (R, J), shape (R,)."""
        return self._apply(sums)

    def _apply(self, sums: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(self._statistic.from_sums(sums), dtype=np.float64).reshape(sums.shape[0])

    def estimate(self) -> float:
        return float(self._apply(self._total[None, :])[0])

    def replicates(self, draws: Draws) -> NDArray[np.float64]:
        return self._apply(self._sums(draws.indices))

    def jackknife(self, chunk_size: int) -> NDArray[np.float64]:
        return self._apply(self._total[None, :] - self._cluster_sums)


class SharedSums:
    """Several sum evaluators of one plan, their resamples summed through one :class:`DrawnSums`.

    The evaluators' per-cluster sums are laid side by side and a column repeated exactly (the row count
    every metric carries, or the same score under two probability sets) is kept once; each column is
    summed as its own evaluator would sum it (each column on its own, drawn clusters in cluster order), so
    the replicates are bit for bit theirs, for one pass over the draws.
    """

    def __init__(self, evaluators: Sequence[Evaluator]) -> None:
        self._evaluators = [e for e in evaluators if isinstance(e, _SumEvaluator)]
        if len(self._evaluators) != len(evaluators):
            raise TypeError("SharedSums takes sum evaluators only")
        blocks = [e.cluster_sums for e in self._evaluators]
        # a column equal to an earlier one, bit for bit, is read from that one (candidates: equal totals)
        kept: list[NDArray[np.float64]] = []
        by_total: dict[float, list[int]] = {}
        place: list[int] = []  # each column's place among the kept ones, block after block
        for block in blocks:  # a loop over evaluators
            for column in block.T:  # a loop over their columns
                total = float(column.sum())
                same = next((i for i in by_total.get(total, []) if np.array_equal(kept[i], column)), None)
                if same is None:
                    same = len(kept)
                    kept.append(column)
                    by_total.setdefault(total, []).append(same)
                place.append(same)
        self._columns = np.array(place, dtype=np.int64)
        self._bounds = np.cumsum([0] + [b.shape[1] for b in blocks])
        k = blocks[0].shape[0] if blocks else 0
        self._sums = DrawnSums(kept if kept else np.zeros((k, 0)))
        self.row_weights = False
        self.elements_per_draw = self._sums.elements_per_draw

    def replicates(self, draws: Draws) -> list[NDArray[np.float64]]:
        """Each evaluator's replicates for the chunk, in the order given."""
        sums = self._sums(draws.indices)[:, self._columns]
        # each evaluator's block contiguous, as its own DrawnSums gives it: numpy may order a reduction
        # over a strided block's rows differently
        return [
            e.from_sums(np.ascontiguousarray(sums[:, self._bounds[i] : self._bounds[i + 1]]))
            for i, e in enumerate(self._evaluators)
        ]


class EvaluatorSet:
    """Several evaluators of one plan: the sum statistics share one pass over each chunk's draws.

    The sum evaluators are summed through one :class:`SharedSums` (where there are two or more), the
    others one by one; every estimate and replicate is its own evaluator's, bit for bit.
    """

    def __init__(self, evaluators: Sequence[Evaluator]) -> None:
        self.evaluators = list(evaluators)
        self._summed = [i for i, e in enumerate(self.evaluators) if not e.row_weights]
        self._shared = (
            SharedSums([self.evaluators[i] for i in self._summed]) if len(self._summed) > 1 else None
        )

    @property
    def sized(self) -> list[Evaluator | SharedSums]:
        """What a chunk's temporaries are sized by (:func:`auto_chunk_size`)."""
        alone = [e for i, e in enumerate(self.evaluators) if self._shared is None or i not in self._summed]
        return [*alone, *([self._shared] if self._shared is not None else [])]

    def estimates(self, n_clusters: int) -> NDArray[np.float64]:
        """Each evaluator's estimate, shape (E,)."""
        at_total: dict[int, float] = {}
        if self._shared is not None:  # every cluster drawn once, in order: each evaluator's estimate
            everyone = Draws(np.arange(n_clusters, dtype=np.int64)[None, :], n_clusters)
            at_total = {
                i: float(v[0]) for i, v in zip(self._summed, self._shared.replicates(everyone), strict=True)
            }
        return np.array(
            [at_total[i] if i in at_total else e.estimate() for i, e in enumerate(self.evaluators)]
        )

    def replicates(self, draws: Draws) -> NDArray[np.float64]:
        """Each evaluator's replicates of the chunk, shape (E, draws.size)."""
        out: list[NDArray[np.float64] | None] = [None] * len(self.evaluators)
        if self._shared is not None:
            for i, values in zip(self._summed, self._shared.replicates(draws), strict=True):  # statistics
                out[i] = values
        for i, evaluator in enumerate(self.evaluators):  # a loop over statistics, not resamples
            if out[i] is None:
                out[i] = evaluator.replicates(draws)
        return np.array(out).reshape(len(self.evaluators), draws.size)


class _RowEvaluator(Evaluator):
    row_weights = True

    def __init__(
        self,
        func: Callable[[NDArray[np.float64]], Any],
        plan: ClusterPlan,
        name: str,
        jackknife: Callable[[], Any] | None = None,
    ) -> None:
        self._func = func
        self._plan = plan
        self._name = name
        self._fast_jackknife = jackknife

    def _apply(self, row_weights: NDArray[np.float64]) -> NDArray[np.float64]:
        out = np.asarray(self._func(row_weights), dtype=np.float64)
        if out.shape != (row_weights.shape[0],):
            raise DataError(
                f"The statistic {self._name} must return an array of shape (B,) = ({row_weights.shape[0]},) "
                f"for weights of shape {row_weights.shape}. Got shape {out.shape}."
            )
        return out

    def estimate(self) -> float:
        return float(self._apply(np.ones((1, self._plan.n)))[0])

    def replicates(self, draws: Draws) -> NDArray[np.float64]:
        return self._apply(draws.weights[:, self._plan.cluster_of_row])

    def jackknife(self, chunk_size: int) -> NDArray[np.float64]:
        k = self._plan.n_clusters
        if self._fast_jackknife is not None:
            return np.asarray(self._fast_jackknife(), dtype=np.float64).reshape(k)
        out = np.empty(k)
        for start in range(0, k, chunk_size):  # a loop over chunks of left-out clusters
            left_out = np.arange(start, min(k, start + chunk_size))
            weights = (self._plan.cluster_of_row[None, :] != left_out[:, None]).astype(np.float64)
            out[start : start + left_out.shape[0]] = self._apply(weights)
        return out


def make_evaluator(statistic: Any, data: Sequence[Any], plan: ClusterPlan) -> Evaluator:
    """Dispatch on the statistic's kind (sufficient, prepared, or a plain callable)."""
    if isinstance(statistic, SufficientStatistic):
        return _SumEvaluator(statistic, data, plan)
    name = getattr(statistic, "__name__", type(statistic).__name__)
    if isinstance(statistic, PreparedStatistic):
        prepared = statistic.prepare(*data)
        fast = getattr(statistic, "jackknife", None)
        return _RowEvaluator(
            lambda w: statistic.evaluate(prepared, w),
            plan,
            name,
            None if fast is None else (lambda: fast(prepared, plan.cluster_of_row, plan.n_clusters)),
        )
    if callable(statistic):
        return _RowEvaluator(lambda w: statistic(*data, weights=w), plan, name)
    raise DataError(
        "The 'statistic' parameter of bootstrap_interval must be a callable statistic(*data, weights) "
        "-> (B,), or an object with row_terms/from_sums or prepare/evaluate (see "
        f"sitecal.metrics.metric_statistic). Got {type(statistic).__name__}."
    )


def auto_chunk_size(evaluators: Sequence[Evaluator | SharedSums], plan: ClusterPlan, n_resamples: int) -> int:
    """Resamples per chunk so that the largest temporary holds about CHUNK_ELEMENTS elements.

    A sum statistic's sparse columns take ``width`` (key, value) pairs per drawn cluster (``width``: the
    most nonzero entries a cluster holds, e.g. three per study for the debiased ECE's bins), so its
    temporaries are ``width`` times the draws; the chunk is sized by the largest. The replicates do not
    depend on the chunk size.
    """
    width = max(
        [plan.n_clusters * e.elements_per_draw for e in evaluators]
        + [plan.n_clusters]
        + [plan.n for e in evaluators if e.row_weights]
    )
    return max(1, min(n_resamples, CHUNK_ELEMENTS // max(width, 1)))
