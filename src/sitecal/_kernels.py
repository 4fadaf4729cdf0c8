"""Compiled loops of the resampling engine (numba): each resample's sums in one pass, in a fixed order.

Every kernel reduces one resample (or permutation) at a time from its own inputs only, adding in an
order fixed by the data (cluster order, or row order), never by the chunk, the thread or the machine:
no ``fastmath``, so the compiler keeps each addition where the loop puts it. The kernels release the
GIL, so the callers' threads run them side by side. Compiled code is cached on disk (numba's cache,
next to this file or in the user's cache folder), so a process pays the compilation once per install.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "PROGRAMS",
    "assign_permuted",
    "assign_rows",
    "calibrated_entry_sums",
    "counted_sums",
    "grouped_entry_sums",
    "layout_starts",
    "membership_sums",
    "nll_row_terms",
    "stratified_draws",
    "top_label_entries",
    "weighted_entry_sums",
]


#: Functions the kernels call on each row: compiled (and put in this module's namespace in their place)
#: before the first kernel is, so that the kernels call them compiled.
_HELPERS = ("_bin_of",)


@functools.cache
def _jit() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The kernels' ``numba.njit``, with the helpers compiled (numba is loaded here, on first use)."""
    import numba

    def jit(func: Callable[..., Any]) -> Callable[..., Any]:
        try:
            compiled: Callable[..., Any] = numba.njit(nogil=True, cache=True, boundscheck=False)(func)
        except RuntimeError:  # no writable cache folder (a read-only install, no home): compile per process
            compiled = numba.njit(nogil=True, cache=False, boundscheck=False)(func)
        return compiled

    namespace = globals()
    for name in _HELPERS:  # a loop over the helpers, compiled in the order the kernels need them
        namespace[name] = jit(getattr(namespace[name], "py_func", namespace[name]))  # once compiled: py_func
    return jit


_SCRATCH = threading.local()


def _counts(r: int, k: int) -> NDArray[np.int32]:
    """An (r, k) int32 array to count draws in, this thread's own, reused by the next call.

    The counting loops run once per chunk of resamples on arrays of tens of MiB: a fresh array would
    cost its page faults again in every call.
    """
    held: NDArray[np.int32] | None = getattr(_SCRATCH, "counts", None)
    if held is None or held.shape[0] < r * k:
        held = np.empty(r * k, dtype=np.int32)
        _SCRATCH.counts = held
    return held[: r * k].reshape(r, k)


@functools.cache
def _compiled(loop: Callable[..., None]) -> Callable[..., Any]:
    """``loop`` compiled by numba, on first use (importing the numeric core does not load numba)."""
    return _jit()(loop)


def _counted_sums(
    indices: NDArray[np.int64],
    start: NDArray[np.int64],
    stop: NDArray[np.int64],
    cols: NDArray[np.int64],
    vals: NDArray[np.float64],
    out: NDArray[np.float64],
    counts: NDArray[np.int32],
    finite: bool,
) -> None:  # pragma: no cover - compiled
    r = indices.shape[0]
    counts[:] = 0
    for b in range(r):
        for d in range(indices.shape[1]):
            counts[b, indices[b, d]] += 1
    out[:] = 0.0
    for c in range(counts.shape[1]):  # one pass over the clusters serves every resample of the chunk
        for e in range(start[c], stop[c]):
            col = cols[e]
            value = vals[e]
            if finite:  # a cluster not drawn adds 0 * value, a signed zero, which leaves every sum as it is
                for b in range(r):
                    out[b, col] += float(counts[b, c]) * value
            else:  # 0 * inf would be NaN: clusters not drawn are skipped
                for b in range(r):
                    w = counts[b, c]
                    if w:
                        out[b, col] += float(w) * value


