"""Per-resample sums of per-cluster columns, computed straight from drawn cluster indices."""

from __future__ import annotations

import threading

import numpy as np
from numpy.typing import NDArray

__all__ = ["DrawnSums"]


class DrawnSums:
    """Per-resample sums of per-cluster columns, straight from the drawn cluster indices.

    Resample ``b``'s sum of column ``j`` is ``sum_d S[indices[b, d], j]``. Columns that are nonzero
    for most clusters are gathered and summed; the others (a binned metric's per-bin columns, where a
    one-row cluster touches one bin) are stored per cluster as (column, value) pairs and summed with
    one ``numpy.bincount`` over (resample, column), so a resample costs about one pass over its draws
    whatever the number of bins. Each resample's sums are accumulated in draw order from its own
    draws only, so they do not depend on the chunk.
    """

    def __init__(self, cluster_sums: NDArray[np.float64]) -> None:
        k, j = cluster_sums.shape
        self.n_columns = j
        self._local = threading.local()
        nonzero = cluster_sums != 0.0
        constant = np.all(cluster_sums == cluster_sums[:1], axis=0)
        sparse = (nonzero.sum(axis=0) * 4 <= k) & ~constant
        # a constant column (the row count of one-row clusters) sums to value x draws, exactly
        self._constant = [(int(c), float(cluster_sums[0, c]) * k) for c in np.flatnonzero(constant)]
        self._dense = [
            (int(c), np.ascontiguousarray(cluster_sums[:, c])) for c in np.flatnonzero(~(sparse | constant))
        ]
        self._sparse = np.flatnonzero(sparse)
        values = cluster_sums[:, self._sparse]
        rows, cols = np.nonzero(values)  # row-major: sorted by cluster, then column
        per_cluster = np.bincount(rows, minlength=k)
        width = max(1, int(per_cluster.max(initial=0)))
        slot = np.arange(rows.shape[0]) - np.concatenate([[0], np.cumsum(per_cluster)[:-1]])[rows]
        self._width = width
        self._cols = np.full((k, width), self._sparse.shape[0], dtype=np.int64)  # padding: spare column
        self._vals = np.zeros((k, width))
        self._cols[rows, slot] = cols
        self._vals[rows, slot] = values[rows, cols]
        if width == 1:  # one entry per cluster: 1-D arrays gather faster
            self._cols, self._vals = self._cols[:, 0].copy(), self._vals[:, 0].copy()
        #: Elements per drawn cluster of the largest temporary (the (draws, width) sparse keys and values)
        self.elements_per_draw = width if self._sparse.shape[0] else 1

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
            keys, vals = self._buffers(indices.shape + self._cols.shape[1:])
            # indices are in range by construction: mode="clip" skips numpy's bounds check (faster)
            np.take(self._cols, indices, axis=0, mode="clip", out=keys)
            keys += offset[:, None] if self._width == 1 else offset[:, None, None]
            np.take(self._vals, indices, axis=0, mode="clip", out=vals)
            sums = np.bincount(keys.reshape(-1), vals.reshape(-1), minlength=size * stride)
            out[:, self._sparse] = sums.reshape(size, stride)[:, :n_sparse]
        return out
