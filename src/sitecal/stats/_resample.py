"""The resampling engine: cluster plans and seeded draws of resamples (evaluators: :mod:`._evaluators`).

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
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._kernels import draw_counts, stratified_draws
from sitecal.errors import DataError

__all__ = [
    "ClusterPlan",
    "Draws",
    "cluster_ids",
    "draw",
    "draw_chunks",
    "draw_weights",
    "for_each",
    "make_plan",
    "map_chunks",
    "weight_chunks",
]

T = TypeVar("T")

#: Elements per temporary array that the automatic chunk size aims at (64 MiB of float64). The compiled
#: loops read each cluster's entries once per chunk for all its resamples, so a chunk of several
#: resamples saves more memory traffic than the page faults of arrays above glibc's mmap threshold cost.
CHUNK_ELEMENTS = 1 << 23


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
        return draw_counts(self.indices, self.n_clusters)


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
    return Draws(stratified_draws(rng.random((size, k)), plan.stratum_size, plan.stratum_start), k)


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


def for_each(func: Callable[[int], None], n: int, workers: int = 1) -> None:
    """Call ``func(i)`` for ``i`` in ``range(n)``, in a pool of ``workers`` threads when above 1.

    For per-resample work that writes its own slot of an output: numpy's loops and the compiled
    kernels release the GIL, so resamples run side by side, and each result is the same whichever
    thread computes it. An exception in any call is raised here.
    """
    if workers <= 1 or n <= 1:
        for i in range(n):  # a loop over resamples
            func(i)
        return
    with ThreadPoolExecutor(max_workers=min(workers, n), thread_name_prefix="sitecal-resample") as pool:
        for _ in pool.map(func, range(n)):  # a loop over results, to raise the first exception
            pass


def weight_chunks(
    plan: ClusterPlan, *, seed: int, n_resamples: int, chunk_size: int
) -> Iterator[NDArray[np.float64]]:
    """Yield cluster weights for all resamples, ``chunk_size`` at a time, from one seeded stream."""
    for chunk in draw_chunks(plan, seed=seed, n_resamples=n_resamples, chunk_size=chunk_size):
        yield chunk.weights