def counted_sums(
    indices: NDArray[np.int64],
    start: NDArray[np.int64],
    stop: NDArray[np.int64],
    cols: NDArray[np.int64],
    vals: NDArray[np.float64],
    n_columns: int,
    finite: bool | None = None,
) -> NDArray[np.float64]:
    """Per resample, ``sum_c count_b(c) * S[c]`` for drawn cluster indices (R, D): shape (R, n_columns).

    ``S`` is stored by cluster: cluster ``c``'s entries are ``cols[start[c]:stop[c]]`` and the matching
    ``vals``. Resample ``b`` counts how often it drew each cluster, then adds ``count * value`` cluster by
    cluster, in cluster order, entry by entry: the sum depends on the resample's counts only. One pass
    over the entries serves all R resamples (the entries are read once per chunk, not once per resample).
    ``finite``: whether every value is finite (then clusters not drawn add a signed zero instead of
    being tested: the same sums without a branch per resample), None to check here. The stored values
    are nonzero, so no sum is a negative zero that an added zero could flip.

    Examples
    --------
    >>> start, stop = np.array([0, 2]), np.array([2, 3])
    >>> cols, vals = np.array([0, 1, 0]), np.array([1.0, 0.5, 1.0])
    >>> counted_sums(np.array([[0, 0], [1, 0]]), start, stop, cols, vals, 2).tolist()
    [[2.0, 1.0], [2.0, 0.5]]
    """
    out = np.empty((indices.shape[0], n_columns))
    counts = _counts(indices.shape[0], start.shape[0])
    _compiled(_counted_sums)(
        np.ascontiguousarray(indices, dtype=np.int64),
        start,
        stop,
        cols,
        vals,
        out,
        counts,
        bool(np.isfinite(vals).all()) if finite is None else finite,
    )
    return out


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
    n = columns.shape[1]
    g = np.zeros(n, dtype=np.int64) if groups is None else groups
    out = np.zeros(n_groups * n_columns)
    _compiled(_grouped_entry_sums)(
        np.ascontiguousarray(np.broadcast_to(columns, values.shape), dtype=np.int64),
        np.ascontiguousarray(values, dtype=np.float64),
        np.ascontiguousarray(g, dtype=np.int64),
        np.ascontiguousarray(weights, dtype=np.float64),
        n_columns,
        out,
    )
    return out.reshape(n_groups, n_columns)


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
    label_sequence: NDArray[np.int64],
    out: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    for i in range(patient.shape[0]):
        out[i] = label_sequence[before[patient[i]] + within[i]]


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
    _compiled(_layout_starts)(rank, patient_size, np.empty(k, np.int64), before)
    return before


def assign_rows(
    before: NDArray[np.int64],
    patient: NDArray[np.int64],
    within: NDArray[np.int64],
    label_sequence: NDArray[np.int64],
) -> NDArray[np.int64]:
    """Each row's group in a layout (:func:`layout_starts`), shape (N,).

    The group ``label_sequence`` holds at the row's new position: its patient's start plus its place
    ``within`` the patient.
    """
    out = np.empty(patient.shape[0], dtype=np.int64)
    _compiled(_assign_rows)(before, patient, within, label_sequence, out)
    return out


def assign_permuted(
    rank: NDArray[np.int64],
    patient_size: NDArray[np.int64],
    patient: NDArray[np.int64],
    within: NDArray[np.int64],
    label_sequence: NDArray[np.int64],
) -> NDArray[np.int64]:
    """Each row's group after laying the patients out in ``rank`` order (see ``size_matched_flags``).

    Patient ``c`` goes to place ``rank[c]``; a row's new position is the rows of the patients placed
    before its own plus its place ``within`` its patient, and it takes the group ``label_sequence``
    holds there (:func:`layout_starts`, then :func:`assign_rows`).

    Examples
    --------
    >>> assign_permuted(np.array([1, 0]), np.array([1, 2]), np.array([0, 1, 1]), np.array([0, 0, 1]),
    ...                 np.array([5, 6, 7])).tolist()
    [7, 5, 6]
    """
    return assign_rows(layout_starts(rank, patient_size), patient, within, label_sequence)


