"""Per-resample sums of per-cluster columns, computed straight from drawn cluster indices."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels import counted_sums

__all__ = ["DrawnSums"]


class DrawnSums:
    """Per-resample sums of per-cluster columns, straight from the drawn cluster indices.

    Resample ``b``'s sum of column ``j`` is ``sum_d S[indices[b, d], j]``, i.e. ``sum_c n_b(c) S[c, j]``
    with ``n_b(c)`` the times cluster ``c`` was drawn. The nonzero entries of ``S`` are stored cluster by
    cluster, and a compiled loop (:func:`~sitecal._kernels.counted_sums`) counts each resample's draws and
    adds ``n_b(c) * S[c, j]`` over the drawn clusters in cluster order: one pass over the clusters whatever
    the number of columns or bins, and the sums depend on the resample's own counts only (not on the
    chunk or the thread). A column constant over the clusters (the row count of one-row clusters) sums
    to value x draws, exactly.
    """

    def __init__(self, cluster_sums: NDArray[np.float64] | Sequence[NDArray[np.float64]]) -> None:
        """``cluster_sums``: (n_clusters, J), or its J columns (each (n_clusters,)) as a sequence."""
        if isinstance(cluster_sums, np.ndarray):
            k = int(cluster_sums.shape[0])
            columns = [np.ascontiguousarray(c, dtype=np.float64) for c in cluster_sums.T]
        else:
            columns = [np.ascontiguousarray(c, dtype=np.float64) for c in cluster_sums]
            k = int(columns[0].shape[0]) if columns else 0
        self.n_columns = len(columns)
        constant = [k > 0 and bool(np.all(c == c[0])) for c in columns]
        self._constant = [(j, float(c[0]) * k) for j, c in enumerate(columns) if constant[j]]
        summed = [j for j in range(self.n_columns) if not constant[j]]
        self._summed = np.array(summed, dtype=np.int64)
        # nonzero entries in (cluster, column) order: cluster c's are [start[c], stop[c])
        nonzero = [np.flatnonzero(columns[j]) for j in summed]
        per_cluster = np.zeros(k, dtype=np.int64)
        for clusters in nonzero:  # a loop over summed columns
            per_cluster[clusters] += 1
        self._stop = np.cumsum(per_cluster)
        self._start = self._stop - per_cluster
        total = int(self._stop[-1]) if k else 0
        self._cols = np.empty(total, dtype=np.int64)
        self._vals = np.empty(total)
        fill = self._start.copy()
        for s, (j, clusters) in enumerate(zip(summed, nonzero, strict=True)):  # columns in order
            at = fill[clusters]
            self._cols[at] = s
            self._vals[at] = columns[j][clusters]
            fill[clusters] += 1
        self._finite = bool(np.isfinite(self._vals).all())
        #: Elements per drawn cluster of the largest temporary (the drawn indices themselves)
        self.elements_per_draw = 1

    @classmethod
    def from_entries(
        cls,
        cluster: NDArray[np.int64],
        column: NDArray[np.int64],
        value: NDArray[np.float64],
        n_clusters: int,
        n_columns: int,
    ) -> DrawnSums:
        """The sums of per-row entries (each row adds ``value`` to its cluster's ``column``), kept sparse.

        What ``DrawnSums`` of the dense (n_clusters, n_columns) per-cluster sums would hold, without the
        dense array: the entries of each (cluster, column) are added in the order given (row order, as
        ``numpy.add.at`` adds them), and sums of exactly zero are dropped as the dense constructor drops
        them. Columns are never treated as constant here (give the dense array for that).
        """
        out = cls.__new__(cls)
        out.n_columns = n_columns
        out._constant = []
        out._summed = np.arange(n_columns, dtype=np.int64)
        flat = (np.asarray(cluster, dtype=np.int64) * n_columns + column).reshape(-1)
        keys, inverse = np.unique(flat, return_inverse=True)
        # bincount adds each key's entries in the order given
        sums = np.bincount(inverse.reshape(-1), weights=np.reshape(value, -1), minlength=keys.shape[0])
        keep = sums != 0.0
        keys, sums = keys[keep], sums[keep]
        per_cluster = np.bincount(keys // n_columns, minlength=n_clusters).astype(np.int64)
        out._stop = np.cumsum(per_cluster)
        out._start = out._stop - per_cluster
        out._cols = (keys % n_columns).astype(np.int64)
        out._vals = np.ascontiguousarray(sums, dtype=np.float64)
        out._finite = bool(np.isfinite(out._vals).all())
        out.elements_per_draw = 1
        return out

    def __call__(self, indices: NDArray[np.int64]) -> NDArray[np.float64]:
        size = indices.shape[0]
        out = np.empty((size, self.n_columns))
        for c, value in self._constant:
            out[:, c] = value
        if self._summed.shape[0]:
            sums = counted_sums(
                indices, self._start, self._stop, self._cols, self._vals, self._summed.shape[0], self._finite
            )
            out[:, self._summed] = sums
        return out
