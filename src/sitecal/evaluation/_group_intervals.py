"""One subgroup's results: its metrics with bootstrap intervals, and a calibration group's refit.

:func:`group_result` bootstraps a group's metrics before and after calibration (and its top-label O/E,
which the sensitivity analyses report); :func:`add_temperature_uncertainty` and
:func:`add_method_uncertainty` give a calibration group its temperature's (or method's) interval and,
with ``bootstrap.refit``, after-calibration intervals that refit it in every resample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from sitecal._progress import progress_bar
from sitecal.calibration import GroupMethods, GroupTemperatures
from sitecal.evaluation._group_identity import membership_digest
from sitecal.evaluation._groups import OVERALL
from sitecal.evaluation._plan import EvaluationPlan, FitRows
from sitecal.evaluation._side_by_side import side_by_side
from sitecal.evaluation._split import Split
from sitecal.metrics import TopLabelOEStatistic, reliability_curve
from sitecal.results import (
    GroupResult,
    Interval,
    MetricResult,
    Note,
    Reliability,
    ReliabilityCurve,
    TemperatureInterval,
)
from sitecal.stats import (
    BootstrapResult,
    BootstrapSpec,
    CrossfitIntervals,
    GroupTemperatureIntervals,
    RefitIntervals,
    bootstrap_group_temperatures,
    bootstrap_metrics,
    bootstrap_temperature,
    crossfit_bootstrap,
    refit_bootstrap,
    refit_method_bootstrap,
)

if TYPE_CHECKING:
    from sitecal.protocol import EvaluationSettings

__all__ = [
    "TOP_LABEL_OE",
    "GroupIntervals",
    "add_method_uncertainty",
    "add_temperature_uncertainty",
    "group_intervals",
    "group_result",
    "interval_fields",
]

#: The name the per-group bootstraps give the top-label O/E (the sensitivity analyses' statistic).
TOP_LABEL_OE = "top_label_oe_ratio"


@dataclass(frozen=True)
class GroupIntervals:
    """Every group's metrics with intervals, and what other analyses reuse of their resamples.

    Attributes
    ----------
    overall : GroupResult
        The whole evaluated cohort.
    subgroups : dict of str to list of GroupResult
        Each reported attribute's groups, in order.
    oe_intervals : dict
        ``(attribute, group) -> {stage: BootstrapResult}``: each group's top-label O/E interval, drawn on
        the groups' resamples (the sensitivity analyses report it); the whole cohort's attribute is
        ``"overall"``.
    global_temperature : BootstrapResult
        The interval of the global temperature, resampled from every fit row.
    """

    overall: GroupResult
    subgroups: dict[str, list[GroupResult]]
    oe_intervals: dict[tuple[str, str], dict[str, BootstrapResult]]
    global_temperature: BootstrapResult


def group_intervals(plan: EvaluationPlan, *, progress: bool = False) -> GroupIntervals:
    """Every group's metrics before and after calibration, with paired, patient-clustered intervals.

    A calibration group (or the whole cohort under one global temperature) also gets its temperature's
    (or method's) interval and, with ``bootstrap.refit``, after-calibration intervals that refit it in
    every resample. Each group's result carries its ``membership`` fingerprint.
    """
    shrinkage = None
    if any(entry.source == "empirical_bayes" for entry in plan.temperatures.groups.values()):
        # every group's shrunk T depends on every group's fit rows: one bootstrap of the whole procedure
        fit = plan.fit_rows
        shrinkage = bootstrap_group_temperatures(
            fit.logits, fit.labels, fit.groups, clusters=fit.patients, spec=plan.spec
        )
    # groups side by side: each draws from its own seeded stream, so the results do not depend on which
    # thread computes them or when (one group's serial parts, its draws and refits, overlap another's)
    with progress_bar(total=len(plan.groups), desc="Bootstrap", unit="group", disable=not progress) as bar:
        grouped = side_by_side(
            lambda item: _one_group(plan, item, shrinkage),
            list(plan.groups),
            plan.spec.n_workers,
            lambda: bar.update(1),
        )
    subgroups: dict[str, list[GroupResult]] = {name: [] for name in plan.policy.reported}
    overall: GroupResult | None = None
    oe_intervals: dict[tuple[str, str], dict[str, BootstrapResult]] = {}
    # each evaluated row's rank by (patient, logits): the groups' fingerprints do not depend on row order
    row_rank = np.empty(len(plan.labels), dtype=np.int64)
    row_rank[np.lexsort((*plan.logits.T[::-1], plan.patients))] = np.arange(len(plan.labels))
    for (attribute, group, mask), (entry, oe) in zip(plan.groups, grouped, strict=True):  # over groups
        entry = dataclasses.replace(entry, membership=membership_digest(row_rank[mask]))
        oe_intervals[attribute, group] = oe
        if attribute == OVERALL:
            overall = entry
        else:
            subgroups[attribute].append(entry)
    assert overall is not None  # the plan's groups start with it
    fit = plan.fit_rows
    global_temperature = bootstrap_temperature(fit.logits, fit.labels, clusters=fit.patients, spec=plan.spec)
    return GroupIntervals(overall, subgroups, oe_intervals, global_temperature.temperature)


def _one_group(
    plan: EvaluationPlan, item: tuple[str, str, np.ndarray], shrinkage: GroupTemperatureIntervals | None
) -> tuple[GroupResult, dict[str, BootstrapResult]]:
    """One group's metrics with intervals (refitted for a calibration group), and its O/E intervals."""
    attribute, group, mask = item
    ev, per, methods = plan.policy.evaluation, plan.policy.calibration.per, plan.methods
    split = plan.split
    entry, oe = group_result(
        attribute,
        group,
        {k: v[mask] for k, v in plan.probabilities.items()},
        plan.labels[mask],
        plan.patients[mask],
        plan.strata[mask] if attribute == OVERALL else None,
        ev=ev,
        spec=plan.spec,
        temperature=plan.temperatures.temperature_for(group)
        if attribute == per and methods is None
        else None,
    )
    if attribute != (per or OVERALL):  # not a calibration group (nor the single global temperature)
        return entry, oe
    held_folds = split.fold[split.held][mask]
    if methods is not None:
        entry = add_method_uncertainty(
            entry,
            None if per is None else group,
            methods,
            plan.fit_rows,
            (plan.logits[mask], plan.labels[mask], plan.patients[mask], held_folds),
            ev=ev,
            spec=plan.spec,
            folds=split.folds if split.method == "crossfit" else None,
        )
    else:
        entry = add_temperature_uncertainty(
            entry,
            None if per is None else group,
            plan.temperatures,
            plan.fit_rows,
            plan.logits[mask],
            plan.labels[mask],
            plan.patients[mask],
            held_folds,
            ev=ev,
            spec=plan.spec,
            split=split,
            shrinkage=shrinkage,
        )
    return entry, oe


def group_result(
    attribute: str,
    group: str,
    prob_sets: Mapping[str, np.ndarray],
    labels: np.ndarray,
    patients: np.ndarray,
    strata: np.ndarray | None,
    *,
    ev: EvaluationSettings,
    spec: BootstrapSpec,
    temperature: float | None,
) -> tuple[GroupResult, dict[str, BootstrapResult]]:
    """The group's metrics with intervals, and its top-label O/E interval per probability set.

    The O/E is bootstrapped on the same resamples as the metrics (the sensitivity analyses report it:
    :func:`~sitecal.evaluation._sensitivity.sensitivity_analyses` would draw the same resamples again).
    """
    intervals = bootstrap_metrics(
        prob_sets,
        labels,
        clusters=patients,
        strata=strata,
        metrics=tuple(ev.metrics),
        n_bins=ev.n_bins,
        spec=spec,
        extra={TOP_LABEL_OE: TopLabelOEStatistic()},
    )
    metrics = {
        metric: MetricResult(
            before=Interval(**interval_fields(intervals.get(metric, "before"))),
            after=Interval(**interval_fields(intervals.get(metric, "after"))),
            difference=Interval(**interval_fields(intervals.difference(metric, "after", "before"))),
        )
        for metric in ev.metrics
    }
    curves = {
        stage: _curve(reliability_curve(p, labels, n_bins=ev.n_bins).to_dict())
        for stage, p in prob_sets.items()
    }
    entry = GroupResult(
        attribute=attribute,
        group=group,
        n=len(labels),
        n_patients=len(set(patients.tolist())),
        small=bool(len(labels) < ev.min_group_size),
        temperature=None if temperature is None else float(temperature),
        temperature_interval=None,
        refit=False,
        metrics=metrics,
        reliability=Reliability(before=curves["before"], after=curves["after"]),
    )
    return entry, {stage: intervals.get(TOP_LABEL_OE, stage) for stage in prob_sets}


def add_temperature_uncertainty(
    entry: GroupResult,
    group: str | None,
    temperatures: GroupTemperatures,
    fit_rows: FitRows,
    logits: np.ndarray,
    labels: np.ndarray,
    patients: np.ndarray,
    folds: np.ndarray,
    *,
    ev: EvaluationSettings,
    spec: BootstrapSpec,
    split: Split,
    shrinkage: GroupTemperatureIntervals | None = None,
) -> GroupResult:
    """The interval of the group's temperature and, with ``bootstrap.refit``, refitted after-intervals.

    Under cross-fitting the temperature is the deployed one (fitted on every row) and a refit repeats
    every fold's fit in each resample (:func:`~sitecal.stats.crossfit_bootstrap`).

    The temperature is resampled from the rows it was fitted on: the group's own fit rows, or every fit
    row for a group that uses the global temperature. A shrunk temperature has no interval (its penalty
    weight is chosen from the data, which the batched refit does not repeat) and keeps fixed-T intervals.
    An empirical-Bayes temperature's interval comes from ``shrinkage``, which repeats the whole
    shrinkage in every resample of all fit rows (its ``n_fit``: every fit row); with ``bootstrap.refit``
    resample ``b``'s shrunk T is applied to the ``b``-th resample of the group's evaluation rows.
    """
    source = "global_fallback" if group is None else _source(temperatures, group)
    entry = dataclasses.replace(
        entry,
        temperature=(
            temperatures.temperature_for(group) if group is not None else temperatures.global_fit.temperature
        ),
        temperature_source="global" if group is None else source,
    )
    if source == "shrunk":
        return dataclasses.replace(entry, temperature_interval=Note(note="no_interval_shrunk"))
    given: dict[str, Any] = {}
    if source == "empirical_bayes":
        assert shrinkage is not None and group is not None  # evaluate() made it for these groups
        interval, given = _shrunk(shrinkage, group, n_fit=int(fit_rows.labels.shape[0]))
        if not ev.bootstrap.refit:
            return dataclasses.replace(entry, temperature_interval=interval)
    rows = (
        fit_rows.groups == group
        if source in ("own", "empirical_bayes")
        else np.ones(fit_rows.labels.shape[0], dtype=bool)
    )
    if not ev.bootstrap.refit:
        fixed = bootstrap_temperature(
            fit_rows.logits[rows], fit_rows.labels[rows], clusters=fit_rows.patients[rows], spec=spec
        )
        interval = TemperatureInterval(**interval_fields(fixed.temperature), n_fit=int(rows.sum()))
        return dataclasses.replace(entry, temperature_interval=interval)
    res = _refit_temperature(
        fit_rows, rows, (logits, labels, patients, folds), ev=ev, spec=spec, split=split, given=given
    )
    if not given:
        interval = TemperatureInterval(**interval_fields(res.temperature), n_fit=int(rows.sum()))
    metrics = _refitted_metrics(entry, res, ev.metrics)
    return dataclasses.replace(entry, temperature_interval=interval, metrics=metrics, refit=True)


def _shrunk(
    shrinkage: GroupTemperatureIntervals, group: str, *, n_fit: int
) -> tuple[TemperatureInterval, dict[str, Any]]:
    """An empirical-Bayes group's temperature interval, and what its refit bootstrap starts from.

    ``n_fit``: every fit row (the shrinkage of each group draws on all of them).
    """
    i = shrinkage.groups.index(group)
    interval = TemperatureInterval(**interval_fields(shrinkage.temperature(group)), n_fit=n_fit)
    jk = shrinkage.log_temperature_jackknife
    given = {
        "log_temperature": float(shrinkage.log_temperature[i]),
        "log_temperature_replicates": shrinkage.log_temperature_replicates[i],
        "log_temperature_jackknife": None if jk is None else jk[i],
    }
    return interval, given


def _refit_temperature(
    fit_rows: FitRows,
    rows: np.ndarray,
    held: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    ev: EvaluationSettings,
    spec: BootstrapSpec,
    split: Split,
    given: dict[str, Any],
) -> RefitIntervals | CrossfitIntervals:
    """The group's metrics after calibration with its temperature refitted in every resample.

    ``rows``: the fit rows the temperature is fitted on; ``held``: the group's evaluated logits, labels,
    patients and folds; ``given``: an empirical-Bayes temperature's replicates (one split only).
    """
    logits, labels, patients, folds = held
    engine: Callable[..., RefitIntervals | CrossfitIntervals]
    if split.method == "crossfit":  # the protocol refuses empirical_bayes here (no per-fold shrinkage yet)
        engine = partial(
            crossfit_bootstrap, fit_folds=fit_rows.folds[rows], eval_folds=folds, folds=split.folds
        )
    else:
        # an empirical-Bayes temperature's replicates, by keyword (mypy reads **given as positionals too)
        engine = cast(Callable[..., RefitIntervals], partial(refit_bootstrap, **given))
    return engine(
        fit_rows.logits[rows],
        fit_rows.labels[rows],
        logits,
        labels,
        fit_clusters=fit_rows.patients[rows],
        eval_clusters=patients,
        metrics=tuple(ev.metrics),
        n_bins=ev.n_bins,
        spec=spec,
    )


def _refitted_metrics(entry: GroupResult, res: Any, metrics: Sequence[str]) -> dict[str, MetricResult]:
    """The group's metrics with the after-calibration intervals and differences of a refit bootstrap."""
    return {
        metric: dataclasses.replace(
            entry.metrics[metric],
            after=Interval(**interval_fields(res.get(metric, "after"))),
            difference=Interval(**interval_fields(res.difference(metric, "after", "before"))),
        )
        for metric in metrics
    }


def add_method_uncertainty(
    entry: GroupResult,
    group: str | None,
    methods: GroupMethods,
    fit_rows: FitRows,
    held: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    ev: EvaluationSettings,
    spec: BootstrapSpec,
    folds: int | None,
) -> GroupResult:
    """Where a calibration group's map comes from and, with ``bootstrap.refit``, refitted after-intervals.

    The method is refitted in every resample on the rows it was fitted on (the group's own fit rows, or
    every fit row for a group on the global fit), as :func:`~sitecal.stats.refit_method_bootstrap` does;
    under cross-fitting (``folds``) every fold's fit is refitted on the drawn patients of the other folds.
    ``held``: the group's evaluated logits, labels, patients and folds.
    """
    known = None if group is None else methods.groups.get(group)
    own = known is not None and known.fit is not None
    source: Literal["own", "global_fallback", "global"] = (
        "global" if group is None else "own" if own else "global_fallback"
    )
    entry = dataclasses.replace(entry, calibration_source=source)
    if not ev.bootstrap.refit:
        return entry
    rows = fit_rows.groups == group if own else np.ones(fit_rows.labels.shape[0], dtype=bool)
    res = refit_method_bootstrap(
        fit_rows.logits[rows],
        fit_rows.labels[rows],
        held[0],
        held[1],
        fit_clusters=fit_rows.patients[rows],
        eval_clusters=held[2],
        method=methods.name,
        metrics=tuple(ev.metrics),
        n_bins=ev.n_bins,
        spec=spec,
        **(
            {}
            if folds is None
            else {"fit_folds": fit_rows.folds[rows], "eval_folds": held[3], "folds": folds}
        ),
    )
    return dataclasses.replace(entry, metrics=_refitted_metrics(entry, res, ev.metrics), refit=True)


_Source = Literal["own", "global_fallback", "shrunk", "empirical_bayes"]


def _source(temperatures: GroupTemperatures, group: str) -> _Source:
    known = temperatures.groups.get(group)
    # GroupTemperature.source is one of these (checked where it is made and where it is read)
    return cast(_Source, "global_fallback" if known is None else known.source)


def _curve(curve: Mapping[str, Any]) -> ReliabilityCurve:
    """A :class:`ReliabilityCurve` from ``sitecal.metrics.ReliabilityCurve.to_dict()`` (NaN already None)."""
    return ReliabilityCurve(
        binning=curve["binning"],
        n=curve["n"],
        n_bins=curve["n_bins"],
        bin_edges=tuple(curve["bin_edges"]),
        confidence=tuple(curve["confidence"]),
        accuracy=tuple(curve["accuracy"]),
        count=tuple(curve["count"]),
    )


def interval_fields(result: Any) -> dict[str, float]:
    return {"estimate": float(result.estimate), "low": float(result.low), "high": float(result.high)}
