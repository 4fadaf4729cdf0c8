"""The size-matched flags' loops: patients laid out in a permutation's order, rows given groups, sums."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels._compile import compiled

__all__ = ["assign_rows", "grouped_row_sums", "layout_starts"]


def _layout_starts(
    rank: NDArray[np.int64],
    patient_size: NDArray[np.int64],
    by_rank: NDArray[np.int64],
    before: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    for c in range(rank.shape[0]):
        by_rank[rank[c]] = c
    total = 0
    for r in range(by_rank.shape[0]):  # rows of the patients ranked before
        c = by_rank[r]
        before[c] = total
        total += patient_size[c]


def _assign_rows(
    before: NDArray[np.int64],
    patient: NDArray[np.int64],
    within: NDArray[np.int64],
    label_sequence: NDArray[np.integer],
    out: NDArray[np.integer],
) -> None:  # pragma: no cover - compiled
    for i in range(patient.shape[0]):
        out[i] = label_sequence[before[patient[i]] + within[i]]


def _grouped_row_sums(
    assigned: NDArray[np.integer],
    columns: NDArray[np.integer],
    values: NDArray[np.float64],
    n_columns: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    for p in range(assigned.shape[0]):
        for i in range(columns.shape[0]):
            base = assigned[p, i] * n_columns
            for j in range(columns.shape[1]):
                out[p, base + columns[i, j]] += values[i, j]


def grouped_row_sums(
    assigned: NDArray[np.integer],
    columns: NDArray[np.integer],
    values: NDArray[np.float64],
    n_columns: int,
    n_groups: int,
) -> NDArray[np.float64]:
    """Per assignment of rows to groups (P, N), each group's sums of the rows' sparse terms: (P, G, J).

    Row ``i`` adds ``values[i, j]`` to column ``columns[i, j]`` of its group ``assigned[p, i]``, rows in
    order, a row's entries in order. Where each column is fed by one entry ``j`` only (a metric's blocks
    are disjoint, and several metrics' terms take columns of their own), each sum adds its group's rows
    in row order, as ``numpy.bincount`` over (assignment, group, column) keys does. The inputs keep
    their dtypes (row-major, narrow integers: the loop reads each row's group once for all its terms).

    Examples
    --------
    >>> columns, values = np.array([[0, 1], [0, 2], [0, 1]]), np.array([[1.0, 2.0], [1.0, 3.0], [1.0, 4.0]])
    >>> grouped_row_sums(np.array([[0, 1, 0]]), columns, values, 3, 2).tolist()
    [[[2.0, 6.0, 0.0], [1.0, 0.0, 3.0]]]
    """
    out = np.zeros((assigned.shape[0], n_groups * n_columns))
    compiled(_grouped_row_sums)(
        np.ascontiguousarray(assigned),
        np.ascontiguousarray(columns),
        np.ascontiguousarray(values, dtype=np.float64),
        n_columns,
        out,
    )
    return out.reshape(assigned.shape[0], n_groups, n_columns)


def grouped_row_sums_reference(
    assigned: NDArray[np.integer],
    columns: NDArray[np.integer],
    values: NDArray[np.float64],
    n_columns: int,
    n_groups: int,
) -> NDArray[np.float64]:
    """:func:`grouped_row_sums` in plain numpy: the reference the tests hold the kernel to, bit for bit.

    One ``numpy.bincount`` over (assignment, group, column) keys, rows in order, a row's entries in
    order (the keys in int64: the narrow dtypes of the inputs would wrap).
    """
    p = assigned.shape[0]
    group = assigned.astype(np.int64)[:, :, None]  # (P, N, 1)
    keys = (np.arange(p)[:, None, None] * n_groups + group) * n_columns + columns.astype(np.int64)
    terms = np.broadcast_to(values, keys.shape)
    # with weights, bincount gives float64 (its stubs say int)
    sums: NDArray[np.float64] = np.asarray(
        np.bincount(keys.reshape(-1), weights=terms.reshape(-1), minlength=p * n_groups * n_columns),
        dtype=np.float64,
    )
    return sums.reshape(p, n_groups, n_columns)


def layout_starts(rank: NDArray[np.int64], patient_size: NDArray[np.int64]) -> NDArray[np.int64]:
    """Where each patient's rows start when the patients are laid out in ``rank`` order: shape (K,).

    Patient ``c`` goes to place ``rank[c]``; its rows start after the rows of the patients placed before.

    Examples
    --------
    >>> layout_starts(np.array([1, 0]), np.array([1, 2])).tolist()
    [2, 0]
    """
    k = rank.shape[0]
    before = np.empty(k, dtype=np.int64)
    compiled(_layout_starts)(rank, patient_size, np.empty(k, np.int64), before)
    return before


def layout_starts_reference(rank: NDArray[np.int64], patient_size: NDArray[np.int64]) -> NDArray[np.int64]:
    """:func:`layout_starts` in plain numpy: the reference the tests hold the kernel to, exactly.

    ``rank`` is a permutation: the patients in place order are its ``argsort``, and each one's rows
    start after the cumulated sizes of those placed before.
    """
    by_rank = np.argsort(rank)
    size = patient_size[by_rank]
    before = np.empty(rank.shape[0], dtype=np.int64)
    before[by_rank] = np.cumsum(size) - size
    return before


def assign_rows(
    before: NDArray[np.int64],
    patient: NDArray[np.int64],
    within: NDArray[np.int64],
    label_sequence: NDArray[np.integer],
) -> NDArray[np.integer]:
    """Each row's group in a layout (:func:`layout_starts`), shape (N,), of ``label_sequence``'s dtype.

    The group ``label_sequence`` holds at the row's new position: its patient's start plus its place
    ``within`` the patient.

    Examples
    --------
    >>> before = layout_starts(np.array([1, 0]), np.array([1, 2]))  # patient 1 (two rows) placed first
    >>> assign_rows(before, np.array([0, 1, 1]), np.array([0, 0, 1]), np.array([5, 6, 7])).tolist()
    [7, 5, 6]
    """
    out = np.empty(patient.shape[0], dtype=label_sequence.dtype)
    compiled(_assign_rows)(before, patient, within, label_sequence, out)
    return out


def assign_rows_reference(
    before: NDArray[np.int64],
    patient: NDArray[np.int64],
    within: NDArray[np.int64],
    label_sequence: NDArray[np.integer],
) -> NDArray[np.integer]:
    """:func:`assign_rows` in plain numpy: the reference the tests hold the kernel to, exactly."""
    out: NDArray[np.integer] = label_sequence[before[patient] + within]
    return out
