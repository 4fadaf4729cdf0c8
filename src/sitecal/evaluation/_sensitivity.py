"""Sensitivity analyses of the evaluation: recalibration per subgroup, heterogeneity, leave-one-site-out.

The ``sensitivity`` key of ``evaluation.json``:

- ``recalibration``: top-label calibration slope, calibration-in-the-large intercept (slope fixed at
  1) and observed/expected ratio per group of each reported subgroup attribute and overall, before and
  after calibration. Slope and intercept get Wald intervals from cluster-robust (patient) sandwich
  standard errors by default: a bootstrap of the two logistic fits (``slope_intervals="bootstrap"``,
  through ``sitecal.metrics.RecalibrationStatistic``) costs a Newton fit per resample and group, about
  ten times as much (2.4 s against 0.2 s on the demo, longer than the rest of the evaluation). O/E gets
  a patient-cluster bootstrap interval from weighted sums (the protocol's bootstrap settings and seed;
  the overall group stratified as in the main evaluation);
- ``heterogeneity``: DerSimonian–Laird random-effects meta-analysis of log(O/E) across sites (the
  subgroup named ``site``, else the calibration attribute), before and after calibration;
- ``leave_one_site_out``: each site's studies removed from both the fit and the evaluation part, the
  temperatures refitted by the protocol's policy, and the overall default metrics (ECE, debiased ECE,
  NLL, Brier, accuracy) after calibration on what remains, beside the full-cohort values.

No NaN or infinity is written: a value that cannot be estimated is ``null`` with a note. Notes, reasons
and the method descriptions are codes (:mod:`sitecal.results`); the report words them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from sitecal._validation import check_option
from sitecal.calibration import GroupTemperatures, fit_group_methods, fit_group_temperatures
from sitecal.errors import SitecalError
from sitecal.evaluation._groups import ordered_groups
from sitecal.evaluation._plan import EvaluationPlan, EvaluationPolicy
from sitecal.evaluation._recalibration_groups import finite, recalibration
from sitecal.evaluation._side_by_side import side_by_side
from sitecal.evaluation._split import applied_probabilities, applied_temperatures
from sitecal.metrics import softmax, top_label_recalibration
from sitecal.metrics.registry import metric
from sitecal.metrics.registry import names as metric_names
from sitecal.results import (
    Heterogeneity,
    HeterogeneityExcluded,
    HeterogeneitySite,
    LeaveOneSiteOut,
    LeftOutNote,
    LeftOutSite,
    PooledSites,
    RemainingCohort,
    Sensitivity,
    SiteExclusionReason,
    SiteSource,
    UnpooledSites,
)
from sitecal.stats import BootstrapResult, BootstrapSpec, random_effects_meta_analysis

__all__ = ["LOSO_METRICS", "sensitivity_analyses"]

log = logging.getLogger(__name__)

#: The overall metrics leave-one-site-out recomputes: the registry's default metrics.
LOSO_METRICS = metric_names(default=True)
_HOW = ("wald", "bootstrap")


def _applied(plan: EvaluationPlan, temps: GroupTemperatures, keep: np.ndarray) -> np.ndarray:
    """The temperature of each evaluated row among ``keep`` (NaN elsewhere), shape (N,).

    ``temps``: fitted on the kept fit rows; one split evaluates with them, cross-fitting refits each
    fold's temperatures on the kept rows of the other folds.
    """
    data, split = plan.data, plan.split
    if temps is plan.temperatures and plan.applied is not None and keep.all():  # as the plan applied them
        return plan.applied.copy()
    if split.method == "crossfit":
        return applied_temperatures(
            split,
            data.logits,
            data.labels,
            plan.calibration_groups,
            data.patient_keys,
            plan.policy.temperature_policy,
            keep,
        )
    out = np.full(len(data.labels), np.nan)
    rows = split.held & keep
    out[rows] = temps.temperatures_for(plan.calibration_groups[rows])
    return out


def site_attribute(policy: EvaluationPolicy) -> tuple[str | None, SiteSource]:
    """The attribute whose groups are the sites, and where it came from (a code)."""
    if "site" in policy.subgroups:
        return "site", "site_subgroup"
    if policy.calibration.per:
        return policy.calibration.per, "calibration_attribute"
    return None, "no_site_attribute"


def _heterogeneity_stage(plan: EvaluationPlan, stage: str, values: np.ndarray) -> PooledSites | UnpooledSites:
    ev = plan.policy.evaluation
    rows: list[dict[str, Any]] = []
    excluded: list[HeterogeneityExcluded] = []
    for site in ordered_groups(values):  # a loop over sites
        mask = values == site
        n = int(mask.sum())
        patients = plan.patients[mask]
        base: dict[str, Any] = {"group": site, "n": n, "n_patients": len(set(patients.tolist()))}
        if site == "unknown":  # studies whose site was not recorded: a mixture, not one site
            excluded.append(HeterogeneityExcluded(**base, reason="site_unknown"))
            continue
        if n < ev.min_group_size:  # the heterogeneity's min_group_size says how many
            excluded.append(HeterogeneityExcluded(**base, reason="site_too_small"))
            continue
        res = top_label_recalibration(plan.probabilities[stage][mask], plan.labels[mask], clusters=patients)
        if res.log_oe_se is None or res.log_oe_se == 0.0:
            # top_label_recalibration's code ('log_oe_undefined', 'too_few_clusters'), else zero variance
            reason = cast(SiteExclusionReason, res.oe_note or "zero_variance")
            excluded.append(HeterogeneityExcluded(**base, reason=reason))
            continue
        log_oe = math.log(res.oe_ratio)
        rows.append(base | {"oe_ratio": res.oe_ratio, "log_oe": log_oe, "log_oe_se": res.log_oe_se})
    if not rows:
        return UnpooledSites(groups=(), excluded=tuple(excluded), k=0, note="no_site_pooled")
    meta = random_effects_meta_analysis(
        [r["log_oe"] for r in rows], [r["log_oe_se"] ** 2 for r in rows], level=ev.bootstrap.level
    )
    sites = tuple(HeterogeneitySite(**r, weight=float(w)) for r, w in zip(rows, meta.weights, strict=True))
    d = meta.to_dict()
    return PooledSites(
        groups=sites,
        excluded=tuple(excluded),
        k=meta.k,
        q=d["q"],
        df=meta.df,
        p_value=d["p_value"],
        i2=d["i2"],
        tau2=d["tau2"],
        level=meta.level,
        pooled_log_oe=d["estimate"],
        pooled_log_oe_se=d["standard_error"],
        pooled_oe=finite(math.exp(meta.estimate)),
        pooled_oe_low=finite(math.exp(meta.low)),
        pooled_oe_high=finite(math.exp(meta.high)),
        prediction_oe_low=finite(math.exp(meta.prediction_low)),
        prediction_oe_high=finite(math.exp(meta.prediction_high)),
        note="one_site" if meta.k < 2 else None,  # Q, I² and tau² need two or more
    )


def _heterogeneity(plan: EvaluationPlan, attribute: str | None, source: SiteSource) -> Heterogeneity:
    base: dict[str, Any] = {
        "attribute": attribute,
        "attribute_source": source,
        "effect": "log_oe",
        "variance": "cluster_robust_delta_method",
        "method": "reml_hartung_knapp",
        "min_group_size": plan.policy.evaluation.min_group_size,
    }
    if attribute is None:
        return Heterogeneity(**base, note="no_site_attribute")
    values = plan.attribute(attribute)
    return Heterogeneity(
        **base,
        before=_heterogeneity_stage(plan, "before", values),
        after=_heterogeneity_stage(plan, "after", values),
    )


def _after_metrics(
    plan: EvaluationPlan, keep: np.ndarray
) -> tuple[dict[str, float | None], float | None, int, int, LeftOutNote | None, dict[str, float | None]]:
    """Refit on the kept fit rows, evaluate after calibration on the kept evaluation rows.

    The last item: the same metrics on every row not kept (the left-out site's fit and evaluation
    studies, none of which the refitted temperatures saw), its groups unseen at fitting taking the
    global T: the internal-external validation of that site (empty when nothing is left out).
    """
    ev, data = plan.policy.evaluation, plan.data
    fit, held = plan.split.fit & keep, plan.held & keep
    n_fit, n_eval = int(fit.sum()), int(held.sum())
    empty: dict[str, float | None] = dict.fromkeys(LOSO_METRICS)
    if n_eval == 0:
        return empty, None, n_fit, n_eval, "no_evaluation_studies", empty
    if n_fit == 0:
        return empty, None, n_fit, n_eval, "no_fit_studies", empty
    if plan.policy.calibration.method != "temperature":
        return _after_method(plan, keep)
    try:
        temps = (
            plan.temperatures  # every fit row kept: the deployed temperatures, fitted on exactly these
            if keep.all()
            else fit_group_temperatures(
                data.logits[fit],
                data.labels[fit],
                plan.calibration_groups[fit],
                clusters=data.patient_keys[fit],
                **plan.policy.temperature_policy,
            )
        )
        applied = _applied(plan, temps, keep)
    except SitecalError as exc:  # the document records the code; the reason goes to the log
        log.warning("leave one site out: the temperatures could not be refitted (%s)", exc)
        return empty, None, n_fit, n_eval, "refit_failed", empty
    # the rows left out are measured with the temperatures fitted on every kept fit row
    applied[~keep] = temps.temperatures_for(plan.calibration_groups[~keep])

    def measured(rows: np.ndarray) -> dict[str, float | None]:
        if not rows.any():
            return dict.fromkeys(LOSO_METRICS)
        probs = softmax(data.logits[rows], temperature=applied[rows])
        labels = data.labels[rows]
        return {name: finite(metric(name)(probs, labels, n_bins=ev.n_bins)) for name in LOSO_METRICS}

    external = measured(~keep)
    return measured(held), temps.global_fit.temperature, n_fit, n_eval, None, external


def _after_method(
    plan: EvaluationPlan, keep: np.ndarray
) -> tuple[dict[str, float | None], float | None, int, int, LeftOutNote | None, dict[str, float | None]]:
    """:func:`_after_metrics` for another method than temperature scaling (no global temperature)."""
    ev, data, cal = plan.policy.evaluation, plan.data, plan.policy.calibration
    fit, held = plan.split.fit & keep, plan.held & keep
    n_fit, n_eval = int(fit.sum()), int(held.sum())
    empty: dict[str, float | None] = dict.fromkeys(LOSO_METRICS)
    try:
        methods = fit_group_methods(
            cal.method,
            data.logits[fit],
            data.labels[fit],
            plan.calibration_groups[fit],
            min_group_size=cal.min_group_size,
        )
    except SitecalError as exc:  # the document records the code; the reason goes to the log
        log.warning("leave one site out: the %s calibration could not be refitted (%s)", cal.method, exc)
        return empty, None, n_fit, n_eval, "refit_failed", empty

    # the kept evaluated rows as the evaluation calibrates them (cross-fitted: each fold by the other folds'
    # kept rows); the rows left out by the fit on every kept fit row
    probs = applied_probabilities(
        plan.split, data.logits, data.labels, plan.calibration_groups, cal.method, cal.min_group_size, keep
    )
    if not keep.all():
        probs[~keep] = methods.probabilities(data.logits[~keep], plan.calibration_groups[~keep])[0]

    def measured(rows: np.ndarray) -> dict[str, float | None]:
        if not rows.any():
            return dict.fromkeys(LOSO_METRICS)
        labels = data.labels[rows]
        return {name: finite(metric(name)(probs[rows], labels, n_bins=ev.n_bins)) for name in LOSO_METRICS}

    return measured(held), None, n_fit, n_eval, None, measured(~keep)


def _leave_one_site_out(plan: EvaluationPlan, attribute: str | None, source: SiteSource) -> LeaveOneSiteOut:
    base: dict[str, Any] = {
        "attribute": attribute,
        "attribute_source": source,
        "metrics": tuple(LOSO_METRICS),
        "stage": "after",
        "n_bins": plan.policy.evaluation.n_bins,
        "refit": "refit_by_protocol_policy",
    }
    if attribute is None:
        return LeaveOneSiteOut(**base, note="no_site_attribute")
    n = len(plan.data.labels)
    full, full_t, n_fit, n_eval, note, _ = _after_metrics(plan, np.ones(n, dtype=bool))
    remaining = RemainingCohort(n_fit=n_fit, n_evaluation=n_eval, global_temperature=full_t, metrics=full)
    values = plan.data.attributes[attribute]
    sites = ordered_groups(values)
    # each site's refit is independent of the others': they run side by side on the cores
    workers = BootstrapSpec().n_workers  # the cores available to this process
    refits = side_by_side(lambda site: _after_metrics(plan, values != site), sites, workers)
    rows = []
    for site, refit in zip(sites, refits, strict=True):  # a loop over sites
        left, t, n_fit, n_eval, note, external = refit
        difference = {
            m: None if left[m] is None or full[m] is None else cast(float, left[m]) - cast(float, full[m])
            for m in LOSO_METRICS
        }
        rows.append(
            LeftOutSite(
                left_out=site,
                n_left_out_fit=int((plan.split.fit & (values == site)).sum()),
                n_left_out_evaluation=int((plan.held & (values == site)).sum()),
                n_fit=n_fit,
                n_evaluation=n_eval,
                global_temperature=t,
                metrics=left,
                difference=difference,
                note=note,
                external=external,
            )
        )
    return LeaveOneSiteOut(**base, full=remaining, rows=tuple(rows))


def sensitivity_analyses(
    plan: EvaluationPlan,
    *,
    slope_intervals: str = "wald",
    oe_intervals: Mapping[tuple[str, str], Mapping[str, BootstrapResult]] | None = None,
) -> Sensitivity:
    """The ``sensitivity`` entry of the evaluation document.

    Parameters
    ----------
    plan : EvaluationPlan
        The split, the deployed calibration and the evaluated rows' probabilities
        (:func:`~sitecal.evaluation._plan.plan_evaluation`); its policy gives the bootstrap settings,
        ``min_group_size``, ``n_bins`` and the subgroups.
    slope_intervals : {"wald", "bootstrap"}, default "wald"
        Intervals of the slope and intercept: Wald from cluster-robust (patient) sandwich standard
        errors, or the patient-cluster bootstrap with the plan's settings (a Newton fit per resample,
        vectorised: about 2.4 s for the demo's 15 groups against 0.2 s, on 2 CPU cores).
    oe_intervals : mapping, optional
        ``(attribute, group) -> {stage: BootstrapResult}``: each group's top-label O/E interval where the
        caller bootstrapped it on the resamples this analysis draws (the per-group intervals,
        :func:`~sitecal.evaluation._group_intervals.group_intervals`: the same patients, strata,
        probabilities and bootstrap settings), not drawn again; the whole cohort's attribute is
        ``"overall"``.

    Returns
    -------
    Sensitivity
        No NaN or infinity, deterministic for a given plan: ``recalibration``, ``heterogeneity`` and
        ``leave_one_site_out`` (see the module docstring and :class:`sitecal.results.Sensitivity`).
    """
    how = check_option(slope_intervals, name="slope_intervals", func="sensitivity_analyses", options=_HOW)
    attribute, source = site_attribute(plan.policy)
    return Sensitivity(
        recalibration=recalibration(plan, slope_intervals=how, oe_intervals=oe_intervals or {}),
        heterogeneity=_heterogeneity(plan, attribute, source),
        leave_one_site_out=_leave_one_site_out(plan, attribute, source),
    )
