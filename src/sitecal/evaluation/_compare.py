"""calibration.compare: every listed method against temperature scaling, per calibration group.

Each group's methods are fitted on its fit studies, or on every fit study when it has fewer than
calibration.min_group_size of them (the temperature's global fallback, applied to every method alike), and
measured on its evaluation studies with :func:`sitecal.stats.compare_methods` (paired refit bootstrap).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np
from tqdm import tqdm

from sitecal.evaluation._disparities import bootstrap_summary
from sitecal.evaluation._groups import OVERALL, ordered_groups
from sitecal.protocol import Protocol
from sitecal.results import ComparedGroup, ComparedMeasure, ComparisonFinding, MethodComparison
from sitecal.stats import BootstrapSpec, compare_methods
from sitecal.stats import MethodComparison as Compared

__all__ = ["compare_recalibration"]


def compare_recalibration(
    protocol: Protocol,
    fit: Mapping[str, np.ndarray],
    held: Mapping[str, np.ndarray],
    *,
    spec: BootstrapSpec,
    progress: bool = False,
) -> MethodComparison | None:
    """The comparison of calibration.compare's methods, or None when it lists none.

    Parameters
    ----------
    protocol : Protocol
    fit, held : mapping
        The fit and the evaluation rows: ``logits``, ``labels``, ``patients`` and ``groups`` (each row's
        calibration group; one value for all when calibration.per is unset), and under cross-fitting
        ``folds`` (each row's fold; both are then every study).
    spec : BootstrapSpec
        The evaluation's resampling; its intervals are read as percentile intervals.
    progress : bool
        A progress bar over the groups.
    """
    cal, ev = protocol.calibration, protocol.evaluation
    if not cal.compare:
        return None
    spec = BootstrapSpec(n_resamples=spec.n_resamples, level=spec.level, method="percentile", seed=spec.seed)
    folds = cal.split.folds if cal.split.by == "crossfit" else None
    plan: list[tuple[str, str, np.ndarray, np.ndarray]] = [
        (
            OVERALL,
            "All studies",
            np.ones(len(fit["labels"]), dtype=bool),
            np.ones(len(held["labels"]), dtype=bool),
        )
    ]
    if cal.per is not None:
        for group in ordered_groups(held["groups"]):
            plan.append((cal.per, group, fit["groups"] == group, held["groups"] == group))
    groups: list[ComparedGroup] = []
    options: dict[str, dict[str, float]] = {}
    for attribute, group, fit_mask, held_mask in tqdm(
        plan, desc="Methods compared", unit="group", disable=not progress
    ):
        own = attribute == OVERALL or _fitted_on(fit, fit_mask, folds) >= cal.min_group_size
        rows = fit_mask if own else np.ones(len(fit["labels"]), dtype=bool)
        crossfit = (
            {}
            if folds is None
            else {
                "fit_folds": fit["folds"][rows],
                "eval_folds": held["folds"][held_mask],
                "folds": folds,
            }
        )
        result = compare_methods(
            fit["logits"][rows],
            fit["labels"][rows],
            held["logits"][held_mask],
            held["labels"][held_mask],
            fit_clusters=fit["patients"][rows],
            eval_clusters=held["patients"][held_mask],
            methods=tuple(cal.compare),
            n_bins=ev.n_bins,
            spec=spec,
            **crossfit,
        )
        options = {m: _numeric(o) for m, o in result.options.items()}
        groups.append(
            ComparedGroup(
                attribute=attribute,
                group=group,
                n_fit=int(rows.sum()),
                n_evaluation=int(held_mask.sum()),
                fit_rows="own" if own else "global",
                small=bool(held_mask.sum() < ev.min_group_size),
                methods={m: _measures(result, m) for m in result.methods},
            )
        )
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


def _fitted_on(fit: Mapping[str, np.ndarray], mask: np.ndarray, folds: int | None) -> int:
    """Fit studies a group's own fit would use: its fit rows, or cross-fitted its fewest outside a fold."""
    if folds is None:
        return int(mask.sum())
    return min(int((mask & (fit["folds"] != k)).sum()) for k in range(folds))


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
