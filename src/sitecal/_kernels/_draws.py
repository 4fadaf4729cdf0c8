"""Counting loops of the resamples: each resample's drawn clusters counted, sums weighted by the counts."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels._compile import compiled, count_scratch

__all__ = ["counted_sums", "draw_counts", "membership_sums", "stratified_draws"]

_HELPERS = ("_count_row",)


def _count_row(
    drawn: NDArray[np.int64], counts: NDArray[np.integer] | NDArray[np.float64], b: int
) -> None:  # pragma: no cover - compiled
    """Resample ``b``'s draws counted into row ``b`` of ``counts``: the one counting loop of the kernels."""
    for d in range(drawn.shape[0]):
        counts[b, drawn[d]] += 1


def _counted_sums(
    indices: NDArray[np.int64],
    start: NDArray[np.int64],
    stop: NDArray[np.int64],
    cols: NDArray[np.int64],
    vals: NDArray[np.float64],
    out_t: NDArray[np.float64],
    counts: NDArray[np.int32],
    counts_t: NDArray[np.int32],
    finite: bool,
) -> None:  # pragma: no cover - compiled
    r = indices.shape[0]
    counts[:] = 0
    for b in range(r):
        _count_row(indices[b], counts, b)
    # cluster-major counts and column-major sums: a cluster's entry adds to the chunk's resamples in one
    # contiguous, vectorisable loop (each sum still adds its clusters in order)
    if r > 1:  # one resample's counts are cluster-major already (``counts_t`` is their view)
        for c in range(counts.shape[1]):
            for b in range(r):
                counts_t[c, b] = counts[b, c]
    out_t[:] = 0.0
    for c in range(counts.shape[1]):  # one pass over the clusters serves every resample of the chunk
        for e in range(start[c], stop[c]):
            col = cols[e]
            value = vals[e]
            if finite:  # a cluster not drawn adds 0 * value, a signed zero, which leaves every sum as it is
                for b in range(r):
                    out_t[col, b] += float(counts_t[c, b]) * value
            else:  # 0 * inf would be NaN: clusters not drawn are skipped
                for b in range(r):
                    w = counts_t[c, b]
                    if w:
                        out_t[col, b] += float(w) * value


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
    r, k = indices.shape[0], start.shape[0]
    out_t = np.empty((n_columns, r))
    counts = count_scratch(r, k)
    compiled(_counted_sums)(
        np.ascontiguousarray(indices, dtype=np.int64),
        start,
        stop,
        cols,
        vals,
        out_t,
        counts,
        counts.reshape(k, 1) if r == 1 else count_scratch(k, r, "transposed"),
        bool(np.isfinite(vals).all()) if finite is None else finite,
    )
    return np.ascontiguousarray(out_t.T)


def counted_sums_reference(
    indices: NDArray[np.int64],
    start: NDArray[np.int64],
    stop: NDArray[np.int64],
    cols: NDArray[np.int64],
    vals: NDArray[np.float64],
    n_columns: int,
    finite: bool | None = None,
) -> NDArray[np.float64]:
    """:func:`counted_sums` in plain numpy: the reference the tests hold the kernel to, bit for bit.

    The clusters' entries laid out one cluster after the other from entry 0 (``start[0] == 0``,
    ``start[c + 1] == stop[c]``), as the callers lay them out. Each resample's ``count * value`` terms
    of its drawn clusters, added by ``numpy.bincount`` in entry order; ``finite`` changes nothing here
    (a cluster not drawn adds nothing, the kernel's signed zero included).
    """
    r, k = indices.shape[0], start.shape[0]
    counts = draw_counts_reference(indices, k)
    cluster = np.repeat(np.arange(k), stop - start)  # each entry's cluster
    weight = counts[:, cluster]  # (R, E)
    drawn = weight != 0.0  # only drawn clusters' terms: no 0 * inf
    keys = np.arange(r)[:, None] * n_columns + cols
    terms = weight[drawn] * np.broadcast_to(vals, weight.shape)[drawn]
    # with weights, bincount gives float64 (its stubs say int)
    sums: NDArray[np.float64] = np.asarray(
        np.bincount(keys[drawn], weights=terms, minlength=r * n_columns), dtype=np.float64
    )
    return sums.reshape(r, n_columns)


