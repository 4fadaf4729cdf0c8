"""calibration.compare: every listed method against temperature scaling, per calibration group.

Each group's methods are fitted on its fit studies, or on every fit study when it has fewer than
calibration.min_group_size of them (the temperature's global fallback, applied to every method alike), and
measured on its evaluation studies with :func:`sitecal.stats.compare_methods` (paired refit bootstrap).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np

from sitecal._progress import progress_over
from sitecal.evaluation._disparities import bootstrap_summary
from sitecal.evaluation._groups import OVERALL, ordered_groups
from sitecal.evaluation._plan import EvaluationPlan
from sitecal.results import ComparedGroup, ComparedMeasure, ComparisonFinding, MethodComparison
from sitecal.stats import BootstrapSpec, compare_methods
from sitecal.stats import MethodComparison as Compared

__all__ = ["compare_recalibration"]


def compare_recalibration(plan: EvaluationPlan, *, progress: bool = False) -> MethodComparison | None:
    """The comparison of calibration.compare's methods, or None when it lists none.

    Each group's methods are fitted on the plan's fit rows (every row under cross-fitting, each fold by
    the other folds) and measured on its evaluated rows, on the plan's resamples; its intervals are read
    as percentile intervals. ``progress``: a progress bar over the groups.
    """
    cal = plan.policy.calibration
    if not cal.compare:
        return None
    given = plan.spec
    spec = BootstrapSpec(
        n_resamples=given.n_resamples, level=given.level, method="percentile", seed=given.seed
    )
    fitted, held_groups = plan.fit_rows, plan.calibration_groups[plan.held]
    compared: list[tuple[str, str, np.ndarray, np.ndarray]] = [
        (
            OVERALL,
            "All studies",
            np.ones(len(fitted.labels), dtype=bool),
            np.ones(len(plan.labels), dtype=bool),
        )
    ]
    if cal.per is not None:
        for group in ordered_groups(held_groups):
            compared.append((cal.per, group, fitted.groups == group, held_groups == group))
    groups: list[ComparedGroup] = []
    options: dict[str, dict[str, float]] = {}
    for item in progress_over(compared, desc="Methods compared", unit="group", disable=not progress):
        entry, options = _compared_group(plan, item, spec)
        groups.append(entry)
    return MethodComparison(
        reference="temperature",
        methods=("temperature", *cal.compare),
        metrics=tuple(groups[0].methods["temperature"]),
        interval_method="percentile",
        level=spec.level,
        n_resamples=spec.n_resamples,
        seed=spec.seed,
        min_group_size=cal.min_group_size,
        options=options,
        groups=tuple(groups),
    )


def _compared_group(
    plan: EvaluationPlan, item: tuple[str, str, np.ndarray, np.ndarray], spec: BootstrapSpec
) -> tuple[ComparedGroup, dict[str, dict[str, float]]]:
    """One group's methods against temperature scaling, and each method's fitted options (as numbers).

    ``item``: the group's attribute and name, its fit rows and its evaluated rows. A group with fewer
    own fit studies than calibration.min_group_size is fitted on every fit row (the global fallback).
    """
    cal, ev = plan.policy.calibration, plan.policy.evaluation
    attribute, group, fit_mask, held_mask = item
    fitted = plan.fit_rows
    folds = cal.split.folds if cal.split.by == "crossfit" else None
    own = attribute == OVERALL or _fitted_on(fitted.folds, fit_mask, folds) >= cal.min_group_size
    rows = fit_mask if own else np.ones(len(fitted.labels), dtype=bool)
    crossfit = (
        {}
        if folds is None
        else {
            "fit_folds": fitted.folds[rows],
            "eval_folds": plan.split.fold[plan.held][held_mask],
            "folds": folds,
        }
    )
    result = compare_methods(
        fitted.logits[rows],
        fitted.labels[rows],
        plan.logits[held_mask],
        plan.labels[held_mask],
        fit_clusters=fitted.patients[rows],
        eval_clusters=plan.patients[held_mask],
        methods=tuple(cal.compare),
        n_bins=ev.n_bins,
        spec=spec,
        **crossfit,
    )
    entry = ComparedGroup(
        attribute=attribute,
        group=group,
        n_fit=int(rows.sum()),
        n_evaluation=int(held_mask.sum()),
        fit_rows="own" if own else "global",
        small=bool(held_mask.sum() < ev.min_group_size),
        methods={m: _measures(result, m) for m in result.methods},
    )
    return entry, {m: _numeric(o) for m, o in result.options.items()}


def _fitted_on(fit_folds: np.ndarray, mask: np.ndarray, folds: int | None) -> int:
    """Fit studies a group's own fit would use: its fit rows, or cross-fitted its fewest outside a fold."""
    if folds is None:
        return int(mask.sum())
    return min(int((mask & (fit_folds != k)).sum()) for k in range(folds))


def _numeric(options: Mapping[str, object]) -> dict[str, float]:
    """A method's options as numbers: a pair (the temperature's bounds) as ``<name>_low`` and ``_high``."""
    out: dict[str, float] = {}
    for key, value in options.items():
        if isinstance(value, tuple | list) and len(value) == 2:
            out[f"{key}_low"], out[f"{key}_high"] = float(value[0]), float(value[1])
        elif isinstance(value, int | float):
            out[key] = float(value)
    return out


def _measures(result: Compared, method: str) -> dict[str, ComparedMeasure]:
    out: dict[str, ComparedMeasure] = {}
    for metric in result.metrics:
        value = bootstrap_summary(result.get(method, metric))
        if method == result.methods[0]:
            out[metric] = ComparedMeasure(value=value)
            continue
        finding = cast(ComparisonFinding, result.finding(method, metric))  # one of stats.FINDINGS
        out[metric] = ComparedMeasure(
            value=value, difference=bootstrap_summary(result.difference(method, metric)), finding=finding
        )
    return out
