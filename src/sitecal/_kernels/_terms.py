"""Sums of sparse per-row metric terms, and the top-label terms of class-major probabilities."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels._compile import compiled

__all__ = ["top_label_entries", "weighted_entry_sums"]

#: Functions the kernels here call on each row (see ``compiled``).
_HELPERS = ("_bin_of",)


def _grouped_entry_sums(
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
    groups: NDArray[np.int64],
    weights: NDArray[np.float64],
    n_columns: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    for j in range(columns.shape[0]):
        for i in range(columns.shape[1]):
            w = weights[i]
            if w != 0.0:
                out[groups[i] * n_columns + columns[j, i]] += w * values[j, i]


def weighted_entry_sums(
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
    weights: NDArray[np.float64],
    n_columns: int,
    groups: NDArray[np.int64] | None = None,
    n_groups: int = 1,
) -> NDArray[np.float64]:
    """One resample's sums of sparse row terms (k, N) under row weights (N,), per group: (n_groups, J).

    Entry ``j`` of row ``i`` adds ``weights[i] * values[j, i]`` to column ``columns[j, i]`` of the row's
    group; entries are taken entry by entry, rows in order, and rows of weight 0 are skipped. With each
    column fed by one entry ``j`` (a metric's blocks are disjoint), each sum adds its rows in row order.
    """
    n = values.shape[1]  # the rows (columns may be (k, 1), broadcast to every row)
    g = np.zeros(n, dtype=np.int64) if groups is None else groups
    out = np.zeros(n_groups * n_columns)
    compiled(_grouped_entry_sums)(
        np.ascontiguousarray(np.broadcast_to(columns, values.shape), dtype=np.int64),
        np.ascontiguousarray(values, dtype=np.float64),
        np.ascontiguousarray(g, dtype=np.int64),
        np.ascontiguousarray(weights, dtype=np.float64),
        n_columns,
        out,
    )
    return out.reshape(n_groups, n_columns)


def weighted_entry_sums_reference(
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
    weights: NDArray[np.float64],
    n_columns: int,
    groups: NDArray[np.int64] | None = None,
    n_groups: int = 1,
) -> NDArray[np.float64]:
    """:func:`weighted_entry_sums` in plain numpy: the reference the tests hold the kernel to, bit for bit.

    One ``numpy.bincount`` over (group, column) keys of the ``weight * value`` terms of the rows of
    nonzero weight, entry by entry, rows in order (the kernel's order).
    """
    group = np.zeros(values.shape[1], dtype=np.int64) if groups is None else groups
    keys = group * n_columns + np.broadcast_to(columns, values.shape)  # (k, N): entry-major
    kept = np.broadcast_to(weights != 0.0, values.shape)
    terms = np.broadcast_to(weights, values.shape)[kept] * values[kept]
    # with weights, bincount gives float64 (its stubs say int)
    sums: NDArray[np.float64] = np.asarray(
        np.bincount(keys[kept], weights=terms, minlength=n_groups * n_columns), dtype=np.float64
    )
    return sums.reshape(n_groups, n_columns)


def _bin_of(value: float, edges: NDArray[np.float64]) -> int:  # pragma: no cover - compiled
    """The ``(lo, hi]`` bin of ``value`` among equal-width ``edges``, as ``numpy.searchsorted`` places it."""
    n_bins: int = edges.shape[0] - 1
    if value != value:  # NaN sorts last, as in numpy.searchsorted
        return n_bins - 1
    # the number of edges below the value, less one, within [0, n_bins - 1]: counted from a guess (equal
    # widths put it within one edge), then checked against the edges
    below = min(max(int(value * n_bins), 0), n_bins + 1)
    while below > 0 and not edges[below - 1] < value:
        below -= 1
    while below <= n_bins and edges[below] < value:
        below += 1
    index: int = min(max(below - 1, 0), n_bins - 1)
    return index


def _top_label_entries(
    probs_t: NDArray[np.float64],
    labels: NDArray[np.int64],
    edges: NDArray[np.float64],
    parts: NDArray[np.int64],
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    n_bins = edges.shape[0] - 1
    for i in range(labels.shape[0]):
        predicted = 0
        confidence = probs_t[0, i]
        for k in range(1, probs_t.shape[0]):  # the first arg-max, as numpy.argmax
            if probs_t[k, i] > confidence:
                predicted = k
                confidence = probs_t[k, i]
        index = _bin_of(confidence, edges)
        correct = 1.0 if predicted == labels[i] else 0.0
        columns[0, i] = 0
        values[0, i] = 1.0
        for j in range(
            parts.shape[0]
        ):  # n count, g correctness minus confidence, a correctness, c confidence
            columns[j + 1, i] = index + 1 + j * n_bins
            part = parts[j]
            if part == 0:
                values[j + 1, i] = 1.0
            elif part == 1:
                values[j + 1, i] = correct - confidence
            elif part == 2:
                values[j + 1, i] = correct
            else:
                values[j + 1, i] = confidence


def top_label_entries(
    probs_t: NDArray[np.float64], labels: NDArray[np.int64], edges: NDArray[np.float64], parts: str
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Top-label terms of class-major probabilities (C, N) as (columns, values), each (len(parts) + 1, N).

    See :func:`sitecal.metrics._class_major.top_label_entries`: column 0 (ones), then one per-bin block
    per letter of ``parts`` (``n`` count, ``g`` correctness minus confidence, ``a`` correctness, ``c``
    confidence) on the ``(lo, hi]`` bins of ``edges``. The arg-max, the bin and every value are what the
    numpy code computes (comparisons and one subtraction), in one pass over the rows.
    """
    n = labels.shape[0]
    columns = np.empty((len(parts) + 1, n), dtype=np.int64)
    values = np.empty((len(parts) + 1, n))
    codes = np.array(["ngac".index(p) for p in parts], dtype=np.int64)
    compiled(_top_label_entries)(
        np.ascontiguousarray(probs_t, dtype=np.float64),
        np.ascontiguousarray(labels, dtype=np.int64),
        np.ascontiguousarray(edges, dtype=np.float64),
        codes,
        columns,
        values,
    )
    return columns, values


def top_label_entries_reference(
    probs_t: NDArray[np.float64], labels: NDArray[np.int64], edges: NDArray[np.float64], parts: str
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """:func:`top_label_entries` in plain numpy: the reference the tests hold the kernel to, exactly.

    The first arg-max (``numpy.argmax``), its ``(lo, hi]`` bin (``numpy.searchsorted``, a confidence of
    0 in the first bin) and each block's value, stacked block by block.
    """
    n, n_bins = labels.shape[0], edges.shape[0] - 1
    predicted = np.argmax(probs_t, axis=0)
    confidence = probs_t[predicted, np.arange(n)]
    index = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)
    correct = (predicted == labels).astype(np.float64)
    block = {"n": np.ones(n), "g": correct - confidence, "a": correct, "c": confidence}
    columns = [np.zeros(n, dtype=np.int64)] + [index + 1 + j * n_bins for j in range(len(parts))]
    values = [np.ones(n)] + [block[part] for part in parts]
    return np.stack(columns).astype(np.int64), np.stack(values)
