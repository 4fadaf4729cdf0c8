"""Weighted sums of sparse per-row metric terms, per resample and group, in one ``numpy.bincount``.

A binned metric's row touches a few of its ``J`` term columns (the row count and its own bin), so its
terms are kept as (column, value) pairs (:meth:`~sitecal.metrics.SumMetricStatistic.sparse_terms`) and a
chunk of resamples is summed with one ``bincount`` over (resample, group, column) keys: about ``k`` adds
per row and resample whatever the number of bins or groups, where dense terms cost ``J`` multiplies per
row, resample and group. Each sum accumulates its own resample's rows in row order, so the sums do not
depend on how resamples are chunked.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["weighted_term_sums"]


def weighted_term_sums(
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
    row_weights: NDArray[np.float64],
    n_columns: int,
    groups: NDArray[np.int64] | None = None,
    n_groups: int = 1,
) -> NDArray[np.float64]:
    """Per resample and group, the weighted sums of the terms: shape (R, G, J).

    Parameters
    ----------
    columns, values : numpy.ndarray, shapes (k, N) or (R, k, N)
        Each row's term columns (in ``[0, n_columns)``) and values, entry-major
        (:meth:`~sitecal.metrics.SumMetricStatistic.sparse_terms`): the same for every resample, or one
        set per resample (probabilities that move with a refitted temperature). Each column must be fed
        by one entry ``j`` only (a metric's blocks are disjoint), so every sum adds its rows in row order.
    row_weights : numpy.ndarray, shape (R, N)
        Each resample's weight of each row.
    n_columns : int
        ``J``.
    groups : numpy.ndarray of int64, shape (N,), optional
        Each row's group in ``[0, n_groups)``; None: one group.
    n_groups : int

    Examples
    --------
    >>> cols = np.array([[0, 0, 0], [1, 2, 1]])
    >>> vals = np.array([[1.0, 1.0, 1.0], [0.5, 2.0, 4.0]])
    >>> weighted_term_sums(cols, vals, np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0]]), 3).tolist()
    [[[2.0, 0.5, 2.0]], [[3.0, 4.0, 4.0]]]
    """
    r = row_weights.shape[0]
    stride = n_groups * n_columns
    base = columns if groups is None else columns + groups * n_columns
    offsets = (np.arange(r, dtype=np.int64) * stride)[:, None, None]
    keys = base + offsets if base.ndim == 3 else base[None, :, :] + offsets
    weighted = row_weights[:, None, :] * values
    sums = np.bincount(keys.reshape(-1), weighted.reshape(-1), minlength=r * stride)
    out: NDArray[np.float64] = sums.reshape(r, n_groups, n_columns).astype(np.float64, copy=False)
    return out
