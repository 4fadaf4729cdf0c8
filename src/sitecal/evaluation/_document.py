"""The analyses' parts assembled into the typed ``evaluation.json`` (:class:`sitecal.results.Evaluation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from sitecal.evaluation._characteristics import characteristics, highest_confidence_errors
from sitecal.evaluation._group_intervals import GroupIntervals, interval_fields
from sitecal.evaluation._groups import OVERALL
from sitecal.evaluation._plan import EvaluationPlan
from sitecal.results import (
    BootstrapSettings,
    CohortFlow,
    Criterion,
    DisparityStages,
    EceSettings,
    Evaluation,
    GroupWarning,
    MethodComparison,
    PlanningSettings,
    ProtocolRef,
    Sensitivity,
    SplitSettings,
    TemperatureInterval,
    Verdict,
)

__all__ = ["Judged", "evaluation_document"]


@dataclass(frozen=True)
class Judged:
    """The analyses' parts the document holds beside the plan's own figures."""

    groups: GroupIntervals
    disparities: Mapping[str, Mapping[str, DisparityStages]]
    sensitivity: Sensitivity
    comparison: MethodComparison | None
    acceptance: tuple[Criterion, ...]
    verdict: Verdict
    planning: PlanningSettings | None


def evaluation_document(
    plan: EvaluationPlan, judged: Judged, *, protocol: ProtocolRef, cohort_flow: Mapping[str, Any]
) -> Evaluation:
    """The evaluation document: the plan's settings and split, the analyses' parts, the verdict."""
    policy, split, spec = plan.policy, plan.split, plan.spec
    cal, ev = policy.calibration, policy.evaluation
    fit, held = split.fit, split.held
    subgroups = judged.groups.subgroups
    flow = {**cohort_flow, "fit": int(fit.sum()), "evaluation": int(held.sum())}
    return Evaluation(
        protocol=protocol,
        class_names=tuple(plan.data.class_names),
        cohort_flow=CohortFlow.from_dict(flow, source="evaluate(cohort_flow=...)"),
        split=_split_settings(plan),
        calibration_attribute=cal.per,
        global_temperature_interval=TemperatureInterval(
            **interval_fields(judged.groups.global_temperature), n_fit=int(fit.sum())
        ),
        ece=EceSettings(n_bins=ev.n_bins, binning="width", kind="top-label", edges="(lo, hi]"),
        bootstrap=BootstrapSettings(
            n_resamples=spec.n_resamples,
            level=spec.level,
            method=cast(Literal["percentile", "bca"], spec.method),  # BootstrapSpec checked it
            seed=spec.seed,
            cluster="patient",
            strata=policy.stratify,
            refit=ev.bootstrap.refit,
            refit_scope=(cal.per or OVERALL) if ev.bootstrap.refit else None,
        ),
        min_group_size=ev.min_group_size,
        metrics=tuple(ev.metrics),
        overall=judged.groups.overall,
        subgroups={name: tuple(groups) for name, groups in subgroups.items()},
        attribute_labels={name: policy.subgroups[name].label or name for name in policy.reported},
        disparities=judged.disparities,
        acceptance=judged.acceptance,
        verdict=judged.verdict,
        warnings=tuple(
            GroupWarning(
                code="small_group",
                attribute=g.attribute,
                group=g.group,
                n=g.n,
                min_group_size=ev.min_group_size,
            )
            for groups in subgroups.values()
            for g in groups
            if g.small
        ),
        sensitivity=judged.sensitivity,
        characteristics=characteristics(plan),
        highest_confidence_errors=highest_confidence_errors(
            plan.data, held, plan.probabilities, plan.calibration_groups[held]
        ),
        planning=judged.planning,
        method_comparison=judged.comparison,
        calibration_method=None if plan.methods is None else cast(Any, cal.method),  # the protocol checked it
    )


def _split_settings(plan: EvaluationPlan) -> SplitSettings:
    """How the patients were split, and how many studies and patients each side holds."""
    split, cal = plan.split, plan.policy.calibration
    fit, held = split.fit, split.held
    return SplitSettings(
        method=split.method,
        fit_fraction=cal.split.fit_fraction if split.method == "patient" else None,
        folds=split.folds if split.method == "crossfit" else None,
        seed=cal.split.seed,
        stratify=plan.policy.stratify,
        n_fit=int(fit.sum()),
        n_evaluation=int(held.sum()),
        patients_fit=len(set(plan.data.patient_keys[fit].tolist())),
        patients_evaluation=len(set(plan.patients.tolist())),
    )
