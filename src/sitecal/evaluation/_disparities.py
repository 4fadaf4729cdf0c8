"""Gaps between the groups of an attribute, per metric and stage, with intervals, as typed results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, cast

import numpy as np

from sitecal.evaluation._groups import patient_strata
from sitecal.protocol import Protocol
from sitecal.results import BootstrapSummary, Disparity, DisparityStages, IntervalNote, NotCompared
from sitecal.stats import (
    BootstrapResult,
    BootstrapSpec,
    DisparityResult,
    GroupFlags,
    disparity_intervals,
    size_matched_flags,
)

__all__ = ["attribute_disparities"]


def attribute_disparities(
    attribute: str,
    prob_sets: Mapping[str, np.ndarray],
    labels: np.ndarray,
    patients: np.ndarray,
    values: np.ndarray,
    *,
    protocol: Protocol,
    spec: BootstrapSpec,
) -> dict[str, DisparityStages]:
    """Gaps between the groups of one attribute, per metric and stage, on shared patient resamples.

    With fewer than two groups of ``min_group_size`` evaluation studies there is nothing to compare: each
    stage then records why, with every group's size (:func:`disparity_intervals` would refuse them).
    """
    ev = protocol.evaluation
    names, counts = np.unique(np.asarray(values).astype(str), return_counts=True)
    sizes = {str(g): int(c) for g, c in zip(names.tolist(), counts.tolist(), strict=True)}
    if sum(c >= ev.min_group_size for c in sizes.values()) < 2:
        note = NotCompared(note="too_few_groups", min_group_size=ev.min_group_size, sizes=sizes)
        return {metric: DisparityStages(before=note, after=note) for metric in ev.disparity_metrics}
    strata = patient_strata(patients, values)
    out: dict[str, DisparityStages] = {}
    for metric in ev.disparity_metrics:
        stages = {
            stage: _disparity(
                disparity_intervals(
                    probs,
                    labels,
                    values,
                    clusters=patients,
                    strata=strata,
                    metric=metric,
                    n_bins=ev.n_bins,
                    min_group_size=ev.min_group_size,
                    spec=spec,
                ),
                # flags: against random patient sets of each group's size, max-T across the groups
                size_matched_flags(
                    probs,
                    labels,
                    values,
                    clusters=patients,
                    metric=metric,
                    n_bins=ev.n_bins,
                    min_group_size=ev.min_group_size,
                    n_permutations=spec.n_resamples,
                    level=spec.level,
                    seed=spec.seed,
                ),
            )
            for stage, probs in prob_sets.items()
        }
        out[metric] = DisparityStages(before=stages["before"], after=stages["after"])
    return out


def _disparity(result: DisparityResult, flags: GroupFlags) -> Disparity:
    return Disparity(
        metric=result.metric,
        groups=tuple(result.groups),
        too_small=dict(result.too_small),
        per_group={g: _summary(r) for g, r in result.per_group.items()},
        range=_summary(result.range),
        highest=result.highest,
        lowest=result.lowest,
        versus_rest={g: _summary(r) for g, r in result.versus_rest.items()},
        expected_gap=dict(flags.expected_gap),
        adjusted_p=dict(flags.adjusted_p),
        flagged=dict(flags.flagged),
        n_permutations=flags.n_permutations,
    )


def _summary(result: BootstrapResult) -> BootstrapSummary:
    d = result.to_dict()  # NaN and infinities as None
    return BootstrapSummary(
        estimate=d["estimate"],
        low=d["low"],
        high=d["high"],
        level=result.level,
        method=cast(Literal["percentile", "bca"], result.method),  # BootstrapSpec checked it
        n_resamples=result.n_resamples,
        seed=result.seed,
        n=result.n,
        n_clusters=result.n_clusters,
        n_strata=result.n_strata,
        standard_error=d["standard_error"],
        bias=d["bias"],
        note=cast(IntervalNote, result.reason) if result.reason else None,  # a code of sitecal.stats
    )
