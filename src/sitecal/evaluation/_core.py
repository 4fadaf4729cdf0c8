"""Split → per-group temperatures → metrics before/after per subgroup with intervals → acceptance.

The temperature is never evaluated on the studies it was fitted on: patients are split (seeded,
stratified) into a fit part and an evaluation part. Every metric is computed on the evaluation part, before
and after calibration, on the same patient-level bootstrap resamples (paired), so the change has its own
interval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
from tqdm import tqdm

from sitecal.calibration import GroupMethods, GroupTemperatures, fit_group_methods
from sitecal.evaluation._acceptance import PASS, combine, judge
from sitecal.evaluation._characteristics import cohort_characteristics, highest_confidence_errors
from sitecal.evaluation._compare import compare_recalibration
from sitecal.evaluation._disparities import (
    attribute_disparities,
    attribute_flags,
    refit_after_flags,
    refit_temperatures,
)
from sitecal.evaluation._group_identity import membership_digest
from sitecal.evaluation._group_intervals import (
    FitRows,
    add_method_uncertainty,
    add_temperature_uncertainty,
    group_result,
    interval_fields,
)
from sitecal.evaluation._groups import OVERALL, ordered_groups, patient_codes, patient_strata
from sitecal.evaluation._sensitivity import sensitivity_analyses
from sitecal.evaluation._side_by_side import side_by_side
from sitecal.evaluation._split import (
    Split,
    applied_probabilities,
    applied_temperatures,
    deployed_temperatures,
    fold_fits,
    make_split,
    split_patients,
)
from sitecal.evaluation._study_size import plan_study_sizes
from sitecal.metrics import softmax
from sitecal.protocol import Protocol
from sitecal.results import (
    BootstrapSettings,
    CohortFlow,
    DisparityStages,
    EceSettings,
    Evaluation,
    GroupResult,
    GroupWarning,
    ProtocolRef,
    SplitSettings,
    TemperatureInterval,
    Verdict,
)
from sitecal.stats import (
    BootstrapResult,
    BootstrapSpec,
    bootstrap_group_temperatures,
    bootstrap_temperature,
)

__all__ = ["EvaluationData", "EvaluationOutcome", "evaluate", "split_patients"]

#: The version of ``evaluation.json`` this sitecal writes (:attr:`sitecal.results.Evaluation.SCHEMA_VERSION`).
SCHEMA_VERSION = Evaluation.SCHEMA_VERSION


@dataclass(frozen=True)
class EvaluationData:
    """Everything evaluation needs, as arrays with one row per analysed study (keys pseudonymised)."""

    logits: np.ndarray  # (N, C) float
    labels: np.ndarray  # (N,) int
    # (N,) str: each row's patient, as an identity the site key does not change (sitecal._split_key;
    # in memory only): the split and the resampling follow its sorted order
    patient_keys: np.ndarray
    attributes: Mapping[str, np.ndarray]  # subgroup name -> (N,) str
    class_names: Sequence[str]
    study_keys: np.ndarray | None = None  # (N,) str, pseudonymised: names the listed errors


@dataclass(frozen=True)
class EvaluationOutcome:
    """The evaluation (typed, and as the ``evaluation.json`` object) and the fitted temperatures.

    ``document`` is ``result.to_dict()``: the JSON object ``evaluation.json`` holds.
    """

    document: dict[str, Any]
    temperatures: GroupTemperatures
    split: Split
    result: Evaluation
    methods: GroupMethods | None = None  # the deployed calibration under another method than temperature

    @property
    def fit_mask(self) -> np.ndarray:
        """Rows some temperature was fitted on (every row under cross-fitting)."""
        return self.split.fit

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, ``inconclusive`` or ``insufficient data``."""
        return str(self.document["verdict"])