def _membership_sums(
    indices: NDArray[np.int64],
    patient_of_cluster: NDArray[np.int64],
    ptr: NDArray[np.int64],
    block: NDArray[np.int64],
    table: NDArray[np.float64],
    out: NDArray[np.float64],
    counts: NDArray[np.int32],
    drawn: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    width = table.shape[1]
    r = indices.shape[0]
    counts[:] = 0
    for b in range(r):
        # the drawn patients first, then their counts: two passes, each with one scattered access per
        # draw, run several times faster than one pass with two dependent ones
        for d in range(indices.shape[1]):
            drawn[d] = patient_of_cluster[indices[b, d]]
        _count_row(drawn, counts, b)
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
    counts = count_scratch(indices.shape[0], ptr.shape[0] - 1)
    compiled(_membership_sums)(
        np.ascontiguousarray(indices, dtype=np.int64),
        patient_of_cluster,
        ptr,
        block,
        table,
        out,
        counts,
        np.empty(indices.shape[1], dtype=np.int64),
    )
    return out


def membership_sums_reference(
    indices: NDArray[np.int64],
    patient_of_cluster: NDArray[np.int64],
    ptr: NDArray[np.int64],
    block: NDArray[np.int64],
    table: NDArray[np.float64],
    n_blocks: int,
) -> NDArray[np.float64]:
    """:func:`membership_sums` in plain numpy: the reference the tests hold the kernel to, bit for bit.

    With ``ptr[0] == 0`` and ``ptr[-1]`` rows in ``table``, as the callers build them. Each resample's
    ``n_b(c) * table[e]`` terms of the rows of its drawn patients, added by ``numpy.bincount`` over
    (resample, block, column) keys in row order.
    """
    r, width = indices.shape[0], table.shape[1]
    counts = draw_counts_reference(patient_of_cluster[indices], ptr.shape[0] - 1)
    patient = np.repeat(np.arange(ptr.shape[0] - 1), np.diff(ptr))  # each table row's patient
    weight = np.broadcast_to(counts[:, patient, None], (r, patient.shape[0], width))
    drawn = weight != 0.0  # only drawn patients' rows: no 0 * inf
    keys = (np.arange(r)[:, None, None] * n_blocks + block[:, None]) * width + np.arange(width)
    terms = weight[drawn] * np.broadcast_to(table, weight.shape)[drawn]
    # with weights, bincount gives float64 (its stubs say int)
    sums: NDArray[np.float64] = np.asarray(
        np.bincount(keys[drawn], weights=terms, minlength=r * n_blocks * width), dtype=np.float64
    )
    return sums.reshape(r, n_blocks, width)


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
    compiled(_stratified_draws)(u, stratum_size, stratum_start, out)
    return out


def stratified_draws_reference(
    u: NDArray[np.float64], stratum_size: NDArray[np.int64], stratum_start: NDArray[np.int64]
) -> NDArray[np.int64]:
    """:func:`stratified_draws` in plain numpy: the reference the tests hold the kernel to, exactly."""
    index = np.floor(u * stratum_size).astype(np.int64)
    out: NDArray[np.int64] = stratum_start + np.minimum(index, stratum_size - 1)
    return out


def _draw_counts(indices: NDArray[np.int64], out: NDArray[np.float64]) -> None:  # pragma: no cover - compiled
    out[:] = 0.0
    for b in range(indices.shape[0]):
        _count_row(indices[b], out, b)


def draw_counts(indices: NDArray[np.int64], k: int) -> NDArray[np.float64]:
    """How many times each of ``k`` clusters was drawn in each resample of ``indices`` (R, D): (R, k).

    The counts ``numpy.bincount`` gives, as float64, in one pass (no (R, D) offset array, no integer
    copy to convert).

    >>> draw_counts(np.array([[0, 0, 2], [1, 2, 2]]), 3).tolist()
    [[2.0, 0.0, 1.0], [0.0, 1.0, 2.0]]
    """
    out = np.empty((indices.shape[0], k))
    compiled(_draw_counts)(np.ascontiguousarray(indices, dtype=np.int64), out)
    return out


def draw_counts_reference(indices: NDArray[np.int64], k: int) -> NDArray[np.float64]:
    """:func:`draw_counts` in plain numpy: the reference the tests hold the kernel to, exactly.

    One ``numpy.bincount`` over (resample, cluster) keys.
    """
    r = indices.shape[0]
    keys = np.arange(r)[:, None] * k + indices
    return np.bincount(keys.reshape(-1), minlength=r * k).reshape(r, k).astype(np.float64)
