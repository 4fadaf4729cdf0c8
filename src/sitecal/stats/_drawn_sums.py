"""Per-resample sums of per-cluster columns, computed straight from drawn cluster indices."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["DrawnSums"]

#: A padded table wider than this many times the mean entries per cluster is read run by run instead.
_RAGGED_FACTOR = 2.5


class DrawnSums:
    """Per-resample sums of per-cluster columns, straight from the drawn cluster indices.

    Resample ``b``'s sum of column ``j`` is ``sum_d S[indices[b, d], j]``. Columns that are nonzero
    for most clusters are gathered and summed; the others (a binned metric's per-bin columns, where a
    one-row cluster touches one bin) are stored per cluster as (column, value) pairs and summed with
    one ``numpy.bincount`` over (resample, column), so a resample costs about one pass over its draws
    whatever the number of bins. Each resample's sums are accumulated in draw order from its own
    draws only, so they do not depend on the chunk.
    """

    def __init__(self, cluster_sums: NDArray[np.float64] | Sequence[NDArray[np.float64]]) -> None:
        """``cluster_sums``: (n_clusters, J), or its J columns (each (n_clusters,)) as a sequence."""
        if isinstance(cluster_sums, np.ndarray):
            k = int(cluster_sums.shape[0])
            columns = [np.ascontiguousarray(c) for c in cluster_sums.T]
        else:
            columns = [np.ascontiguousarray(c, dtype=np.float64) for c in cluster_sums]
            k = int(columns[0].shape[0]) if columns else 0
        self.n_columns = len(columns)
        self._local = threading.local()
        constant = [k > 0 and bool(np.all(c == c[0])) for c in columns]
        sparse = [
            np.count_nonzero(c) * 4 <= k and not const for c, const in zip(columns, constant, strict=True)
        ]
        # a constant column (the row count of one-row clusters) sums to value x draws, exactly
        self._constant = [(j, float(c[0]) * k) for j, c in enumerate(columns) if constant[j]]
        self._dense = [(j, c) for j, c in enumerate(columns) if not (sparse[j] or constant[j])]
        self._sparse = np.flatnonzero(np.array(sparse, dtype=bool))
        # entries of each cluster, in (cluster, column) order: a draw reads its cluster's run of them
        nonzero = [np.flatnonzero(columns[j]) for j in self._sparse.tolist()]
        per_cluster = np.zeros(k, dtype=np.int64)
        for clusters in nonzero:  # a loop over sparse columns
            per_cluster[clusters] += 1
        width = max(1, int(per_cluster.max(initial=0)))
        self._nnz = per_cluster
        self._start = np.concatenate([[0], np.cumsum(per_cluster)[:-1]]).astype(np.int64)
        total = int(per_cluster.sum())
        self._flat_cols = np.empty(total, dtype=np.int64)
        self._flat_vals = np.empty(total)
        fill = self._start.copy()
        for s, (j, clusters) in enumerate(
            zip(self._sparse.tolist(), nonzero, strict=True)
        ):  # columns in order
            at = fill[clusters]
            self._flat_cols[at] = s
            self._flat_vals[at] = columns[j][clusters]
            fill[clusters] += 1
        # a padded (k, width) table is gathered whole per draw; where a long tail of cluster sizes (many
        # studies of one patient) makes it mostly padding, each draw's own run is read instead. Either
        # way a sum adds its entries in draw order, so the two give the same sums bit for bit
        self._ragged = width > _RAGGED_FACTOR * max(float(per_cluster.mean()) if k else 0.0, 1.0)
        self._width = width
        if not self._ragged:
            rows = np.repeat(np.arange(k, dtype=np.int64), per_cluster)
            slot = np.arange(total, dtype=np.int64) - self._start[rows]
            self._cols = np.full((k, width), self._sparse.shape[0], dtype=np.int64)  # padding: spare column
            self._vals = np.zeros((k, width))
            self._cols[rows, slot] = self._flat_cols
            self._vals[rows, slot] = self._flat_vals
            if width == 1:  # one entry per cluster: 1-D arrays gather faster
                self._cols, self._vals = self._cols[:, 0].copy(), self._vals[:, 0].copy()
        #: Elements per drawn cluster of the largest temporary (the (draws, width) sparse keys and values)
        self.elements_per_draw = (3 if self._ragged else width) if self._sparse.shape[0] else 1

    def _buffers(self, shape: tuple[int, ...]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The calling thread's key and value buffers, reused across chunks of the same shape.

        Reuse avoids the allocator handing back fresh pages (page faults) for every chunk.
        """
        cached = getattr(self._local, "buffers", None)
        if cached is None or cached[0].shape != shape:
            cached = (np.empty(shape, dtype=np.int64), np.empty(shape, dtype=np.float64))
            self._local.buffers = cached
        return cached

    def __call__(self, indices: NDArray[np.int64]) -> NDArray[np.float64]:
        size = indices.shape[0]
        out = np.empty((size, self.n_columns))
        for c, value in self._constant:
            out[:, c] = value
        for c, column in self._dense:  # a loop over dense columns (row counts of clusters, scores)
            out[:, c] = np.take(column, indices, mode="clip").sum(axis=1)
        n_sparse = self._sparse.shape[0]
        if n_sparse:
            stride = n_sparse + 1
            offset = np.arange(size, dtype=np.int64) * stride
            if self._ragged:
                sums = self._ragged_sums(indices, offset, size * stride)
            else:
                keys, vals = self._buffers(indices.shape + self._cols.shape[1:])
                # indices are in range by construction: mode="clip" skips numpy's bounds check (faster)
                np.take(self._cols, indices, axis=0, mode="clip", out=keys)
                keys += offset[:, None] if self._width == 1 else offset[:, None, None]
                np.take(self._vals, indices, axis=0, mode="clip", out=vals)
                sums = np.bincount(keys.reshape(-1), vals.reshape(-1), minlength=size * stride).astype(
                    np.float64
                )
            out[:, self._sparse] = sums.reshape(size, stride)[:, :n_sparse]
        return out

    def _ragged_sums(
        self, indices: NDArray[np.int64], offset: NDArray[np.int64], length: int
    ) -> NDArray[np.float64]:
        """Per (resample, column) sums from each draw's own run of entries, in draw order."""
        flat = indices.reshape(-1)
        counts = self._nnz[flat]
        ends = np.cumsum(counts)
        total = int(ends[-1]) if ends.shape[0] else 0
        # entry e of the chunk is entry (e - first entry of its draw) of its draw's cluster's run
        position = np.arange(total, dtype=np.int64) + np.repeat(self._start[flat] - (ends - counts), counts)
        per_resample = counts.reshape(indices.shape).sum(axis=1)
        keys = self._flat_cols[position] + np.repeat(offset, per_resample)
        out: NDArray[np.float64] = np.bincount(keys, self._flat_vals[position], minlength=length).astype(
            np.float64
        )
        return out