def evaluate(
    protocol: Protocol,
    data: EvaluationData,
    *,
    cohort_flow: Mapping[str, Any],
    protocol_sha256: str,
    progress: bool = False,
) -> EvaluationOutcome:
    """Fit temperatures on the fit split and evaluate on the rest, per subgroup, with bootstrap intervals.

    Parameters
    ----------
    protocol : Protocol
        Calibration, evaluation and acceptance settings.
    data : EvaluationData
        Logits, labels, patient keys and subgroup attributes of every analysed study.
    cohort_flow : mapping
        Counts from files to studies (stored in the document for the report).
    protocol_sha256 : str
        Recorded in the document.
    progress : bool
        Show a progress bar over the bootstrapped groups.

    Returns
    -------
    EvaluationOutcome
    """
    cal, ev = protocol.calibration, protocol.evaluation
    n = len(data.labels)
    per = cal.per
    cal_groups = data.attributes[per] if per else np.full(n, "all", dtype=object)
    stratify = cal.split.stratify or per
    strata_all = data.attributes[stratify] if stratify else np.full(n, "all", dtype=object)
    split = make_split(cal, data.patient_keys, strata_all)
    # from here on patients are integer codes in the keys' order: the same plans and resamples, no text sorts
    data = dataclasses.replace(data, patient_keys=patient_codes(data.patient_keys))
    fit, held = split.fit, split.held
    policy = {"min_group_size": cal.min_group_size, "fallback": cal.fallback}
    temperatures = deployed_temperatures(
        split, data.logits, data.labels, cal_groups, data.patient_keys, policy
    )
    logits, labels = data.logits[held], data.labels[held]
    patients = data.patient_keys[held]
    methods: GroupMethods | None = None
    # the split's fold fits (fold_fits), where computed: the refit bootstrap starts from them
    fits: list[tuple[np.ndarray, np.ndarray, GroupTemperatures]] | None = None
    applied_all: np.ndarray | None = None  # each row's temperature from the other folds (cross-fitting)
    if cal.method != "temperature":  # deployed: fitted on the fit part (every row under cross-fitting)
        methods = fit_group_methods(
            cal.method, data.logits[fit], data.labels[fit], cal_groups[fit], min_group_size=cal.min_group_size
        )
        after = applied_probabilities(
            split, data.logits, data.labels, cal_groups, cal.method, cal.min_group_size
        )[held]
    elif split.method == "patient":  # the deployed temperatures are the ones evaluated
        after = softmax(logits, temperature=temperatures.temperatures_for(cal_groups[held]))
        fits = [(fit, held, temperatures)] if fit.any() and held.any() else []  # as fold_fits gives it
    else:
        fits = fold_fits(split, data.logits, data.labels, cal_groups, data.patient_keys, policy)
        applied_all = applied_temperatures(
            split, data.logits, data.labels, cal_groups, data.patient_keys, policy, fits=fits
        )
        after = softmax(logits, temperature=applied_all[held])
    prob_sets = {"before": softmax(logits), "after": after}
    strata = patient_strata(patients, strata_all[held])
    spec = BootstrapSpec(
        n_resamples=ev.bootstrap.n_resamples,
        level=ev.bootstrap.level,
        method=ev.bootstrap.method,
        seed=ev.bootstrap.seed,
    )

    plan: list[tuple[str, str, np.ndarray]] = [(OVERALL, "All studies", np.ones(len(labels), dtype=bool))]
    attributes = protocol.reported_subgroups
    for name in attributes:
        values = data.attributes[name][held]
        for value in ordered_groups(values):
            plan.append((name, value, values == value))

    fit_rows = FitRows(
        data.logits[fit], data.labels[fit], data.patient_keys[fit], cal_groups[fit], split.fold[fit]
    )
    shrinkage = None
    if any(entry.source == "empirical_bayes" for entry in temperatures.groups.values()):
        # every group's shrunk T depends on every group's fit rows: one bootstrap of the whole procedure
        shrinkage = bootstrap_group_temperatures(
            fit_rows.logits, fit_rows.labels, fit_rows.groups, clusters=fit_rows.patients, spec=spec
        )

    def one_group(item: tuple[str, str, np.ndarray]) -> tuple[GroupResult, dict[str, BootstrapResult]]:
        """One group's metrics with intervals (refitted for a calibration group), and its O/E intervals."""
        attribute, group, mask = item
        entry, oe = group_result(
            attribute,
            group,
            {k: v[mask] for k, v in prob_sets.items()},
            labels[mask],
            patients[mask],
            strata[mask] if attribute == OVERALL else None,
            protocol=protocol,
            spec=spec,
            temperature=temperatures.temperature_for(group) if attribute == per and methods is None else None,
        )
        if attribute == (per or OVERALL) and methods is not None:
            entry = add_method_uncertainty(
                entry,
                None if per is None else group,
                methods,
                fit_rows,
                (logits[mask], labels[mask], patients[mask], split.fold[held][mask]),
                protocol=protocol,
                spec=spec,
                folds=split.folds if split.method == "crossfit" else None,
            )
        elif attribute == (per or OVERALL):  # a calibration group (or the single global temperature)
            entry = add_temperature_uncertainty(
                entry,
                None if per is None else group,
                temperatures,
                fit_rows,
                logits[mask],
                labels[mask],
                patients[mask],
                split.fold[held][mask],
                protocol=protocol,
                spec=spec,
                split=split,
                shrinkage=shrinkage,
            )
        return entry, oe

    # groups side by side: each draws from its own seeded stream, so the results do not depend on which
    # thread computes them or when (one group's serial parts, its draws and refits, overlap another's)
    with tqdm(total=len(plan), desc="Bootstrap", unit="group", disable=not progress) as bar:
        grouped = side_by_side(one_group, plan, spec.n_workers, lambda: bar.update(1))
    results: dict[str, list[GroupResult]] = {name: [] for name in attributes}
    overall: GroupResult | None = None
    # each group's top-label O/E before and after, on its resamples: the sensitivity analyses' intervals
    oe_intervals: dict[tuple[str, str], dict[str, BootstrapResult]] = {}
    # each evaluated row's rank by (patient, logits): the groups' fingerprints do not depend on row order
    row_rank = np.empty(len(labels), dtype=np.int64)
    row_rank[np.lexsort((*logits.T[::-1], patients))] = np.arange(len(labels))
    for (attribute, group, mask), (entry, oe) in zip(plan, grouped, strict=True):  # a loop over groups
        entry = dataclasses.replace(entry, membership=membership_digest(row_rank[mask]))
        oe_intervals[attribute, group] = oe
        if attribute == OVERALL:
            overall = entry
        else:
            results[attribute].append(entry)
    assert overall is not None  # the plan starts with it

    global_interval = bootstrap_temperature(
        fit_rows.logits, fit_rows.labels, clusters=fit_rows.patients, spec=spec
    ).temperature
    replicates = (
        refit_temperatures(
            split, data.logits, data.labels, cal_groups, data.patient_keys, policy, spec, fits=fits
        )
        if ev.bootstrap.refit and attributes and ev.disparity_metrics and methods is None
        else None
    )

    held_attributes = {name: data.attributes[name][held] for name in attributes}
    flags = attribute_flags(held_attributes, prob_sets, labels, patients, protocol=protocol, spec=spec)
    own_temperatures = all(entry.source == "own" for entry in temperatures.groups.values())
    if per in flags and cal.method == "temperature" and split.method == "patient" and own_temperatures:
        flags[per] = refit_after_flags(
            flags[per],
            (logits, labels, held_attributes[per], patients),
            (data.logits[fit], data.labels[fit], cal_groups[fit], data.patient_keys[fit]),
            protocol=protocol,
            spec=spec,
        )

    def compared(name: str) -> dict[str, DisparityStages]:
        return attribute_disparities(
            name,
            prob_sets,
            labels,
            patients,
            held_attributes[name],
            protocol=protocol,
            spec=spec,
            refit=None if replicates is None else (logits, replicates),
            flags=flags.get(name),
        )

    # attributes are compared side by side: each draws from its own seeded streams, so the results do
    # not depend on which thread computes them or when
    with tqdm(total=len(attributes), desc="Disparities", unit="attribute", disable=not progress) as bar:
        compared_all = side_by_side(compared, list(attributes), spec.n_workers, lambda: bar.update(1))
    disparities = dict(zip(attributes, compared_all, strict=True))
    sensitivity = sensitivity_analyses(
        protocol, data, split, temperatures, methods=methods, applied=applied_all, oe_intervals=oe_intervals
    )
    comparison = compare_recalibration(
        protocol,
        {
            "logits": fit_rows.logits,
            "labels": fit_rows.labels,
            "patients": fit_rows.patients,
            "groups": fit_rows.groups,
            "folds": fit_rows.folds,
        },
        {
            "logits": logits,
            "labels": labels,
            "patients": patients,
            "groups": cal_groups[held],
            "folds": split.fold[held],
        },
        spec=spec,
        progress=progress,
    )
    acceptance = [
        judge(c, overall, results, ev.bootstrap.level, sensitivity.recalibration) for c in protocol.acceptance
    ]
    verdict: Verdict = combine(a.verdict for a in acceptance) if acceptance else PASS
    planned, planning = plan_study_sizes(
        acceptance,
        protocol.acceptance,
        prob_sets,
        {name: values[held] for name, values in data.attributes.items()},
        settings=ev.planning,
        n_bins=ev.n_bins,
        seed=ev.bootstrap.seed,
        progress=progress,
    )
    warnings = [
        GroupWarning(
            code="small_group", attribute=g.attribute, group=g.group, n=g.n, min_group_size=ev.min_group_size
        )
        for groups in results.values()
        for g in groups
        if g.small
    ]
    flow = {**cohort_flow, "fit": int(fit.sum()), "evaluation": int(held.sum())}
    result = Evaluation(
        protocol=ProtocolRef(name=protocol.name, sha256=protocol_sha256),
        class_names=tuple(data.class_names),
        cohort_flow=CohortFlow.from_dict(flow, source="evaluate(cohort_flow=...)"),
        split=SplitSettings(
            method=split.method,
            fit_fraction=cal.split.fit_fraction if split.method == "patient" else None,
            folds=split.folds if split.method == "crossfit" else None,
            seed=cal.split.seed,
            stratify=stratify,
            n_fit=int(fit.sum()),
            n_evaluation=int(held.sum()),
            patients_fit=len(set(data.patient_keys[fit].tolist())),
            patients_evaluation=len(set(patients.tolist())),
        ),
        calibration_attribute=per,
        global_temperature_interval=TemperatureInterval(
            **interval_fields(global_interval), n_fit=int(fit.sum())
        ),
        ece=EceSettings(n_bins=ev.n_bins, binning="width", kind="top-label", edges="(lo, hi]"),
        bootstrap=BootstrapSettings(
            n_resamples=spec.n_resamples,
            level=spec.level,
            method=cast(Literal["percentile", "bca"], spec.method),  # BootstrapSpec checked it
            seed=spec.seed,
            cluster="patient",
            strata=stratify,
            refit=ev.bootstrap.refit,
            refit_scope=(per or OVERALL) if ev.bootstrap.refit else None,
        ),
        min_group_size=ev.min_group_size,
        metrics=tuple(ev.metrics),
        overall=overall,
        subgroups={name: tuple(groups) for name, groups in results.items()},
        attribute_labels={name: protocol.subgroups[name].label or name for name in attributes},
        disparities=disparities,
        acceptance=planned,
        verdict=verdict,
        warnings=tuple(warnings),
        sensitivity=sensitivity,
        characteristics=cohort_characteristics(protocol, data, split),
        highest_confidence_errors=highest_confidence_errors(data, held, prob_sets, cal_groups[held]),
        planning=planning,
        method_comparison=comparison,
        calibration_method=None if methods is None else cast(Any, cal.method),  # the protocol checked it
    )
    return EvaluationOutcome(
        document=result.to_dict(), temperatures=temperatures, split=split, result=result, methods=methods
    )
