"""Weighted sums of sparse per-row metric terms, and the refit bootstraps' metrics at moving temperatures.

A binned metric's row touches a few of its ``J`` term columns (the row count and its own bin), so its
terms are kept as (column, value) pairs (:meth:`~sitecal.metrics.SumMetricStatistic.sparse_terms`) and
each resample is summed by a compiled loop (:func:`~sitecal._kernels.weighted_entry_sums`): about ``k``
adds per drawn row whatever the number of bins or groups, where dense terms cost ``J`` multiplies per row,
resample and group. Each sum accumulates its own resample's rows in row order (the order a ``bincount``
over (resample, group, column) keys adds them), so the sums do not depend on how resamples are chunked.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels import calibrated_entry_sums, weighted_entry_sums
from sitecal.metrics import SmoothECEStatistic, SumMetricStatistic, bin_edges, softmax, softmax_class_major
from sitecal.stats._resample import CHUNK_ELEMENTS, for_each

__all__ = ["RefitStatistic", "metrics_at_temperatures", "term_sums_at_temperatures", "weighted_term_sums"]

#: What the refit bootstrap evaluates: sums of per-row terms, or a statistic of each resample's own
#: probabilities (``evaluate_each``), as the smooth ECE, whose bandwidth is refitted in every resample.
RefitStatistic = SumMetricStatistic | SmoothECEStatistic


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
    out = np.empty((r, n_groups, n_columns))
    for b in range(r):  # a loop over resamples, each summed in row order (rows of weight 0 skipped)
        cols = columns[b] if columns.ndim == 3 else columns
        vals = values[b] if values.ndim == 3 else values
        out[b] = weighted_entry_sums(cols, vals, row_weights[b], n_columns, groups, n_groups)
    return out


def terms_key(statistic: SumMetricStatistic) -> tuple[Any, ...]:
    """What a sum statistic's terms depend on: statistics with the same key sum the same terms."""
    form = statistic.form
    return (form.row_terms, form.sparse_terms, form.program, statistic.n_bins)


