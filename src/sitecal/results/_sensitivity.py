"""The ``sensitivity`` entry of ``evaluation.json``: recalibration, heterogeneity, leave one site out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from sitecal.results._codec import Record
from sitecal.results._fields import Constraint, OrAbsent
from sitecal.results._kinds import (
    Count,
    HeterogeneityEffect,
    HeterogeneityMethod,
    HeterogeneityVariance,
    InterceptModel,
    IntervalNote,
    LeaveOneOutRefit,
    LeftOutNote,
    OeDefinition,
    PooledNote,
    RecalibrationEvent,
    RecalibrationIntervalMethod,
    RecalibrationNote,
    SiteExclusionReason,
    SiteSource,
    SlopeModel,
    UnpooledNote,
)

__all__ = [
    "Heterogeneity",
    "HeterogeneityExcluded",
    "HeterogeneitySite",
    "LeaveOneSiteOut",
    "LeftOutSite",
    "PooledSites",
    "Recalibration",
    "RecalibrationGroup",
    "RecalibrationIntervals",
    "RecalibrationStage",
    "RecalibrationValue",
    "RemainingCohort",
    "Sensitivity",
    "UnpooledSites",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecalibrationValue(Record):
    """One recalibration statistic: estimate, interval ends and standard error (null when not estimable).

    Attributes
    ----------
    estimate, low, high : float or None
        The statistic and its interval.
    standard_error : float or None
        Cluster-robust sandwich SE (slope, intercept) or bootstrap SE (O/E).
    note : str or None
        Null, or a code saying why a value is null or the interval degenerate (``RecalibrationNote`` or,
        for a bootstrap interval, ``IntervalNote``).
    """

    estimate: float | None
    low: float | None
    high: float | None
    standard_error: float | None
    note: RecalibrationNote | IntervalNote | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecalibrationStage(Record):
    """Top-label calibration slope, intercept and O/E of one group at one stage.

    Attributes
    ----------
    n_correct : int
        Studies whose predicted class is correct.
    mean_confidence : float
        Mean top-label confidence.
    """

    n_correct: Count
    mean_confidence: float
    slope: RecalibrationValue
    intercept: RecalibrationValue
    oe_ratio: RecalibrationValue


@dataclass(frozen=True, slots=True, kw_only=True)
class RecalibrationGroup(Record):
    """Recalibration statistics of one group (or all studies) before and after calibration.

    Attributes
    ----------
    attribute : str
        Subgroup attribute, or 'overall'.
    small : bool
        n below evaluation.min_group_size.
    """

    attribute: str
    group: str
    n: Count
    n_patients: Count
    small: bool
    before: RecalibrationStage
    after: RecalibrationStage


@dataclass(frozen=True, slots=True, kw_only=True)
class RecalibrationIntervals(Record):
    """How each statistic's interval was computed: a code (the bootstrap's settings are the document's).

    Attributes
    ----------
    slope, intercept : {"wald_cluster_robust", "cluster_bootstrap"}
        Wald from the cluster-robust (patient) sandwich standard error, or the patient-cluster bootstrap
        with the temperatures held fixed.
    oe_ratio : {"cluster_bootstrap"}
        The patient-cluster bootstrap with the temperatures held fixed.
    """

    slope: RecalibrationIntervalMethod
    intercept: RecalibrationIntervalMethod
    oe_ratio: Literal["cluster_bootstrap"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Recalibration(Record):
    """Calibration slope, intercept and O/E per group of each reported attribute and overall.

    Slope from logit P(correct) = a + b logit(confidence); intercept (calibration-in-the-large) from
    logit P(correct) = alpha + logit(confidence) with the slope fixed at 1; O/E = accuracy / mean
    confidence. On the evaluation split, before and after calibration.

    Attributes
    ----------
    event : {"top_label_correct"}
        The predicted class is correct; its probability is the top-label confidence.
    slope_model : {"logit_slope"}
        logit P(correct) = a + b logit(confidence); the slope is b.
    intercept_model : {"logit_offset_intercept"}
        logit P(correct) = alpha + logit(confidence), slope fixed at 1 (offset); the intercept is alpha.
    oe_definition : {"accuracy_over_mean_confidence"}
        Observed / expected = accuracy / mean top-label confidence.
    level : float
        Two-sided level of every interval.
    subgroups : Mapping of str to tuple of RecalibrationGroup
        Per reported subgroup attribute, its groups in the order of 'subgroups'.
    """

    event: RecalibrationEvent
    slope_model: SlopeModel
    intercept_model: InterceptModel
    oe_definition: OeDefinition
    level: float
    intervals: RecalibrationIntervals
    overall: RecalibrationGroup
    subgroups: Mapping[str, tuple[RecalibrationGroup, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class HeterogeneitySite(Record):
    """A site pooled: its O/E, log(O/E), cluster-robust delta-method SE and random-effects weight."""

    group: str
    n: Count
    n_patients: Count
    oe_ratio: float
    log_oe: float
    log_oe_se: float
    weight: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HeterogeneityExcluded(Record):
    """A site left out of the pooling, with the reason.

    Attributes
    ----------
    reason : str
        A code (``SiteExclusionReason``): 'site_unknown' (studies whose site was not recorded: not one
        site), 'site_too_small' (fewer than the heterogeneity's min_group_size), 'log_oe_undefined' (no
        correct prediction), 'too_few_clusters' (fewer than two patients) or 'zero_variance'.
    """

    group: str
    n: Count
    n_patients: Count
    reason: SiteExclusionReason


@dataclass(frozen=True, slots=True, kw_only=True)
class PooledSites(Record):
    """Random-effects meta-analysis of log(O/E) across sites at one stage.

    Attributes
    ----------
    k : int
        Sites pooled.
    q : float or None
        Cochran's Q.
    df : int
        k - 1.
    p_value : float or None
        Chi-squared p-value of Q (null with one site).
    i2 : float or None
        I² in [0, 1] (null with one site).
    tau2 : float or None
        Between-site variance of log(O/E) (REML; DerSimonian-Laird in older documents).
    pooled_oe : float or None
        exp of the random-effects pooled log(O/E).
    pooled_oe_low, pooled_oe_high : float or None
        exp of the pooled interval's ends (Hartung-Knapp, t with k - 1 df; Wald in older documents);
        null with one site.
    prediction_oe_low, prediction_oe_high : float or None
        exp of the prediction interval's ends for a new site's O/E (t with k - 2 df, tau² plus the
        pooled estimate's variance); null with fewer than three sites.
    note : str or None
        'one_site' (no heterogeneity to measure: Q, I² and tau² need two or more), else null.
    """

    groups: tuple[HeterogeneitySite, ...]
    excluded: tuple[HeterogeneityExcluded, ...]
    k: Count
    q: float | None
    df: int
    p_value: float | None
    i2: float | None
    tau2: float | None
    level: float
    pooled_log_oe: float | None
    pooled_log_oe_se: float | None
    pooled_oe: float | None
    pooled_oe_low: float | None
    pooled_oe_high: float | None
    prediction_oe_low: float | None = None
    prediction_oe_high: float | None = None
    note: PooledNote | None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnpooledSites(Record):
    """No site large enough to pool: the sites left out and why (``k`` is 0).

    Attributes
    ----------
    note : {"no_site_pooled"}
        No site large enough to pool.
    """

    groups: tuple[HeterogeneitySite, ...]
    excluded: tuple[HeterogeneityExcluded, ...]
    k: Count
    note: UnpooledNote


@dataclass(frozen=True, slots=True, kw_only=True)
class Heterogeneity(Record):
    """DerSimonian-Laird random-effects meta-analysis of log(O/E) across sites, before and after.

    Attributes
    ----------
    attribute : str or None
        The attribute whose groups are the sites (null: none).
    attribute_source : {"site_subgroup", "calibration_attribute", "no_site_attribute"}
        Why this attribute: the subgroup named 'site', else the calibration attribute (no subgroup named
        'site'), else none (neither).
    effect : {"log_oe"}
        log(O/E), O/E = accuracy / mean top-label confidence.
    variance : {"cluster_robust_delta_method"}
        Cluster-robust (patient) delta-method variance of log(O/E).
    method : {"dersimonian_laird"}
        DerSimonian-Laird random effects; Q tested against chi-squared with k - 1 df.
    min_group_size : int
        Sites with fewer evaluation studies are left out and listed.
    note : {"no_site_attribute"} or None
        Present when there is no site attribute.
    before, after : PooledSites or UnpooledSites or None
        Present when there is a site attribute.
    """

    attribute: str | None
    attribute_source: SiteSource
    effect: HeterogeneityEffect
    variance: HeterogeneityVariance
    method: HeterogeneityMethod
    min_group_size: Count
    note: OrAbsent[Literal["no_site_attribute"]] = None
    before: OrAbsent[PooledSites | UnpooledSites] = None
    after: OrAbsent[PooledSites | UnpooledSites] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingCohort(Record):
    """The full cohort's after-calibration metrics, computed as for each left-out site.

    Attributes
    ----------
    metrics : Mapping of str to float or None
        Point estimates of the metrics listed in ``leave_one_site_out.metrics``; null when not estimable.
    """

    n_fit: Count
    n_evaluation: Count
    global_temperature: float | None
    metrics: Mapping[str, float | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftOutSite(Record):
    """One site's studies removed from the fit and the evaluation part, and what remains.

    Attributes
    ----------
    left_out : str
        The site left out.
    n_fit : int
        Fit studies that remain.
    n_evaluation : int
        Evaluation studies that remain.
    difference : Mapping of str to float or None
        Left-out minus full.
    note : str or None
        Null, or why the metrics are null: 'no_evaluation_studies' or 'no_fit_studies' remain, or
        'refit_failed' (the temperatures could not be refitted on what remains).
    external : Mapping of str to float or None
        Internal-external validation: the metrics after calibration on all the left-out site's studies
        (its fit and evaluation parts; the temperatures refitted without it, its groups unseen at fitting
        taking the global T); empty in documents written before sitecal computed it.
    """

    left_out: str
    n_left_out_fit: Count
    n_left_out_evaluation: Count
    n_fit: Count
    n_evaluation: Count
    global_temperature: float | None
    metrics: Mapping[str, float | None]
    difference: Mapping[str, float | None]
    note: LeftOutNote | None
    external: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveOneSiteOut(Record):
    """For each site: its studies removed, temperatures refitted, metrics after calibration on the rest.

    Attributes
    ----------
    attribute : str or None
        The attribute whose groups are the sites (null: none).
    attribute_source : {"site_subgroup", "calibration_attribute", "no_site_attribute"}
        As in the heterogeneity analysis.
    refit : {"refit_by_protocol_policy"}
        The temperatures are refitted by the protocol's policy on the remaining fit part.
    note : {"no_site_attribute"} or None
        Present when there is no site attribute.
    full, rows : optional
        Present when there is a site attribute.
    """

    attribute: str | None
    attribute_source: SiteSource
    metrics: tuple[str, ...]
    stage: Literal["after"]
    n_bins: Annotated[int, Constraint(minimum=1)]
    refit: LeaveOneOutRefit
    note: OrAbsent[Literal["no_site_attribute"]] = None
    full: OrAbsent[RemainingCohort] = None
    rows: OrAbsent[tuple[LeftOutSite, ...]] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Sensitivity(Record):
    """Sensitivity analyses: slope, intercept and O/E per group; heterogeneity; leave one site out."""

    recalibration: Recalibration
    heterogeneity: Heterogeneity
    leave_one_site_out: LeaveOneSiteOut
