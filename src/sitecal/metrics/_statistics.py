r"""Metrics in the weighted forms the bootstrap engine (:mod:`sitecal.stats`) evaluates fast.

A bootstrap resample of clusters is a vector of integer weights (how often each cluster, hence each
of its rows, was drawn). Most metrics here are a function of weighted sums of per-row terms,

.. math:: \theta(w) = g\Bigl(\sum_i w_i\, t_i\Bigr), \qquad t_i \in \mathbb{R}^J,

so the engine can sum the terms per cluster once and evaluate a whole chunk of resamples from
``(B, n_clusters)`` weights. These objects provide ``row_terms`` (the ``t_i``, shape (N, J)) and
``from_sums`` (``g``, applied row-wise to shape (B, J)); with all weights 1 they reproduce the
plain metric. Equal-mass ECE has data-dependent bin edges, which must be recomputed in each
resample, so it offers ``prepare`` / ``evaluate`` on per-row weights instead.

Not here, because they are not functions of per-cluster sums: the calibration slope and intercept
(a logistic fit per resample) and the AUROC (ranks). Bootstrap them through
:func:`sitecal.stats.bootstrap_interval` with a plain callable ``statistic(probs, labels, weights=W)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int, check_labels, check_option, check_probs
from sitecal.metrics._binning import assign_bins, bin_edges
from sitecal.metrics._calibration_error import top_label
from sitecal.metrics._clinical import event_outcome
from sitecal.metrics._debiased import debiased_squared_from_sums
from sitecal.metrics._scores import accuracy_terms, brier_terms, nll_terms

__all__ = ["METRIC_NAMES", "MassECEStatistic", "SumMetricStatistic", "metric_statistic"]

#: Names accepted by :func:`metric_statistic` (and by ``sitecal.stats.bootstrap_metrics``).
METRIC_NAMES = (
    "ece",
    "ece_mass",
    "classwise_ece",
    "mce",
    "ece_debiased",
    "oe_ratio",
    "nll",
    "brier",
    "accuracy",
)

_SCORES = {"nll": nll_terms, "brier": brier_terms, "accuracy": accuracy_terms}


def _validated(
    probs: ArrayLike, labels: ArrayLike, *, func: str
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    return p, y


def _one_hot_columns(
    index: NDArray[np.int64], values: NDArray[np.float64], n_cols: int
) -> NDArray[np.float64]:
    out = np.zeros((index.shape[0], n_cols))
    out[np.arange(index.shape[0]), index] = values
    return out


@dataclass(frozen=True)
class SumMetricStatistic:
    """A metric written as ``g(sum_i w_i t_i)`` for the bootstrap's sufficient-statistic fast path.

    Use :func:`metric_statistic` to build one. ``data`` is ``(probs, labels)`` as for the metric
    functions; equal-width bins only (fixed edges, so exact under any weights).

    Attributes
    ----------
    name : str
        One of ``"ece"``, ``"classwise_ece"``, ``"mce"``, ``"ece_debiased"``, ``"oe_ratio"``, ``"nll"``,
        ``"brier"``, ``"accuracy"``.
    n_bins : int
        Bins of the ECE-family metrics (ignored by the scores).
    """

    name: str
    n_bins: int = 15

    def row_terms(self, probs: ArrayLike, labels: ArrayLike) -> NDArray[np.float64]:
        """Per-row terms ``t_i``, shape (N, J); column 0 is always the row count (all ones)."""
        p, y = _validated(probs, labels, func=f"metric_statistic({self.name!r}).row_terms")
        n = p.shape[0]
        ones = np.ones((n, 1))
        if self.name in _SCORES:
            return np.hstack([ones, _SCORES[self.name](p, y)[:, None]])
        if self.name == "oe_ratio":
            prob, outcome, _ = event_outcome(p, y, "auto", func="metric_statistic('oe_ratio')")
            return np.stack([np.ones(n), outcome, prob], axis=1)
        edges = bin_edges(np.empty(0), self.n_bins, "width")
        if self.name == "classwise_ece":
            n_classes = p.shape[1]
            # column 1 + k * n_bins + b holds (1[y = k] - p_k) for rows whose p_k is in bin b
            index = assign_bins(p.reshape(-1), edges).reshape(n, n_classes)
            index = index + self.n_bins * np.arange(n_classes)[None, :]
            gap = (y[:, None] == np.arange(n_classes)[None, :]) - p
            terms = np.zeros((n, n_classes * self.n_bins))
            np.put_along_axis(terms, index, gap, axis=1)
            return np.hstack([ones, terms])
        confidence, correct = top_label(p, y)
        index = assign_bins(confidence, edges)
        gaps = _one_hot_columns(index, correct - confidence, self.n_bins)
        if self.name == "ece":
            return np.hstack([ones, gaps])
        counts = _one_hot_columns(index, np.ones(n), self.n_bins)
        if self.name == "ece_debiased":
            # per bin: count, sum of correctness, sum of confidence (correctness is 0/1, so its sum
            # also gives the sum of squares the variance correction needs)
            corrects = _one_hot_columns(index, correct, self.n_bins)
            confidences = _one_hot_columns(index, confidence, self.n_bins)
            return np.hstack([ones, counts, corrects, confidences])
        return np.hstack([ones, counts, gaps])  # "mce"

    def from_sums(self, sums: NDArray[np.float64]) -> NDArray[np.float64]:
        """Compute the metric from weighted sums of the terms, row-wise: shape (B, J) -> (B,)."""
        total = sums[:, 0]
        if self.name in _SCORES:
            out: NDArray[np.float64] = sums[:, 1] / total
            return out
        if self.name == "oe_ratio":
            with np.errstate(invalid="ignore", divide="ignore"):
                out = sums[:, 1] / sums[:, 2]
            return out
        if self.name == "ece":
            out = np.abs(sums[:, 1:]).sum(axis=1) / total
            return out
        if self.name == "ece_debiased":
            b = self.n_bins
            squared = debiased_squared_from_sums(
                sums[:, 1 : 1 + b], sums[:, 1 + b : 1 + 2 * b], sums[:, 1 + 2 * b :]
            )
            out = np.sqrt(np.maximum(squared, 0.0))
            return out
        if self.name == "classwise_ece":
            n_classes = (sums.shape[1] - 1) // self.n_bins
            out = np.abs(sums[:, 1:]).sum(axis=1) / (total * n_classes)
            return out
        counts = sums[:, 1 : 1 + self.n_bins]
        gaps = np.abs(sums[:, 1 + self.n_bins :])
        with np.errstate(invalid="ignore", divide="ignore"):
            per_bin = np.where(counts > 0, gaps / np.where(counts > 0, counts, 1.0), -np.inf)
        out = per_bin.max(axis=1)
        return out

    def __call__(
        self, probs: ArrayLike, labels: ArrayLike, *, weights: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Evaluate under per-row weights of shape (B, N); returns (B,)."""
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        return self.from_sums(w @ self.row_terms(probs, labels))