def term_sums_at_temperatures(
    statistics: Sequence[SumMetricStatistic],
    widths: Sequence[int],
    logits_t: NDArray[np.float64],
    labels: NDArray[np.int64],
    s: NDArray[np.float64],
    row_weights: NDArray[np.float64],
    groups: NDArray[np.int64] | None = None,
    n_groups: int = 1,
    workers: int = 1,
    *,
    row_temperature: NDArray[np.int64] | None = None,
    row_cluster: NDArray[np.int64] | None = None,
) -> list[NDArray[np.float64]]:
    """Per statistic, the (R, G, J) sums of its terms under ``softmax(logits / exp(s_b))``, per resample.

    ``logits_t``: class-major logits (C, N); ``s``: one log T per resample, shape (R,), or one per resample
    and row, shape (R, N), or, with ``row_temperature`` (N,), one per resample and temperature, shape
    (R, S), row ``i`` taking ``s[b, row_temperature[i]]``; ``row_weights``: (R, N), or with ``row_cluster``
    (N,) the (R, K) weights of the clusters, row ``i`` weighing ``row_weights[b, row_cluster[i]]``;
    ``widths``: each statistic's ``J``; ``groups``, ``n_groups`` as for :func:`weighted_term_sums`.
    ``workers`` threads compute resamples side by side (the sums do not depend on it).

    Only the drawn rows are calibrated and summed. Where every statistic is a program of the compiled
    loop (:attr:`~sitecal.metrics.SumForm.program`, on the same bins) a resample is one pass over the
    rows (:func:`~sitecal._kernels.calibrated_entry_sums`); otherwise each resample's probabilities are
    computed class-major, as arrays, and their sparse terms summed.
    """
    keys = [terms_key(st) for st in statistics]
    first: dict[tuple[Any, ...], int] = {}  # each key's first statistic
    for i, key in enumerate(keys):  # a loop over statistics
        first.setdefault(key, i)
    if len(first) < len(keys):  # statistics with the same terms (a metric's companions): summed once
        shared = term_sums_at_temperatures(
            [statistics[i] for i in first.values()],
            [widths[i] for i in first.values()],
            logits_t,
            labels,
            s,
            row_weights,
            groups,
            n_groups,
            workers,
            row_temperature=row_temperature,
            row_cluster=row_cluster,
        )
        by_key = dict(zip(first, shared, strict=True))
        return [by_key[key] for key in keys]
    n = labels.shape[0]
    group_of_row = np.zeros(n, dtype=np.int64) if groups is None else np.ascontiguousarray(groups, np.int64)
    rows = _Resamples(
        logits_t=logits_t,
        labels=labels,
        group_of_row=group_of_row,
        n_groups=n_groups,
        row_weights=row_weights,
        cluster_of_row=row_cluster,
        log_t=s[:, None] if s.ndim == 1 else s,  # (R, S), or (R, N) with each row its own
        temperature_of_row=np.zeros(n, dtype=np.int64) if s.ndim == 1 else row_temperature,
        one_each=s.ndim == 1,
        identity=np.arange(n, dtype=np.int64),
    )
    sums = [np.empty((row_weights.shape[0], n_groups, width)) for width in widths]
    programs = _programs(statistics)
    spaces = threading.local()  # each thread's workspace of the compiled passes, reused across resamples

    def one(b: int) -> None:
        """Resample ``b``: only its drawn rows are calibrated and summed (the others add nothing)."""
        if programs is None:
            parts = rows.array_sums(b, statistics, widths)
        else:
            if not hasattr(spaces, "array"):
                spaces.array = np.empty((logits_t.shape[0] + 7, n))
            parts = rows.compiled_sums(b, programs, widths, spaces.array)
        for out, part in zip(sums, parts, strict=True):  # a loop over metrics
            out[b] = part

    for_each(one, row_weights.shape[0], workers)
    return sums


@dataclass(frozen=True, eq=False)
class _Resamples:
    """What each resample's sums read (see :func:`term_sums_at_temperatures`).

    Attributes
    ----------
    logits_t : numpy.ndarray, shape (C, N)
        Class-major logits.
    labels, group_of_row : numpy.ndarray of int64, shape (N,)
    n_groups : int
    row_weights : numpy.ndarray, shape (R, N), or (R, K) with ``cluster_of_row``
    cluster_of_row : numpy.ndarray of int64, shape (N,), or None
    log_t : numpy.ndarray, shape (R, S), or (R, N) with each row its own
    temperature_of_row : numpy.ndarray of int64, shape (N,), or None (each row its own column of ``log_t``)
    one_each : bool
        One temperature per resample (``s`` of shape (R,)).
    identity : numpy.ndarray of int64, shape (N,)
        ``arange(N)``: the compiled pass's clusters and temperatures where each row is its own.
    """

    logits_t: NDArray[np.float64]
    labels: NDArray[np.int64]
    group_of_row: NDArray[np.int64]
    n_groups: int
    row_weights: NDArray[np.float64]
    cluster_of_row: NDArray[np.int64] | None
    log_t: NDArray[np.float64]
    temperature_of_row: NDArray[np.int64] | None
    one_each: bool
    identity: NDArray[np.int64]

    def compiled_sums(
        self,
        b: int,
        programs: tuple[list[tuple[str, str]], NDArray[np.float64]],
        widths: Sequence[int],
        workspace: NDArray[np.float64],
    ) -> list[NDArray[np.float64]]:
        """Resample ``b``'s (G, J) sums of each statistic, in one pass of the compiled loop over the rows."""
        total = calibrated_entry_sums(
            self.logits_t,
            self.labels,
            self.group_of_row,
            self.n_groups,
            self.identity if self.cluster_of_row is None else self.cluster_of_row,
            self.row_weights[b],
            self.identity if self.temperature_of_row is None else self.temperature_of_row,
            np.exp(self.log_t[b]),
            programs[1],
            programs[0],
            list(widths),
            workspace,
        )
        parts, first = [], 0
        for width in widths:  # a loop over metrics: their own columns
            parts.append(total[:, first : first + width])
            first += width
        return parts

    def array_sums(
        self, b: int, statistics: Sequence[SumMetricStatistic], widths: Sequence[int]
    ) -> list[NDArray[np.float64]]:
        """Resample ``b``'s (G, J) sums of each statistic, from its drawn rows' probabilities, class-major."""
        weights_all = (
            self.row_weights[b] if self.cluster_of_row is None else self.row_weights[b, self.cluster_of_row]
        )
        drawn = np.flatnonzero(weights_all)
        log_t = self.log_t[b] if self.temperature_of_row is None else self.log_t[b, self.temperature_of_row]
        scale = np.exp(log_t[0] if self.one_each else log_t[drawn])
        probs_t = softmax_class_major(np.take(self.logits_t, drawn, axis=1) / scale)
        at = self.labels[drawn]
        weights = weights_all[drawn]
        in_group = self.group_of_row[drawn]
        out = []
        for stat, width in zip(statistics, widths, strict=True):  # a loop over metrics
            columns, values = stat.sparse_terms(probs_t, at)
            out.append(weighted_entry_sums(columns, values, weights, width, in_group, self.n_groups))
        return out


