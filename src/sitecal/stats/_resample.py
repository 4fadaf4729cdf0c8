"""The resampling engine: cluster plans, seeded weight draws, and statistic evaluators.

A resample is a draw of clusters with replacement (``Draws.indices``), equivalently a vector of
integer weights over clusters (how many times each cluster was drawn; a row's weight is its
cluster's). Statistics are evaluated for a whole chunk of resamples at once: sums of per-cluster
terms straight from the drawn indices (:class:`DrawnSums`), other statistics from row weights.

Reproducibility: the draws for resample ``b`` are uniform doubles ``u[b, :]`` taken in order from
``numpy.random.default_rng(seed)``, whose stream of doubles does not depend on how it is split
into calls, so the resamples are bit-for-bit the same whatever ``chunk_size``. The built-in
evaluators reduce each resample independently of the others (no BLAS calls, whose blocking can
depend on the batch shape), so the replicates are bit-for-bit the same too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.errors import DataError
from sitecal.metrics import SumMetricStatistic
from sitecal.stats._drawn_sums import DrawnSums

__all__ = [
    "ClusterPlan",
    "Draws",
    "PreparedStatistic",
    "SharedSums",
    "SufficientStatistic",
    "cluster_ids",
    "draw",
    "draw_chunks",
    "draw_weights",
    "make_evaluator",
    "make_plan",
    "map_chunks",
    "weight_chunks",
]

T = TypeVar("T")

#: Elements per temporary array that the automatic chunk size aims at (16 MiB of float64: below
#: glibc's largest mmap threshold, so freed chunks are reused instead of page-faulted in again).
CHUNK_ELEMENTS = 1 << 21


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


@dataclass(frozen=True)
class ClusterPlan:
    """Clusters numbered contiguously within strata, ready for vectorised draws.

    Attributes
    ----------
    n : int
        Rows.
    cluster_of_row : numpy.ndarray of int64, shape (n,)
        Cluster number of each row; clusters of one stratum have consecutive numbers.
    n_clusters : int
    n_strata : int
    stratum_start, stratum_size : numpy.ndarray of int64, shape (n_clusters,)
        For each cluster, the first cluster number of its stratum and the stratum's cluster count.
    """

    n: int
    cluster_of_row: NDArray[np.int64]
    n_clusters: int
    n_strata: int
    stratum_start: NDArray[np.int64]
    stratum_size: NDArray[np.int64]


def _codes(
    value: ArrayLike | None, *, n: int, name: str, func: str
) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """Return the unique labels and an integer code per row of a clusters/strata column."""
    if value is None:
        return np.arange(n), np.arange(n, dtype=np.int64)
    array = np.asarray(value)
    if array.ndim != 1 or array.shape[0] != n:
        raise DataError(
            f"The {name!r} parameter of {func} must have shape ({n},), one entry per row of the data. "
            f"Got shape {array.shape}."
        )
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise DataError(f"The {name!r} parameter of {func} must not contain NaN or infinite values.")
    if array.dtype.kind not in "biufUSO":
        raise DataError(
            f"The {name!r} parameter of {func} must hold ids (str or int). Got dtype {array.dtype}."
        )
    try:
        labels, codes = np.unique(array, return_inverse=True)
    except TypeError as exc:  # mixed types in an object array
        raise DataError(
            f"The {name!r} parameter of {func} must hold ids of one type (all str or all int) ({exc})."
        ) from exc
    return labels, codes.reshape(-1).astype(np.int64)


def cluster_ids(*columns: ArrayLike) -> tuple[NDArray[Any], ...]:
    """Cluster columns as ids of one kind: integers kept (their order is their sort), otherwise str.

    Integer ids sort as numbers; turned into text they would sort as text ("10" before "9") and number
    the clusters, hence draw the resamples, differently. Mixed kinds all become str.
    """
    arrays = [np.asarray(c) for c in columns]
    if all(a.dtype.kind in "iu" for a in arrays):
        return tuple(a.astype(np.int64) for a in arrays)
    return tuple(a.astype(str) for a in arrays)


def make_plan(n: int, clusters: ArrayLike | None, strata: ArrayLike | None, *, func: str) -> ClusterPlan:
    """Build the plan; each cluster must lie in exactly one stratum."""
    cluster_labels, cluster_code = _codes(clusters, n=n, name="clusters", func=func)
    k = int(cluster_labels.shape[0])
    if strata is None:
        stratum_of_cluster = np.zeros(k, dtype=np.int64)
        n_strata = 1
    else:
        strata_labels, stratum_code = _codes(strata, n=n, name="strata", func=func)
        n_strata = int(strata_labels.shape[0])
        stratum_of_cluster = np.empty(k, dtype=np.int64)
        stratum_of_cluster[cluster_code] = stratum_code
        mismatch = stratum_of_cluster[cluster_code] != stratum_code
        if mismatch.any():
            row = int(np.flatnonzero(mismatch)[0])
            c = cluster_code[row]
            one, other = strata_labels[stratum_code[row]].item(), strata_labels[stratum_of_cluster[c]].item()
            raise DataError(
                f"The 'clusters' parameter of {func} must nest within 'strata': cluster "
                f"{cluster_labels[c].item()!r} has rows in strata {one!r} and {other!r}. "
                "Whole clusters (patients) are resampled "
                "within a stratum, so each needs exactly one; stratify by a patient-level attribute "
                "or pass strata=None."
            )
    # renumber clusters so that each stratum's clusters are consecutive
    order = np.lexsort((np.arange(k), stratum_of_cluster))
    rank = np.empty(k, dtype=np.int64)
    rank[order] = np.arange(k)
    sorted_stratum = stratum_of_cluster[order]
    sizes = np.bincount(sorted_stratum, minlength=n_strata).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return ClusterPlan(
        n=n,
        cluster_of_row=rank[cluster_code],
        n_clusters=k,
        n_strata=n_strata,
        stratum_start=starts[sorted_stratum],
        stratum_size=sizes[sorted_stratum],
    )


@dataclass(frozen=True, eq=False)
class Draws:
    """One chunk of resamples: the cluster drawn at each position, and (on demand) cluster weights.

    Attributes
    ----------
    indices : numpy.ndarray of int64, shape (size, n_clusters)
        ``indices[b, j]``: the cluster that replaces cluster ``j`` in resample ``b``.
    n_clusters : int
    """

    indices: NDArray[np.int64]
    n_clusters: int

    @property
    def size(self) -> int:
        """Resamples in the chunk."""
        return int(self.indices.shape[0])

    @property
    def weights(self) -> NDArray[np.float64]:
        """How many times each cluster was drawn, shape (size, n_clusters), float64."""
        size, k = self.size, self.n_clusters
        flat = (self.indices + (np.arange(size, dtype=np.int64) * k)[:, None]).reshape(-1)
        return np.bincount(flat, minlength=size * k).reshape(size, k).astype(np.float64)


def draw(plan: ClusterPlan, rng: np.random.Generator, size: int) -> Draws:
    """Draw ``size`` resamples, each stratum resampled apart.

    Draw ``j`` of a resample replaces cluster ``j`` by a cluster drawn uniformly, with replacement,
    from cluster ``j``'s stratum. One stratum: ``rng.integers(0, n_clusters, (size, n_clusters))``.
    Several: ``start + floor(u * stratum_size)`` with ``u = rng.random((size, n_clusters))``. Both
    consume the stream element by element in row-major order, so resample ``b`` is the same however
    the resamples are split into calls (a test pins this).
    """
    k = plan.n_clusters
    if plan.n_strata == 1:
        return Draws(rng.integers(0, k, size=(size, k), dtype=np.int64), k)
    indices = np.floor(rng.random((size, k)) * plan.stratum_size).astype(np.int64)
    np.minimum(indices, plan.stratum_size - 1, out=indices)
    indices += plan.stratum_start
    return Draws(indices, k)


def draw_weights(plan: ClusterPlan, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
    """Cluster weights of ``size`` resamples, shape (size, n_clusters) (see :func:`draw`)."""
    return draw(plan, rng, size).weights


def draw_chunks(plan: ClusterPlan, *, seed: int, n_resamples: int, chunk_size: int) -> Iterator[Draws]:
    """Yield all resamples, ``chunk_size`` at a time, from one seeded stream."""
    rng = np.random.default_rng(seed)
    for start in range(0, n_resamples, chunk_size):  # a loop over chunks
        yield draw(plan, rng, min(chunk_size, n_resamples - start))


def map_chunks(
    func: Callable[[Draws], T],
    plan: ClusterPlan,
    *,
    seed: int,
    n_resamples: int,
    chunk_size: int,
    workers: int = 1,
) -> Iterator[tuple[int, int, T]]:
    """Yield ``(start, stop, func(draws))`` for consecutive chunks of resamples, in order.

    The draws come from one seeded stream, taken in order in the calling thread, so the resamples
    are those of :func:`draw_chunks`; with ``workers > 1``, ``func`` runs in a thread pool (numpy
    releases the GIL in its loops), with at most ``2 * workers`` chunks in flight so that memory
    stays bounded. ``func`` must not depend on the order in which chunks finish.
    """
    rng = np.random.default_rng(seed)

    bounds = [(a, min(n_resamples, a + chunk_size)) for a in range(0, n_resamples, chunk_size)]
    if workers <= 1 or len(bounds) == 1:
        for start, stop in bounds:  # a loop over chunks
            yield start, stop, func(draw(plan, rng, stop - start))
        return
    pending: deque[tuple[int, int, Future[T]]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sitecal-bootstrap") as pool:
        for start, stop in bounds:  # a loop over chunks
            pending.append((start, stop, pool.submit(func, draw(plan, rng, stop - start))))
            if len(pending) >= 2 * workers:
                a, b, future = pending.popleft()
                yield a, b, future.result()
        while pending:
            a, b, future = pending.popleft()
            yield a, b, future.result()


def weight_chunks(
    plan: ClusterPlan, *, seed: int, n_resamples: int, chunk_size: int
) -> Iterator[NDArray[np.float64]]:
    """Yield cluster weights for all resamples, ``chunk_size`` at a time, from one seeded stream."""
    for chunk in draw_chunks(plan, seed=seed, n_resamples=n_resamples, chunk_size=chunk_size):
        yield chunk.weights


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
    summed as its own evaluator would sum it (dense columns one by one, sparse ones keyed per resample and
    column in draw order), so the replicates are bit for bit theirs, for one pass over the draws.
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
