"""Disparities between subgroups with their own paired bootstrap intervals.

A gap between two groups is not judged from two overlapping intervals: every group's metric is computed
on the same resamples of patients, and the gap itself (max − min across groups, or a group minus the rest
of the cohort) is bootstrapped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_probs
from sitecal.errors import DataError
from sitecal.metrics import SumMetricStatistic, metric_statistic
from sitecal.metrics.registry import ECE
from sitecal.metrics.registry import names as metric_names
from sitecal.stats._drawn_sums import DrawnSums
from sitecal.stats._evaluators import auto_chunk_size
from sitecal.stats._intervals import interval_result
from sitecal.stats._resample import ClusterPlan, Draws, make_plan, map_chunks
from sitecal.stats._scale import SQUARED_METRICS
from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = ["DisparityResult", "disparity_intervals", "disparity_intervals_each"]


@dataclass(frozen=True)
class DisparityResult:
    """Paired intervals of the differences of one metric between groups.

    Attributes
    ----------
    metric : str
    groups : tuple of str
        Groups judged (at least ``min_group_size`` rows), in sorted order.
    too_small : Mapping[str, int]
        Groups left out of the comparison and their row counts (listed, not hidden).
    per_group : Mapping[str, BootstrapResult]
        Each judged group's metric, from the same resamples.
    range : BootstrapResult
        ``max_g m_g − min_g m_g`` over the judged groups (the max and min groups may change between
        resamples: the statistic is the spread, not a fixed pair).
    highest, lowest : str
        The groups at the max and min of the point estimate.
    versus_rest : Mapping[str, BootstrapResult]
        ``m_g − m_(not g)``: each judged group against all other rows (small groups included in the rest).
    """

    metric: str
    groups: tuple[str, ...]
    too_small: Mapping[str, int]
    per_group: Mapping[str, BootstrapResult]
    range: BootstrapResult
    highest: str
    lowest: str
    versus_rest: Mapping[str, BootstrapResult]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "metric": self.metric,
            "groups": list(self.groups),
            "too_small": dict(self.too_small),
            "per_group": {g: r.to_dict() for g, r in self.per_group.items()},
            "range": self.range.to_dict(),
            "highest": self.highest,
            "lowest": self.lowest,
            "versus_rest": {g: r.to_dict() for g, r in self.versus_rest.items()},
        }


def disparity_intervals(
    probs: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    clusters: ArrayLike | None,
    strata: ArrayLike | None = None,
    metric: str = ECE.name,
    n_bins: int = 15,
    min_group_size: int = 1,
    spec: BootstrapSpec | None = None,
) -> DisparityResult:
    """Bootstrap the spread of a metric across groups and each group's gap to the rest.

    Parameters
    ----------
    probs : array_like, shape (N, C)
    labels : array_like, shape (N,)
    groups : array_like of str, shape (N,)
        Group of each row (e.g. scanner).
    clusters : array_like of shape (N,) or None
        Patient of each row; whole patients are resampled (None: each row its own cluster).
    strata : array_like, shape (N,), optional
        Resampling strata (clusters must nest in them), e.g. the group of each patient's first study.
    metric : str, default "ece"
        A metric with a per-cluster-sum fast path (the registry's ``summable`` metrics): ``"ece"``,
        ``"classwise_ece"``, ``"mce"``, ``"ece_debiased"``, ``"oe_ratio"``, ``"nll"``, ``"brier"``,
        ``"accuracy"``.
    n_bins : int, default 15
    min_group_size : int, default 1
        Groups with fewer rows are not judged (listed in ``too_small``); at least two must remain.
    spec : BootstrapSpec, optional

    Returns
    -------
    DisparityResult

    Notes
    -----
    For metric ``m`` written as ``g(Σ_i w_i t_i)`` (see :func:`sitecal.metrics.metric_statistic`), the
    per-cluster sums of ``t_i`` are kept separately for every group, so one resample of cluster weights
    gives every group's value, the spread and the gaps to the rest at O(clusters × groups) cost.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 400)
    >>> p1 = np.where(y == 1, 0.8, 0.2)
    >>> probs = np.stack([1 - p1, p1], axis=1)
    >>> g = np.where(np.arange(400) < 200, "a", "b")
    >>> res = disparity_intervals(probs, y, g, clusters=None, metric="accuracy",
    ...                           spec=BootstrapSpec(n_resamples=200))
    >>> res.range.estimate, res.groups
    (0.0, ('a', 'b'))
    """
    spec = BootstrapSpec() if spec is None else spec
    return disparity_intervals_each(
        probs,
        labels,
        groups,
        clusters=clusters,
        strata=strata,
        metrics=[metric],
        n_bins=n_bins,
        min_group_size=min_group_size,
        spec=spec,
        func="disparity_intervals",
    )[metric]


def disparity_intervals_each(
    probs: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    clusters: ArrayLike | None,
    strata: ArrayLike | None = None,
    metrics: Sequence[str],
    n_bins: int = 15,
    min_group_size: int = 1,
    spec: BootstrapSpec | None = None,
    func: str = "disparity_intervals_each",
) -> dict[str, DisparityResult]:
    """:func:`disparity_intervals` of several metrics on the same resamples, per metric.

    Each metric's result is what :func:`disparity_intervals` gives for it alone, bit for bit: the same
    draws (the chunks depend on the groups, not the metric), and each sum adds the same terms in the same
    order. The metrics' per-cluster sums sit side by side in one :class:`DrawnSums`, so each chunk is
    drawn once and its draws counted once for all of them.
    """
    spec = BootstrapSpec() if spec is None else spec
    p = check_probs(probs, func=func)
    plan = make_plan(p.shape[0], clusters, strata, func=func)
    comparison = FixedComparison(p, labels, groups, plan, metrics, n_bins, min_group_size, func=func)
    reps = comparison.empty_replicates(spec.n_resamples)
    # the draws are the largest temporaries (the sums are (chunk, G * J)): chunks as large as they allow,
    # so that each cluster's entries are read once for many resamples
    chunk = spec.chunk_size or auto_chunk_size([], plan, spec.n_resamples)

    def chunk_values(draws: Draws) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        return comparison.values(draws.indices)

    chunks = map_chunks(
        chunk_values,
        plan,
        seed=spec.seed,
        n_resamples=spec.n_resamples,
        chunk_size=chunk,
        workers=spec.n_workers,
    )
    for start, stop, per_metric in chunks:  # a loop over chunks
        comparison.store(reps, start, stop, per_metric)
    return comparison.results(reps, spec)


class FixedComparison:
    """The groups of an attribute compared at fixed probabilities: every metric's sums, values, results.

    The metrics' per-cluster sums of their rows' sparse terms sit side by side in one :class:`DrawnSums`
    (each group its own block of columns, each metric's entries in row order), so a chunk of draws is
    counted once for all of them. ``plan``: the rows' cluster plan, whose draws are the resamples.
    """

    def __init__(
        self,
        probs: NDArray[np.float64],
        labels: ArrayLike,
        groups: ArrayLike,
        plan: ClusterPlan,
        metrics: Sequence[str],
        n_bins: int,
        min_group_size: int,
        *,
        func: str,
    ) -> None:
        checked = [
            checked_groups(probs, labels, groups, m, n_bins, min_group_size, func=func) for m in metrics
        ]
        if not checked:
            raise DataError(f"{func}: give at least one metric.")
        p, y, _, grouped = checked[0]
        self.metrics, self.plan, self.grouped = tuple(metrics), plan, grouped
        self._probs, self._labels = p, y
        self.statistics = [c[2] for c in checked]
        names, codes, sizes = grouped.names, grouped.codes, grouped.sizes
        self.too_small = {
            str(names[i]): int(sizes[i]) for i in range(names.shape[0]) if sizes[i] < min_group_size
        }
        self.n_groups = names.shape[0]
        self.widths = [statistic.row_terms(p[:1], y[:1]).shape[1] for statistic in self.statistics]
        self.offsets = np.concatenate([[0], np.cumsum([self.n_groups * w for w in self.widths])]).astype(
            np.int64
        )
        p_t = np.ascontiguousarray(p.T)
        cluster, column, value = [], [], []
        terms = zip(self.statistics, self.widths, self.offsets, strict=False)
        for statistic, width, offset in terms:  # a loop over metrics
            columns, entries = statistic.sparse_terms(p_t, y)
            cluster.append(np.broadcast_to(plan.cluster_of_row, columns.shape).reshape(-1))
            column.append((offset + codes[None, :] * width + columns).reshape(-1))
            value.append(np.reshape(entries, -1))
        self._drawn_sums = DrawnSums.from_entries(
            np.concatenate(cluster),
            np.concatenate(column),
            np.concatenate(value),
            plan.n_clusters,
            int(self.offsets[-1]),
        )
        everyone = np.arange(plan.n_clusters, dtype=np.int64)[None, :]  # each cluster once, in order
        self.estimates = [(g[0], r[0]) for g, r in self.values(everyone)]

    def values(self, indices: NDArray[np.int64]) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        """Per metric, per-group metric and metric of the complement, each (B, G), from drawn indices."""
        total = self._drawn_sums(indices)
        out = []
        blocks = zip(self.statistics, self.widths, self.offsets, strict=False)
        for statistic, width, offset in blocks:  # a loop over metrics
            by_group = total[:, offset : offset + self.n_groups * width].reshape(-1, self.n_groups, width)
            rest = by_group.sum(axis=1, keepdims=True) - by_group
            out.append((_apply(statistic, by_group), _apply(statistic, rest)))
        return out

    def empty_replicates(self, n_resamples: int) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        """Per metric, the (B, G) arrays of every group's and its complement's replicates."""
        shape = (n_resamples, self.n_groups)
        return [(np.empty(shape), np.empty(shape)) for _ in self.metrics]

    @staticmethod
    def store(
        reps: list[tuple[NDArray[np.float64], NDArray[np.float64]]],
        start: int,
        stop: int,
        per_metric: list[tuple[NDArray[np.float64], NDArray[np.float64]]],
    ) -> None:
        """Put a chunk's :meth:`values` into resamples ``start:stop`` of ``reps``."""
        for (rep_group, rep_rest), (group_values, rest_values) in zip(reps, per_metric, strict=True):
            rep_group[start:stop], rep_rest[start:stop] = group_values, rest_values

    def results(
        self, reps: list[tuple[NDArray[np.float64], NDArray[np.float64]]], spec: BootstrapSpec
    ) -> dict[str, DisparityResult]:
        """Per metric, the comparison's intervals (BCa: each cluster left out once)."""
        out = {}
        for metric, statistic, estimate, replicates in zip(
            self.metrics, self.statistics, self.estimates, reps, strict=True
        ):  # a loop over metrics
            jackknife = (
                group_jackknife(statistic, self._probs, self._labels, self.plan, self.grouped)
                if spec.method == "bca" and self.plan.n_clusters > 1
                else None
            )
            out[metric] = assemble(
                metric,
                self.grouped,
                self.too_small,
                estimate,
                replicates,
                jackknife,
                spec=spec,
                plan=self.plan,
            )
        return out


def group_jackknife(
    statistic: SumMetricStatistic,
    probs: NDArray[np.float64],
    labels: NDArray[np.int64],
    plan: ClusterPlan,
    grouped: Grouped,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Every group's metric and its complement's with each cluster left out once: (K, G) each (BCa)."""
    terms = statistic.row_terms(probs, labels)
    sums = np.zeros((plan.n_clusters, grouped.names.shape[0], terms.shape[1]))
    np.add.at(sums, (plan.cluster_of_row, grouped.codes), terms)
    left_out = sums.sum(axis=0, keepdims=True) - sums  # (K, G, J): every cluster left out once
    return _apply(statistic, left_out), _apply(statistic, left_out.sum(axis=1, keepdims=True) - left_out)


def assemble(
    metric: str,
    grouped: Grouped,
    too_small: Mapping[str, int],
    estimates: tuple[NDArray[np.float64], NDArray[np.float64]],
    replicates: tuple[NDArray[np.float64], NDArray[np.float64]],
    jackknife: tuple[NDArray[np.float64], NDArray[np.float64]] | None,
    *,
    spec: BootstrapSpec,
    plan: ClusterPlan,
) -> DisparityResult:
    """The comparison's intervals from every group's and its complement's values.

    ``estimates``: (G,) each; ``replicates``: (B, G) each; ``jackknife``: (K, G) each, or None.
    """
    names, sizes = grouped.names, grouped.sizes
    judged = grouped.judged.tolist()
    est_group, est_rest = estimates
    rep_group, rep_rest = replicates
    jk_group, jk_rest = (None, None) if jackknife is None else jackknife

    def result(
        estimate: float, reps: NDArray[np.float64], jk: NDArray[np.float64] | None, n: int
    ) -> BootstrapResult:
        return interval_result(
            estimate, reps, jk, spec=spec, n=n, n_clusters=plan.n_clusters, n_strata=plan.n_strata
        )

    cols = np.array(judged)
    spread = rep_group[:, cols].max(axis=1) - rep_group[:, cols].min(axis=1)
    spread_jk = None if jk_group is None else jk_group[:, cols].max(axis=1) - jk_group[:, cols].min(axis=1)
    est = est_group[cols]
    n_total = int(plan.n)
    return DisparityResult(
        metric=metric,
        groups=tuple(str(names[i]) for i in judged),
        too_small=too_small,
        per_group={
            str(names[i]): result(
                float(est_group[i]),
                rep_group[:, i],
                None if jk_group is None else jk_group[:, i],
                int(sizes[i]),
            )
            for i in judged
        },
        range=result(float(est.max() - est.min()), spread, spread_jk, n_total),
        highest=str(names[cols[int(np.argmax(est))]]),
        lowest=str(names[cols[int(np.argmin(est))]]),
        versus_rest={
            str(names[i]): result(
                float(est_group[i] - est_rest[i]),
                rep_group[:, i] - rep_rest[:, i],
                None if jk_group is None or jk_rest is None else jk_group[:, i] - jk_rest[:, i],
                n_total,
            )
            for i in judged
        },
    )


@dataclass(frozen=True)
class Grouped:
    """The groups of the rows: sorted ``names``, each row's index in them, their sizes, the judged ones."""

    names: NDArray[np.str_]
    codes: NDArray[np.int64]
    sizes: NDArray[np.int64]
    judged: NDArray[np.int64]


def checked_groups(
    probs: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    metric: str,
    n_bins: int,
    min_group_size: int,
    *,
    func: str,
) -> tuple[NDArray[np.float64], NDArray[np.int64], SumMetricStatistic, Grouped]:
    """Validated probabilities, labels, the metric's sum form and the groups, for a comparison of groups.

    Raises DataError for a malformed input, a metric that is not a sum of per-row terms on fixed bins
    (equal-mass ECE, smooth ECE), or fewer than two groups of ``min_group_size`` rows.
    """
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    g = np.asarray(groups).astype(str)
    if g.shape != (p.shape[0],):
        raise DataError(
            f"The 'groups' parameter of {func} must have shape ({p.shape[0]},), one entry per row. "
            f"Got shape {g.shape}."
        )
    statistic = metric_statistic(metric, n_bins=n_bins)
    if statistic.name in SQUARED_METRICS:
        allowed = ", ".join(repr(n) for n in metric_names(summable=True) if n not in SQUARED_METRICS)
        raise DataError(
            f"The 'metric' parameter of {func} cannot be {metric!r}: its gaps between groups would be "
            "differences of square roots of estimates clamped at 0, which have no valid interval. Compare "
            f"groups on {allowed}."
        )
    if not isinstance(statistic, SumMetricStatistic):
        allowed = ", ".join(repr(name) for name in metric_names(summable=True) if name not in SQUARED_METRICS)
        raise DataError(
            f"The 'metric' parameter of {func} must be a metric with fixed bins that is a sum of per-row "
            f"terms ({allowed}): every group's value in every resample comes from per-patient sums. Got "
            f"{metric!r}."
        )
    names, codes = np.unique(g, return_inverse=True)
    sizes = np.bincount(codes, minlength=names.shape[0])
    judged = np.flatnonzero(sizes >= min_group_size)
    if judged.shape[0] < 2:
        raise DataError(
            f"{func} needs at least two groups with at least {min_group_size} rows. "
            f"Got sizes {dict(zip(names.tolist(), sizes.tolist(), strict=True))}."
        )
    return p, y, statistic, Grouped(names, codes.astype(np.int64), sizes.astype(np.int64), judged)


def _apply(statistic: SumMetricStatistic, sums: NDArray[np.float64]) -> NDArray[np.float64]:
    """``statistic.from_sums`` over a (B, G, J) array → (B, G); empty groups give NaN."""
    b, n_groups, width = sums.shape
    with np.errstate(invalid="ignore", divide="ignore"):
        out = statistic.from_sums(sums.reshape(b * n_groups, width)).reshape(b, n_groups)
    return np.where(sums[:, :, 0] > 0, out, np.nan)