def _programs(
    statistics: Sequence[SumMetricStatistic],
) -> tuple[list[tuple[str, str]], NDArray[np.float64]] | None:
    """The statistics' programs of the compiled loop and their bin edges; None where one has none."""
    programs = [st.form.program for st in statistics]
    bins = {st.n_bins for st in statistics}
    if not programs or any(p is None for p in programs) or len(bins) != 1:
        return None
    return [p for p in programs if p is not None], bin_edges(np.empty(0), bins.pop(), "width")


def metrics_at_temperatures(
    statistics: Sequence[RefitStatistic],
    logits: NDArray[np.float64],
    labels: NDArray[np.int64],
    s: NDArray[np.float64] | None,
    row_weights: NDArray[np.float64],
    workers: int = 1,
    *,
    row_temperature: NDArray[np.int64] | None = None,
    row_cluster: NDArray[np.int64] | None = None,
) -> NDArray[np.float64]:
    """Metrics of ``softmax(logits / exp(s_b))`` under row weights (R, N), per resample: (M, R).

    ``s``: one log T per resample, shape (R,), or one per resample and row, shape (R, N) (cross-fitting:
    each row its fold's), or with ``row_temperature`` one per resample and temperature (R, S); None: T = 1
    in every resample (the probabilities and their terms are computed once). With ``row_cluster`` the
    weights are the clusters', (R, K) (see :func:`term_sums_at_temperatures`). A sum statistic is reduced
    from its sparse per-row terms (:func:`term_sums_at_temperatures`); another statistic from each
    resample's own probabilities. ``workers``: threads for the resamples.
    """
    r = row_weights.shape[0]
    out = np.empty((len(statistics), r))
    logits_t = np.ascontiguousarray(logits.T)
    summed = [i for i, st in enumerate(statistics) if isinstance(st, SumMetricStatistic)]
    sum_stats = [st for st in statistics if isinstance(st, SumMetricStatistic)]
    widths = [st.row_terms(softmax(logits[:1]), labels[:1]).shape[1] for st in sum_stats]
    fixed_t = softmax_class_major(logits_t.copy()) if s is None else None
    if fixed_t is not None:  # the same probabilities in every resample: terms once, a chunk per sum
        out[summed] = _fixed_sums(sum_stats, widths, fixed_t, labels, row_weights, row_cluster, workers)
    elif sum_stats:
        assert s is not None
        sums = term_sums_at_temperatures(
            sum_stats,
            widths,
            logits_t,
            labels,
            s,
            row_weights,
            workers=workers,
            row_temperature=row_temperature,
            row_cluster=row_cluster,
        )
        for i, stat, total in zip(summed, sum_stats, sums, strict=True):  # a loop over metrics
            out[i] = stat.from_sums(total[:, 0])  # row-wise: the same bits as one resample at a time
    for i, other in enumerate(statistics):  # a loop over the other metrics, each resample's probabilities
        if not isinstance(other, SumMetricStatistic):
            out[i] = _each_resample(
                other, logits_t, fixed_t, labels, s, row_weights, row_temperature, row_cluster
            )
    return out


