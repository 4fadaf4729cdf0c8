"""Gaps between the groups of an attribute, per metric and stage, with intervals, as typed results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from sitecal._progress import progress_bar
from sitecal.calibration import GroupTemperatures
from sitecal.evaluation._groups import patient_strata
from sitecal.evaluation._plan import EvaluationPlan
from sitecal.evaluation._side_by_side import side_by_side
from sitecal.evaluation._split import Split, fold_fits
from sitecal.results import BootstrapSummary, Disparity, DisparityStages, IntervalNote, NotCompared
from sitecal.stats import (
    BootstrapResult,
    BootstrapSpec,
    DisparityResult,
    GroupFlags,
    TemperatureFit,
    TemperatureReplicates,
    disparity_intervals_each,
    refit_disparity_stages,
    refit_size_matched_flags,
    size_matched_flags_attributes,
)

if TYPE_CHECKING:
    from sitecal.protocol import EvaluationSettings

__all__ = [
    "attribute_disparities",
    "attribute_flags",
    "disparities",
    "refit_after_flags",
    "refit_temperatures",
]


def disparities(plan: EvaluationPlan, *, progress: bool = False) -> dict[str, dict[str, DisparityStages]]:
    """Each reported attribute's gaps between its groups, per disparity metric and stage, with flags.

    With ``bootstrap.refit`` (temperature scaling), the after-calibration gaps refit every temperature in
    each resample. Under one split with each calibration group's own temperature, the calibration
    attribute's after-calibration flags refit them in every permutation too (:func:`refit_after_flags`).
    """
    policy, spec = plan.policy, plan.spec
    ev, cal = policy.evaluation, policy.calibration
    attributes = policy.reported
    data, split = plan.data, plan.split
    replicates = (
        refit_temperatures(
            split,
            data.logits,
            data.labels,
            plan.calibration_groups,
            data.patient_keys,
            policy.temperature_policy,
            spec,
            fits=plan.fits,
        )
        if ev.bootstrap.refit and attributes and ev.disparity_metrics and plan.methods is None
        else None
    )
    held_attributes = {name: plan.attribute(name) for name in attributes}
    probs, labels, patients = plan.probabilities, plan.labels, plan.patients
    flags = attribute_flags(held_attributes, probs, labels, patients, ev=ev, spec=spec)
    own_temperatures = all(entry.source == "own" for entry in plan.temperatures.groups.values())
    per, fit = cal.per, split.fit
    if per in flags and cal.method == "temperature" and split.method == "patient" and own_temperatures:
        flags[per] = refit_after_flags(
            flags[per],
            (plan.logits, labels, held_attributes[per], patients),
            (data.logits[fit], data.labels[fit], plan.calibration_groups[fit], data.patient_keys[fit]),
            ev=ev,
            spec=spec,
        )

    def compared(name: str) -> dict[str, DisparityStages]:
        return attribute_disparities(
            name,
            probs,
            labels,
            patients,
            held_attributes[name],
            ev=ev,
            spec=spec,
            refit=None if replicates is None else (plan.logits, replicates),
            flags=flags.get(name),
        )

    # attributes are compared side by side: each draws from its own seeded streams, so the results do
    # not depend on which thread computes them or when
    with progress_bar(
        total=len(attributes), desc="Disparities", unit="attribute", disable=not progress
    ) as bar:
        compared_all = side_by_side(compared, list(attributes), spec.n_workers, lambda: bar.update(1))
    return dict(zip(attributes, compared_all, strict=True))


def refit_temperatures(
    split: Split,
    logits: np.ndarray,
    labels: np.ndarray,
    cal_groups: np.ndarray,
    patients: np.ndarray,
    policy: Mapping[str, Any],
    spec: BootstrapSpec,
    fits: list[tuple[np.ndarray, np.ndarray, GroupTemperatures]] | None = None,
) -> TemperatureReplicates | None:
    """Every evaluated row's temperature, to refit in each resample of the disparity bootstrap.

    Each fit of the split (the fit part, or each fold's other folds) gives every calibration group of
    the rows it calibrates either its own temperature (refitted on that group's fit rows) or the global
    one (refitted on all its fit rows). None where some group's temperature is shrunk or empirical-Bayes
    (their penalty or shrinkage is not repeated here): the after-calibration gaps then hold T fixed.
    ``fits``: :func:`~sitecal.evaluation._split.fold_fits` of these arguments, where the caller has them.
    """
    temperature_fits: list[TemperatureFit] = []
    fit_rows, held_rows = split.fit, split.held
    if fits is None:
        fits = fold_fits(split, logits, labels, cal_groups, patients, policy)
    for fit, held, temps in fits:  # a loop over the split's fits
        for group in np.unique(cal_groups[held]).tolist():
            known = temps.groups.get(group)
            source = "global_fallback" if known is None else known.source
            if source not in ("own", "global_fallback"):
                return None
            rows = fit & (cal_groups == group) if source == "own" else fit
            full = known.fit if known is not None and source == "own" else temps.global_fit
            # a group's own temperatures in the folds are fitted on whole patients of its rows, the
            # global ones on whole patients of every row: each set shares a surrogate
            family = f"own {group}" if source == "own" else "global"
            temperature_fits.append(
                TemperatureFit(rows[fit_rows], (held & (cal_groups == group))[held_rows], full, family)
            )
    return TemperatureReplicates(
        logits[fit_rows],
        labels[fit_rows],
        patients[fit_rows],
        patients[held_rows],
        temperature_fits,
        shared=split.method == "crossfit",
        spec=spec,
    )


def attribute_disparities(
    attribute: str,
    prob_sets: Mapping[str, np.ndarray],
    labels: np.ndarray,
    patients: np.ndarray,
    values: np.ndarray,
    *,
    ev: EvaluationSettings,
    spec: BootstrapSpec,
    refit: tuple[np.ndarray, TemperatureReplicates] | None = None,
    flags: list[GroupFlags] | None = None,
) -> dict[str, DisparityStages]:
    """Gaps between the groups of one attribute, per metric and stage, on shared patient resamples.

    With fewer than two groups of ``min_group_size`` evaluation studies there is nothing to compare: each
    stage then records why, with every group's size (:func:`disparity_intervals` would refuse them).
    ``refit``: the evaluated rows' logits and their temperatures' refits; given, the after-calibration
    gaps and every group's after-calibration value are bootstrapped with each temperature refitted in
    every resample (:func:`~sitecal.stats.refit_disparity_stages`, which compares the before stage on
    the same draws); the size-matched flags still hold the temperatures fixed. ``flags``: this
    attribute's flags (:func:`attribute_flags`), where the caller computed them with the other
    attributes'; None: computed here.
    """
    if not ev.disparity_metrics:  # the protocol compares no metric: no gap, and no flag, to compute
        return {}
    note = _not_compared(values, ev.min_group_size)
    if note is not None:
        return {metric: DisparityStages(before=note, after=note) for metric in ev.disparity_metrics}
    strata = patient_strata(patients, values)
    refitted: dict[str, DisparityResult] | None = None
    compared: dict[str, dict[str, DisparityResult]] = {}
    if refit is not None:  # the other stages on the refit's draws: the same resamples, drawn once
        refitted, compared = refit_disparity_stages(
            refit[0],
            labels,
            values,
            clusters=patients,
            strata=strata,
            temperatures=refit[1],
            metrics=ev.disparity_metrics,
            n_bins=ev.n_bins,
            min_group_size=ev.min_group_size,
            fixed={stage: probs for stage, probs in prob_sets.items() if stage != "after"},
        )
    if flags is None:
        flags = attribute_flags({"": values}, prob_sets, labels, patients, ev=ev, spec=spec)[""]
    flagged = iter(flags)
    # each stage's metrics on the same draws, counted once for all of them (the after stage is the
    # refit's, where it is refitted)
    for stage, probs in prob_sets.items():  # a loop over the stages not compared above
        if stage in compared or (refitted is not None and stage == "after"):
            continue
        compared[stage] = disparity_intervals_each(
            probs,
            labels,
            values,
            clusters=patients,
            strata=strata,
            metrics=ev.disparity_metrics,
            n_bins=ev.n_bins,
            min_group_size=ev.min_group_size,
            spec=spec,
        )
    out: dict[str, DisparityStages] = {}
    for metric in ev.disparity_metrics:
        stages = {
            stage: _disparity(
                refitted[metric] if refitted is not None and stage == "after" else compared[stage][metric],
                next(flagged),
                refit=refitted is not None and stage == "after",
            )
            for stage in prob_sets
        }
        out[metric] = DisparityStages(before=stages["before"], after=stages["after"])
    return out


def _not_compared(values: np.ndarray, min_group_size: int) -> NotCompared | None:
    """Why an attribute's groups are not compared (fewer than two of ``min_group_size`` rows), or None."""
    names, counts = np.unique(np.asarray(values).astype(str), return_counts=True)
    sizes = {str(g): int(c) for g, c in zip(names.tolist(), counts.tolist(), strict=True)}
    if sum(c >= min_group_size for c in sizes.values()) < 2:
        return NotCompared(note="too_few_groups", min_group_size=min_group_size, sizes=sizes)
    return None


def attribute_flags(
    attributes: Mapping[str, np.ndarray],
    prob_sets: Mapping[str, np.ndarray],
    labels: np.ndarray,
    patients: np.ndarray,
    *,
    ev: EvaluationSettings,
    spec: BootstrapSpec,
) -> dict[str, list[GroupFlags]]:
    """Each comparable attribute's size-matched flags, per disparity metric and stage in that order.

    Against random patient sets of each group's size, max-T across the groups. The permutations depend
    on the patients and the seed only: one draw of them serves every attribute, metric and stage
    (:func:`~sitecal.stats.size_matched_flags_attributes`), and each attribute's flags are those it
    would get alone. Attributes with fewer than two groups to compare are left out.
    """
    cases = [(probs, metric) for metric in ev.disparity_metrics for probs in prob_sets.values()]
    names = [name for name, values in attributes.items() if _not_compared(values, ev.min_group_size) is None]
    if not names or not cases:
        return {}
    flags = size_matched_flags_attributes(
        [(attributes[name], cases) for name in names],
        labels,
        clusters=patients,
        n_bins=ev.n_bins,
        min_group_size=ev.min_group_size,
        n_permutations=spec.n_resamples,
        level=spec.level,
        seed=spec.seed,
        workers=spec.n_workers,
    )
    return dict(zip(names, flags, strict=True))


def refit_after_flags(
    flags: list[GroupFlags],
    evaluated: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    fitted: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    ev: EvaluationSettings,
    spec: BootstrapSpec,
) -> list[GroupFlags]:
    """The calibration attribute's flags with its after-calibration ones refitted in every permutation.

    Under one split with each group's own temperature, a group's evaluated studies all share that
    temperature's fitting error, while a random patient set mixes several groups' errors: its gap varies
    less than a real group's, and flags held to those sets ran at 8-16 % under no disparity
    (``benchmarks/bench_fairness.md``). :func:`~sitecal.stats.refit_size_matched_flags` relabels the fit
    patients too and refits every group's temperature in each permutation. ``evaluated`` and ``fitted``
    are ``(logits, labels, groups, patients)``; ``flags`` is :func:`attribute_flags`' list for the
    calibration attribute (before and after per metric), whose "after" entries are replaced.
    """
    refitted = refit_size_matched_flags(
        evaluated[0],
        evaluated[1],
        evaluated[2],
        clusters=evaluated[3],
        fit_logits=fitted[0],
        fit_labels=fitted[1],
        fit_groups=fitted[2],
        fit_clusters=fitted[3],
        metrics=ev.disparity_metrics,
        n_bins=ev.n_bins,
        min_group_size=ev.min_group_size,
        n_permutations=spec.n_resamples,
        level=spec.level,
        seed=spec.seed,
    )
    out = list(flags)
    for i, after in enumerate(refitted):  # cases are (before, after) per metric, in the protocol's order
        out[2 * i + 1] = after
    return out


def _disparity(result: DisparityResult, flags: GroupFlags, *, refit: bool) -> Disparity:
    return Disparity(
        metric=result.metric,
        groups=tuple(result.groups),
        too_small=dict(result.too_small),
        per_group={g: bootstrap_summary(r) for g, r in result.per_group.items()},
        range=bootstrap_summary(result.range),
        highest=result.highest,
        lowest=result.lowest,
        versus_rest={g: bootstrap_summary(r) for g, r in result.versus_rest.items()},
        expected_gap=dict(flags.expected_gap),
        adjusted_p=dict(flags.adjusted_p),
        flagged=dict(flags.flagged),
        n_permutations=flags.n_permutations,
        refit=True if refit else None,
    )


def bootstrap_summary(result: BootstrapResult) -> BootstrapSummary:
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
