"""The sensitivity analyses' recalibration: slope, intercept and O/E per group, before and after.

Top-label slope and calibration-in-the-large intercept with cluster-robust Wald (or bootstrap) intervals,
and the observed/expected ratio with a patient-cluster bootstrap interval, for every group of each reported
subgroup attribute and overall (the ``recalibration`` entry of
:func:`~sitecal.evaluation._sensitivity.sensitivity_analyses`), and the small conversions the analyses
share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, cast

import numpy as np
from scipy.special import ndtri

from sitecal.evaluation._groups import OVERALL
from sitecal.evaluation._plan import EvaluationPlan
from sitecal.evaluation._side_by_side import side_by_side
from sitecal.metrics import RecalibrationStatistic, TopLabelOEStatistic, top_label_recalibration
from sitecal.results import (
    IntervalNote,
    Recalibration,
    RecalibrationGroup,
    RecalibrationIntervals,
    RecalibrationNote,
    RecalibrationStage,
    RecalibrationValue,
)
from sitecal.stats import BootstrapResult, BootstrapSpec, bootstrap_interval

__all__ = ["STAGES", "finite", "recalibration"]

STAGES = ("before", "after")


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _fit_note(reason: str) -> RecalibrationNote | None:
    """``top_label_recalibration``'s code ("" or one ``RecalibrationNote`` lists) as a document's note."""
    return cast(RecalibrationNote, reason) if reason else None


def _interval_note(reason: str) -> IntervalNote | None:
    """``BootstrapResult.reason`` ("" or a code ``IntervalNote`` lists) as a document's note."""
    return cast(IntervalNote, reason) if reason else None


def _recalibration_stage(
    probs: np.ndarray,
    labels: np.ndarray,
    patients: np.ndarray,
    strata: np.ndarray | None,
    plan: EvaluationPlan,
    slope_intervals: str,
    oe: BootstrapResult | None = None,
) -> RecalibrationStage:
    """Slope and intercept with cluster-robust Wald (or bootstrap) intervals; O/E with a cluster bootstrap.

    ``oe``: the O/E's bootstrap interval where the evaluation already drew these resamples (the same
    patients, strata, probabilities and settings: the interval this function would compute).
    """
    boot = plan.policy.evaluation.bootstrap
    point = top_label_recalibration(probs, labels, clusters=patients)
    z = float(ndtri((1.0 + boot.level) / 2.0))
    kw: dict[str, Any] = {
        "n_resamples": boot.n_resamples,
        "level": boot.level,
        "method": boot.method,
        "seed": boot.seed,
    }
    values: dict[str, RecalibrationValue] = {}
    note: RecalibrationNote | IntervalNote | None
    for name, estimate, se, reason in (
        ("slope", point.slope, point.slope_se, point.slope_note),
        ("intercept", point.intercept, point.intercept_se, point.intercept_note),
    ):
        note = _fit_note(reason)
        entry: dict[str, Any] = {"estimate": estimate, "low": None, "high": None, "standard_error": se}
        if estimate is not None and slope_intervals == "bootstrap":
            res = bootstrap_interval(
                RecalibrationStatistic(cast(Any, name)),
                (probs, labels),
                clusters=patients,
                strata=strata,
                **kw,
            )
            entry |= {
                "low": finite(res.low),
                "high": finite(res.high),
                "standard_error": finite(res.standard_error),
            }
            note = _interval_note(res.reason)
        elif estimate is not None and se is None:
            note = "no_standard_error"
        elif estimate is not None and se is not None:
            entry["low"], entry["high"] = finite(estimate - z * se), finite(estimate + z * se)
        values[name] = RecalibrationValue(**entry, note=note)
    res = (
        bootstrap_interval(TopLabelOEStatistic(), (probs, labels), clusters=patients, strata=strata, **kw)
        if oe is None
        else oe
    )
    return RecalibrationStage(
        n_correct=point.n_correct,
        mean_confidence=point.mean_confidence,
        slope=values["slope"],
        intercept=values["intercept"],
        oe_ratio=RecalibrationValue(
            estimate=point.oe_ratio,
            low=finite(res.low),
            high=finite(res.high),
            standard_error=finite(res.standard_error),
            note=_interval_note(res.reason),
        ),
    )


def recalibration(
    plan: EvaluationPlan,
    *,
    slope_intervals: str,
    oe_intervals: Mapping[tuple[str, str], Mapping[str, BootstrapResult]],
) -> Recalibration:
    """Slope, intercept and O/E of every group of the plan, before and after calibration.

    ``oe_intervals``: the O/E intervals already drawn on these resamples (by the per-group intervals).
    """
    min_size = plan.policy.evaluation.min_group_size

    def recalibrated(item: tuple[str, str, np.ndarray]) -> RecalibrationGroup:
        """One group's slope, intercept and O/E, before and after."""
        attribute, group, mask = item
        patients = plan.patients[mask]
        strata = plan.strata[mask] if attribute == OVERALL else None
        given = oe_intervals.get((attribute, group), {})
        stages = {
            stage: _recalibration_stage(
                plan.probabilities[stage][mask],
                plan.labels[mask],
                patients,
                strata,
                plan,
                slope_intervals,
                given.get(stage),
            )
            for stage in STAGES
        }
        return RecalibrationGroup(
            attribute=attribute,
            group=group,
            n=int(mask.sum()),
            n_patients=len(set(patients.tolist())),
            small=bool(mask.sum() < min_size),
            before=stages["before"],
            after=stages["after"],
        )

    # the groups' fits are independent of each other (their bootstraps draw their own seeded streams)
    entries = side_by_side(recalibrated, list(plan.groups), BootstrapSpec().n_workers)
    overall: RecalibrationGroup | None = None
    groups: dict[str, list[RecalibrationGroup]] = {name: [] for name in plan.policy.reported}
    for (attribute, _, _), entry in zip(plan.groups, entries, strict=True):  # a loop over groups
        if attribute == OVERALL:
            overall = entry
        else:
            groups[attribute].append(entry)
    boot = plan.policy.evaluation.bootstrap
    # the bootstrap's settings (method, resamples, seed) are the document's 'bootstrap'
    fits: Literal["cluster_bootstrap", "wald_cluster_robust"] = (
        "cluster_bootstrap" if slope_intervals == "bootstrap" else "wald_cluster_robust"
    )
    assert overall is not None  # the plan starts with it
    return Recalibration(
        event="top_label_correct",
        slope_model="logit_slope",
        intercept_model="logit_offset_intercept",
        oe_definition="accuracy_over_mean_confidence",
        level=boot.level,
        intervals=RecalibrationIntervals(slope=fits, intercept=fits, oe_ratio="cluster_bootstrap"),
        overall=overall,
        subgroups={name: tuple(rows) for name, rows in groups.items()},
    )