def _row_weights(weights: NDArray[np.float64], row_cluster: NDArray[np.int64] | None) -> NDArray[np.float64]:
    """Row weights (R', N) of a slice of the rows' weights, or of the clusters' weights (R', K)."""
    return weights if row_cluster is None else weights[:, row_cluster]


def _fixed_sums(
    statistics: Sequence[SumMetricStatistic],
    widths: Sequence[int],
    probs_t: NDArray[np.float64],
    labels: NDArray[np.int64],
    row_weights: NDArray[np.float64],
    row_cluster: NDArray[np.int64] | None,
    workers: int,
) -> NDArray[np.float64]:
    """Sum statistics of the same class-major probabilities (C, N) under each resample's weights: (M, R).

    Each distinct set of terms is computed once and summed a chunk of resamples at a time, ``workers``
    chunks side by side (each resample summed alone, so the values do not depend on the chunks).
    """
    r = row_weights.shape[0]
    out = np.empty((len(statistics), r))
    step = max(1, CHUNK_ELEMENTS // (4 * probs_t.shape[1]))
    sharing: dict[tuple[Any, ...], list[tuple[int, SumMetricStatistic]]] = {}
    for i, stat in enumerate(statistics):  # statistics with the same terms, summed once
        sharing.setdefault(terms_key(stat), []).append((i, stat))
    for members in sharing.values():  # a loop over the distinct terms
        width = widths[members[0][0]]
        terms = members[0][1].sparse_terms(probs_t, labels)

        def chunk(
            c: int,
            members: list[tuple[int, SumMetricStatistic]] = members,
            width: int = width,
            terms: tuple[NDArray[np.int64], NDArray[np.float64]] = terms,
        ) -> None:
            """Chunk ``c`` of the resamples: its own slice of ``out`` (each resample summed alone)."""
            sl = slice(c * step, min(r, (c + 1) * step))
            total = weighted_term_sums(*terms, _row_weights(row_weights[sl], row_cluster), width)[:, 0]
            for i, stat in members:  # a loop over the statistics of these terms
                out[i, sl] = stat.from_sums(total)

        for_each(chunk, -(-r // step), workers)
    return out


def _each_resample(
    statistic: SmoothECEStatistic,
    logits_t: NDArray[np.float64],
    fixed_t: NDArray[np.float64] | None,
    labels: NDArray[np.int64],
    s: NDArray[np.float64] | None,
    row_weights: NDArray[np.float64],
    row_temperature: NDArray[np.int64] | None,
    row_cluster: NDArray[np.int64] | None,
) -> NDArray[np.float64]:
    """A statistic of each resample's own probabilities (``fixed_t``, or ``logits_t`` at its ``s``): (R,)."""
    r = row_weights.shape[0]
    out = np.empty(r)
    for b in range(r):  # a loop over resamples
        if fixed_t is not None:
            probs_t = fixed_t
        else:
            assert s is not None
            log_t = s[b] if row_temperature is None else s[b, row_temperature]
            probs_t = softmax_class_major(logits_t / np.exp(log_t))
        probs = np.ascontiguousarray(probs_t.T)[None]
        out[b] = statistic.evaluate_each(probs, labels, _row_weights(row_weights[b : b + 1], row_cluster))[0]
    return out
