"""Equal-mass top-label ECE under resampling weights (the bootstrap engine's form).

Equal-mass bins have data-dependent edges, which must be recomputed in each resample, so this metric is
not a function of per-cluster sums (:class:`sitecal.metrics._statistics.SumForm`). Instead
:class:`MassECEStatistic` offers ``prepare`` (validate once, sort the confidences) and ``evaluate`` on
per-row weights, plus an exact leave-one-cluster-out ``jackknife``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_probs
from sitecal.metrics._calibration_error import top_label

__all__ = ["MassECEStatistic"]


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

    name: str
    n_bins: int = 15

    def prepare(self, probs: ArrayLike, labels: ArrayLike) -> _MassPrepared:
        """Validate once and sort the confidences."""
        func = f"metric_statistic({self.name!r}).prepare"
        p = check_probs(probs, func=func)
        y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
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