@dataclass(frozen=True)
class _MassPrepared:
    order: NDArray[np.int64]  # rows sorted by confidence (stable)
    gap_sorted: NDArray[np.float64]  # correct - confidence, in sorted order
    tie_end: NDArray[np.int64]  # last sorted position holding the same confidence
    n: int


@dataclass(frozen=True)
class MassECEStatistic:
    """Top-label ECE with equal-mass bins whose edges are recomputed under every weighting.

    Under integer weights ``w`` (a resample), the edges are the inverted-CDF quantiles of the
    weighted confidences, exactly what :func:`~sitecal.metrics.expected_calibration_error` with
    ``binning="mass"`` computes on the resampled data. Cost O(B N n_bins) per chunk of B weightings.
    """

    n_bins: int = 15
    name: str = "ece_mass"

    def prepare(self, probs: ArrayLike, labels: ArrayLike) -> _MassPrepared:
        """Validate once and sort the confidences."""
        p, y = _validated(probs, labels, func="metric_statistic('ece_mass').prepare")
        confidence, correct = top_label(p, y)
        order = np.argsort(confidence, kind="stable")
        ordered = confidence[order]
        tie_end = (np.searchsorted(ordered, ordered, side="right") - 1).astype(np.int64)
        return _MassPrepared(order, (correct - confidence)[order], tie_end, int(p.shape[0]))

    def evaluate(self, prepared: _MassPrepared, weights: NDArray[np.float64]) -> NDArray[np.float64]:
        """ECE under per-row weights of shape (B, N) (integer-valued); returns (B,)."""
        ws = weights[:, prepared.order]
        cw = np.cumsum(ws, axis=1)
        total = cw[:, -1]
        n_chunk = ws.shape[0]
        ends = np.empty((n_chunk, self.n_bins), dtype=np.int64)
        for k in range(1, self.n_bins):  # a loop over bins, not samples
            # first sorted position whose cumulative weight reaches k/B of the total, in exact
            # integer-valued arithmetic: the weighted inverted-CDF quantile q_k
            first = np.count_nonzero(self.n_bins * cw < k * total[:, None], axis=1)
            ends[:, k - 1] = prepared.tie_end[first]  # ties go with their edge, into the left bin
        ends[:, -1] = prepared.n - 1
        cumulative_gap = np.cumsum(ws * prepared.gap_sorted[None, :], axis=1)
        at_ends = np.take_along_axis(cumulative_gap, ends, axis=1)
        per_bin = np.diff(at_ends, axis=1, prepend=0.0)
        out: NDArray[np.float64] = np.abs(per_bin).sum(axis=1) / total
        return out

    def jackknife(
        self, prepared: _MassPrepared, cluster_of_row: NDArray[np.int64], n_clusters: int
    ) -> NDArray[np.float64]:
        """Exact leave-one-cluster-out values, shape (n_clusters,), in O(n_clusters * n_bins * R).

        ``R`` is the largest cluster size. Without cluster ``c`` (``r`` rows), edge ``k`` is the
        ``ceil(k (N - r) / B)``-th kept row in sorted order; its position is found by stepping past
        the removed rows' sorted positions one at a time (a loop over ``R``, vectorised over
        clusters and bins), and the removed rows' gaps are subtracted from the cumulative sums.
        """
        n, n_bins = prepared.n, self.n_bins
        position = np.empty(n, dtype=np.int64)
        position[prepared.order] = np.arange(n)  # sorted position of each row
        by_cluster = np.argsort(cluster_of_row, kind="stable")
        sizes = np.bincount(cluster_of_row, minlength=n_clusters)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        width = int(sizes.max())
        # removed[c, i]: sorted position of cluster c's i-th row (ascending), padded with n (never <= j)
        removed = np.full((n_clusters, width), n, dtype=np.int64)
        slot = np.arange(n) - np.repeat(starts, sizes)
        removed[cluster_of_row[by_cluster], slot] = position[by_cluster]
        removed.sort(axis=1)
        kept = (n - sizes).astype(np.int64)
        k = np.arange(1, n_bins, dtype=np.int64)
        target = -((-k[None, :] * kept[:, None]) // n_bins)  # ceil(k (N - r) / B), 1-based rank
        first = target - 1
        for i in range(width):  # a loop over rows within a cluster, vectorised over clusters and bins
            first += removed[:, i : i + 1] <= first
        first = np.minimum(first, n - 1)
        ends = np.concatenate([prepared.tie_end[first], np.full((n_clusters, 1), n - 1)], axis=1)
        cumulative = np.cumsum(prepared.gap_sorted)
        at_ends = cumulative[ends]
        gap_padded = np.append(prepared.gap_sorted, 0.0)
        for i in range(width):  # drop the removed rows' contributions
            p = removed[:, i : i + 1]
            at_ends -= np.where(p <= ends, gap_padded[p], 0.0)
        per_bin = np.diff(at_ends, axis=1, prepend=0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out: NDArray[np.float64] = np.abs(per_bin).sum(axis=1) / kept
        return out

    def __call__(
        self, probs: ArrayLike, labels: ArrayLike, *, weights: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Evaluate under per-row weights of shape (B, N); returns (B,)."""
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        return self.evaluate(self.prepare(probs, labels), w)


def metric_statistic(name: str, *, n_bins: int = 15) -> SumMetricStatistic | MassECEStatistic:
    """Package a metric for :func:`sitecal.stats.bootstrap_interval`, with ``data=(probs, labels)``.

    Parameters
    ----------
    name : str
        One of :data:`METRIC_NAMES`:
        ``"ece"`` is top-label ECE with equal-width bins, ``"ece_mass"`` with equal-mass bins,
        ``"classwise_ece"`` class-wise with equal-width bins, ``"mce"`` top-label MCE with
        equal-width bins, ``"ece_debiased"`` the debiased top-label l2 error
        (:func:`~sitecal.metrics.debiased_expected_calibration_error`) with equal-width bins from
        per-bin counts, correct and confidence sums, ``"oe_ratio"``
        (:func:`~sitecal.metrics.observed_expected_ratio`, ``event="auto"``) a ratio of two sums; the
        scores are those of :mod:`sitecal.metrics`. Calibration slope/intercept and AUROC are not
        sums of per-row terms and have no entry here.
    n_bins : int, default 15

    Returns
    -------
    SumMetricStatistic or MassECEStatistic
        Both are callables ``stat(probs, labels, weights=W)`` with ``W`` of shape (B, N), returning
        (B,); with ``W = ones((1, N))`` the value equals the metric function's.

    Examples
    --------
    >>> stat = metric_statistic("accuracy")
    >>> stat([[0.9, 0.1], [0.2, 0.8]], [0, 0], weights=np.array([[1.0, 1.0], [2.0, 0.0]])).tolist()
    [0.5, 1.0]
    """
    func = "metric_statistic"
    which = check_option(name, name="name", func=func, options=METRIC_NAMES)
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    if which == "ece_mass":
        return MassECEStatistic(n_bins=bins)
    return SumMetricStatistic(name=which, n_bins=bins)