def _grouped_sums_each(
    assigned: NDArray[np.int64],
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
    n_columns: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    for p in range(assigned.shape[0]):
        for j in range(columns.shape[0]):
            for i in range(columns.shape[1]):
                out[p, assigned[p, i] * n_columns + columns[j, i]] += values[j, i]


def grouped_entry_sums(
    assigned: NDArray[np.int64],
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
    n_columns: int,
    n_groups: int,
) -> NDArray[np.float64]:
    """Per assignment of rows to groups (P, N), each group's sums of the sparse row terms: (P, G, J).

    Entries are added entry by entry, rows in order: with each column fed by one entry ``j``, each sum
    adds its group's rows in row order, as ``numpy.bincount`` over (assignment, group, column) keys does.
    """
    out = np.zeros((assigned.shape[0], n_groups * n_columns))
    _compiled(_grouped_sums_each)(
        np.ascontiguousarray(assigned, dtype=np.int64),
        np.ascontiguousarray(np.broadcast_to(columns, values.shape), dtype=np.int64),
        np.ascontiguousarray(values, dtype=np.float64),
        n_columns,
        out,
    )
    return out.reshape(assigned.shape[0], n_groups, n_columns)


def _membership_sums(
    indices: NDArray[np.int64],
    patient_of_cluster: NDArray[np.int64],
    ptr: NDArray[np.int64],
    block: NDArray[np.int64],
    table: NDArray[np.float64],
    out: NDArray[np.float64],
    counts: NDArray[np.int32],
) -> None:  # pragma: no cover - compiled
    width = table.shape[1]
    r = indices.shape[0]
    counts[:] = 0
    for b in range(r):
        for d in range(indices.shape[1]):
            counts[b, patient_of_cluster[indices[b, d]]] += 1
    out[:] = 0.0
    for c in range(counts.shape[1]):  # one pass over the patients serves every resample of the chunk
        for e in range(ptr[c], ptr[c + 1]):
            s = block[e]
            for b in range(r):
                w = counts[b, c]
                if w:  # a whole row of the table per drawn patient: the test is worth its branch
                    fw = float(w)
                    for q in range(width):
                        out[b, s, q] += fw * table[e, q]


def membership_sums(
    indices: NDArray[np.int64],
    patient_of_cluster: NDArray[np.int64],
    ptr: NDArray[np.int64],
    block: NDArray[np.int64],
    table: NDArray[np.float64],
    n_blocks: int,
) -> NDArray[np.float64]:
    """Per resample and block, the count-weighted sum of the block's rows of ``table``: (R, n_blocks, W).

    Resample ``b`` drew clusters ``indices[b]`` (R, D), each of patient ``patient_of_cluster[cluster]``;
    patient ``c`` holds the rows ``ptr[c]:ptr[c + 1]`` of ``table`` (E, W), row ``e`` in block
    ``block[e]``. Each block's sum adds ``n_b(c) * table[e]`` patient by patient, in patient order; one
    pass over the table serves all R resamples.

    Examples
    --------
    >>> table = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
    >>> membership_sums(np.array([[0, 0, 1]]), np.array([0, 1]), np.array([0, 2, 3]), np.array([0, 1, 0]),
    ...                 table, 2).tolist()
    [[[102.0, 204.0], [20.0, 40.0]]]
    """
    out = np.empty((indices.shape[0], n_blocks, table.shape[1]))
    counts = _counts(indices.shape[0], ptr.shape[0] - 1)
    _compiled(_membership_sums)(
        np.ascontiguousarray(indices, dtype=np.int64), patient_of_cluster, ptr, block, table, out, counts
    )
    return out


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
    _compiled(_top_label_entries)(
        np.ascontiguousarray(probs_t, dtype=np.float64),
        np.ascontiguousarray(labels, dtype=np.int64),
        np.ascontiguousarray(edges, dtype=np.float64),
        codes,
        columns,
        values,
    )
    return columns, values


#: The row terms :func:`calibrated_entry_sums` computes itself, by name: top-label blocks (as
#: :func:`top_label_entries`), or a mean score's term: ``log_true`` the negative log-probability of the
#: true class (clipped), ``squared`` the squared distance to the one-hot label, ``hit`` arg-max = label.
PROGRAMS = ("top_label", "log_true", "squared", "hit")
_NLL_CLIP = 1e-12  # sitecal.metrics._scores.NLL_CLIP (this layer imports no metrics)


def _drawn_scaled(
    logits_t: NDArray[np.float64],
    row_cluster: NDArray[np.int64],
    cluster_weights: NDArray[np.float64],
    row_scale: NDArray[np.int64],
    scales: NDArray[np.float64],
    scaled: NDArray[np.float64],
    rows: NDArray[np.int64],
    weights: NDArray[np.float64],
) -> int:  # pragma: no cover - compiled
    n_classes = logits_t.shape[0]
    m = 0
    for i in range(row_cluster.shape[0]):
        w = cluster_weights[row_cluster[i]]
        if w == 0.0:
            continue
        scale = scales[row_scale[i]]
        top = logits_t[0, i] / scale
        scaled[0, m] = top
        for k in range(1, n_classes):
            v = logits_t[k, i] / scale
            scaled[k, m] = v
            top = max(top, v)
        for k in range(n_classes):
            scaled[k, m] -= top
        rows[m] = i
        weights[m] = w
        m += 1
    return m


def _normalised(
    e: NDArray[np.float64],
    m: int,
    rows: NDArray[np.int64],
    labels: NDArray[np.int64],
    groups: NDArray[np.int64],
    predicted: NDArray[np.int64],
    confidence: NDArray[np.float64],
    label: NDArray[np.int64],
    group: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    n_classes = e.shape[0]
    for j in range(m):
        total = e[0, j]
        for k in range(1, n_classes):  # the sum in class order, as numpy sums so few terms
            total += e[k, j]
        best = -1.0
        top = 0
        for k in range(n_classes):
            v = e[k, j] / total
            e[k, j] = v
            if v > best:  # the first arg-max, as numpy.argmax (probabilities are >= 0)
                best = v
                top = k
        predicted[j] = top
        confidence[j] = best
        i = rows[j]
        label[j] = labels[i]
        group[j] = groups[i]


def _top_label_sums(
    m: int,
    predicted: NDArray[np.int64],
    confidence: NDArray[np.float64],
    label: NDArray[np.int64],
    group: NDArray[np.int64],
    weights: NDArray[np.float64],
    edges: NDArray[np.float64],
    parts: NDArray[np.int64],
    at: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    n_bins = edges.shape[0] - 1
    for j in range(m):
        g = group[j]
        w = weights[j]
        c = confidence[j]
        index = _bin_of(c, edges)
        correct = 1.0 if predicted[j] == label[j] else 0.0
        out[g, at] += w * 1.0
        for b in range(
            parts.shape[0]
        ):  # n count, g correctness minus confidence, a correctness, c confidence
            col = at + index + 1 + b * n_bins
            part = parts[b]
            if part == 0:
                out[g, col] += w * 1.0
            elif part == 1:
                out[g, col] += w * (correct - c)
            elif part == 2:
                out[g, col] += w * correct
            else:
                out[g, col] += w * c


def _true_class(
    e: NDArray[np.float64], m: int, label: NDArray[np.int64], clip: float, out: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        out[j] = max(e[label[j], j], clip)


def _squared(
    e: NDArray[np.float64], m: int, label: NDArray[np.int64], out: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        squared = 0.0
        for k in range(e.shape[0]):  # the distances summed in class order
            d = e[k, j] - (1.0 if k == label[j] else 0.0)
            squared += d * d
        out[j] = squared


def _hits(
    m: int, predicted: NDArray[np.int64], label: NDArray[np.int64], out: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        out[j] = 1.0 if predicted[j] == label[j] else 0.0


def _score_sums(
    m: int,
    values: NDArray[np.float64],
    group: NDArray[np.int64],
    weights: NDArray[np.float64],
    at: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        g = group[j]
        w = weights[j]
        out[g, at] += w * 1.0
        out[g, at + 1] += w * values[j]


def calibrated_entry_sums(
    logits_t: NDArray[np.float64],
    labels: NDArray[np.int64],
    groups: NDArray[np.int64],
    n_groups: int,
    row_cluster: NDArray[np.int64],
    cluster_weights: NDArray[np.float64],
    row_scale: NDArray[np.int64],
    scales: NDArray[np.float64],
    edges: NDArray[np.float64],
    programs: list[tuple[str, str]],
    widths: list[int],
    workspace: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """One resample's per-group sums of metric terms at moving temperatures: (G, sum of widths).

    Row ``i`` (class-major logits ``logits_t`` (C, N), its label and group) weighs
    ``cluster_weights[row_cluster[i]]`` and is calibrated with ``T = scales[row_scale[i]]``; rows of
    weight 0 are skipped. Each metric's terms, program ``(name, blocks)`` of :data:`PROGRAMS` on the
    ``(lo, hi]`` bins of ``edges``, go to its own ``widths[m]`` columns as ``weight * value``, rows in
    order.

    The values are those of the array code, bit for bit: the drawn rows' scaled logits less their max
    (one compiled pass), numpy's ``exp``, a compiled pass that normalises in class order and finds the
    arg-max, then one tight pass per metric (numpy's ``log`` for the ``log_true`` terms):
    :func:`~sitecal.metrics._softmax.softmax_class_major`, :func:`top_label_entries` and the scores'
    terms compute the same operations in the same order.

    ``workspace``: a (C + 7, N) float64 array the call may overwrite, kept by a caller that sums many
    resamples (fresh arrays of this size cost page faults in every call); None: allocated here.
    """
    n_classes, n = logits_t.shape
    space = np.empty((n_classes + 7, n)) if workspace is None else workspace
    scaled, weights, values, confidence = space[:n_classes], *space[n_classes : n_classes + 3]
    rows, predicted, label, group = (row.view(np.int64) for row in space[n_classes + 3 :])
    m: int = _compiled(_drawn_scaled)(
        logits_t,
        row_cluster,
        np.ascontiguousarray(cluster_weights, dtype=np.float64),
        row_scale,
        np.ascontiguousarray(scales, dtype=np.float64),
        scaled,
        rows,
        weights,
    )
    np.exp(scaled[:, :m], out=scaled[:, :m])
    _compiled(_normalised)(scaled, m, rows, labels, groups, predicted, confidence, label, group)
    out = np.zeros((n_groups, int(sum(widths))))
    at = 0
    for (name, blocks), width in zip(programs, widths, strict=True):  # a loop over metrics: own columns
        if name == "top_label":
            parts = np.array(["ngac".index(b) for b in blocks], dtype=np.int64)
            _compiled(_top_label_sums)(m, predicted, confidence, label, group, weights, edges, parts, at, out)
        else:
            if name == "log_true":  # -log max(p_y, clip), numpy's logarithm
                _compiled(_true_class)(scaled, m, label, _NLL_CLIP, values)
                np.negative(np.log(values[:m], out=values[:m]), out=values[:m])
            elif name == "squared":
                _compiled(_squared)(scaled, m, label, values)
            else:
                _compiled(_hits)(m, predicted, label, values)
            _compiled(_score_sums)(m, values, group, weights, at, out)
        at += width
    return out


def _stratified_draws(
    u: NDArray[np.float64],
    stratum_size: NDArray[np.int64],
    stratum_start: NDArray[np.int64],
    out: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    for b in range(u.shape[0]):
        for j in range(u.shape[1]):
            size = stratum_size[j]
            index = int(np.floor(u[b, j] * size))
            out[b, j] = stratum_start[j] + min(index, size - 1)


def stratified_draws(
    u: NDArray[np.float64], stratum_size: NDArray[np.int64], stratum_start: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Draw ``j`` of each resample from uniforms ``u`` (R, D): ``start + min(floor(u * size), size - 1)``.

    The cluster drawn for position ``j`` within its stratum (``size[j]`` clusters from ``start[j]``), as
    ``numpy.floor(u * size).astype(int64)``, clipped and shifted, gives it, in one pass.

    Examples
    --------
    >>> stratified_draws(np.array([[0.0, 0.5, 0.99]]), np.array([2, 2, 1]), np.array([0, 0, 2])).tolist()
    [[0, 1, 2]]
    """
    out = np.empty(u.shape, dtype=np.int64)
    _compiled(_stratified_draws)(u, stratum_size, stratum_start, out)
    return out


def _shifted_scaled(
    d_t: NDArray[np.float64], beta: float, z: NDArray[np.float64], top: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    n_classes = d_t.shape[0]
    for i in range(d_t.shape[1]):
        m = beta * d_t[0, i]
        for k in range(1, n_classes):  # the max in class order, as numpy's max over so few classes
            m = max(m, beta * d_t[k, i])
        top[i] = m
        for k in range(n_classes):
            z[k, i] = beta * d_t[k, i] - m


def _moments(
    e: NDArray[np.float64],
    d_t: NDArray[np.float64],
    total: NDArray[np.float64],
    mean_d: NDArray[np.float64],
    var_d: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    n_classes = d_t.shape[0]
    for i in range(d_t.shape[1]):
        t = e[0, i]
        for k in range(1, n_classes):
            t += e[k, i]
        total[i] = t
        mean = (e[0, i] / t) * d_t[0, i]
        for k in range(1, n_classes):
            mean += (e[k, i] / t) * d_t[k, i]
        mean_d[i] = mean
        c = d_t[0, i] - mean
        var = (e[0, i] / t) * c * c
        for k in range(1, n_classes):
            c = d_t[k, i] - mean
            var += (e[k, i] / t) * c * c
        var_d[i] = var


def nll_row_terms(
    d_t: NDArray[np.float64], beta: float, workspace: NDArray[np.float64] | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The temperature fit's per-row terms of class-major ``d_t`` (C, N): four (N,) arrays.

    Per row: ``m = max_k beta d_k``, ``sum_k exp(beta d_k - m)``, and the mean and variance of ``d``
    under ``softmax(beta d)``.

    The temperature fit's per-row quantities, computed as its numpy code computes them, bit for bit
    (``z = beta * d``; the max and sums in class order; ``p = e / total``; ``(p * d).sum``;
    ``(p * c * c).sum`` with ``c = d - mean``) in two compiled passes around numpy's ``exp``, instead of a
    dozen array passes. ``workspace``: a (C + 4, N) array the call may overwrite.
    """
    n_classes, n = d_t.shape
    space = np.empty((n_classes + 4, n)) if workspace is None else workspace
    z, (top, total, mean_d, var_d) = space[:n_classes], space[n_classes:]
    _compiled(_shifted_scaled)(d_t, float(beta), z, top)
    np.exp(z, out=z)
    _compiled(_moments)(z, d_t, total, mean_d, var_d)
    return top, total, mean_d, var_d
