"""Value kinds shared by the documents: counts, shares, temperatures, names and the closed vocabularies.

Words belong to the report: where a document says why something is missing, left out or not judged, it
stores a code from one of the vocabularies below (the ``*Note`` and ``*Reason`` kinds, and the method
codes) and the numbers and names the sentence needs; ``sitecal.report`` words each code in one place.
Codes are unique across the vocabularies, so one code names one sentence. :data:`CODE_VOCABULARIES`
lists them all.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from sitecal.results._fields import Constraint

__all__ = [
    "CODE_VOCABULARIES",
    "CharacteristicsNote",
    "Count",
    "DisparityNote",
    "ErrorsNote",
    "ExclusionStage",
    "ExclusionUnit",
    "HeterogeneityEffect",
    "HeterogeneityMethod",
    "HeterogeneityVariance",
    "InterceptModel",
    "IntervalMethod",
    "IntervalNote",
    "LeaveOneOutRefit",
    "LeftOutNote",
    "Name",
    "OeDefinition",
    "PooledNote",
    "Positive",
    "RecalibrationEvent",
    "RecalibrationIntervalMethod",
    "RecalibrationNote",
    "Rule",
    "Sha256",
    "Share",
    "SiteExclusionReason",
    "SiteSource",
    "SlopeModel",
    "Stage",
    "SubgroupName",
    "TemperatureNote",
    "TemperatureSource",
    "UnpooledNote",
    "Verdict",
    "WarningCode",
]

#: A number of studies, patients, files or bins: an integer >= 0.
Count: TypeAlias = Annotated[int, Constraint(minimum=0)]
#: A share or probability in [0, 1].
Share: TypeAlias = Annotated[float, Constraint(minimum=0, maximum=1)]
#: A temperature: a number > 0.
Positive: TypeAlias = Annotated[float, Constraint(exclusive_minimum=0)]
#: Hex SHA-256 of a file's bytes.
Sha256: TypeAlias = Annotated[str, Constraint(pattern=r"^[0-9a-f]{64}$")]
#: A protocol or criterion name.
Name: TypeAlias = Annotated[str, Constraint(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
#: A subgroup attribute as the protocol names it.
SubgroupName: TypeAlias = Annotated[str, Constraint(pattern=r"^[a-z][a-z0-9_]*$")]

#: A verdict of a criterion, of a group or of the run: the interval clears the margin (pass), lies beyond
#: it (fail), straddles it (inconclusive), or there is no interval to judge (insufficient data).
Verdict: TypeAlias = Literal["pass", "fail", "inconclusive", "insufficient data"]
#: Before calibration (the model's own probabilities) or after (with the group's temperature).
Stage: TypeAlias = Literal["before", "after"]
#: How a criterion's margin reads: the value must lie below it, above it, or within [low, high].
Rule: TypeAlias = Literal["below", "above", "within"]
#: How a bootstrap interval is read from the replicates.
IntervalMethod: TypeAlias = Literal["percentile", "bca"]
#: Where a group's temperature came from: its own fit, the global one (too few fit studies), shrunk
#: toward the global one, the single global temperature, or its own fit shrunk toward the REML mean of
#: all groups (empirical Bayes).
TemperatureSource: TypeAlias = Literal["own", "global_fallback", "shrunk", "global", "empirical_bayes"]
#: The pipeline stage that dropped something.
ExclusionStage: TypeAlias = Literal[
    "retrieve", "scan", "studies", "series", "labels", "predictions", "inference"
]
#: What was left out; only ``study`` removes a study from the flow.
ExclusionUnit: TypeAlias = Literal["file", "image", "series", "study", "label", "prediction"]

# ---- codes the report words (sitecal.report._wording), with the numbers and names kept beside them ----

#: A point to note about the cohort: ``small_group``, a group with fewer evaluation studies than
#: ``min_group_size`` (its intervals are wide and it is not judged).
WarningCode: TypeAlias = Literal["small_group"]
#: Why a calibration group's temperature has no interval: ``no_interval_shrunk``, a shrunk temperature's
#: penalty weight is chosen from the data, which the bootstrap does not repeat.
TemperatureNote: TypeAlias = Literal["no_interval_shrunk"]
#: Why a disparity was not compared: ``too_few_groups``, fewer than two groups with ``min_group_size``
#: evaluation studies.
DisparityNote: TypeAlias = Literal["too_few_groups"]
#: Why a bootstrap interval is degenerate or undefined (codes of ``sitecal.stats``'s ``reason``):
#: some replicates not finite (no interval); all replicates equal, with one cluster or without variation
#: between the clusters (zero width); BCa with the estimate below or above every replicate, or with too
#: large an acceleration (no interval).
IntervalNote: TypeAlias = Literal[
    "replicates_not_finite",
    "replicates_equal_one_cluster",
    "replicates_equal_no_variation",
    "bca_estimate_below_replicates",
    "bca_estimate_above_replicates",
    "bca_acceleration_too_large",
]
#: Why a slope or intercept is missing (codes of ``sitecal.metrics.top_label_recalibration``): no or
#: every prediction correct, confidence separating correct from wrong predictions, a fit that did not
#: converge; or why an estimate has no Wald interval (``no_standard_error``).
RecalibrationNote: TypeAlias = Literal[
    "no_correct_prediction",
    "every_prediction_correct",
    "confidence_separates",
    "fit_not_converged",
    "no_standard_error",
]
#: Where the sites of the heterogeneity and leave-one-site-out analyses come from: the subgroup named
#: 'site', else the calibration attribute, else nowhere (``no_site_attribute``: not analysed).
SiteSource: TypeAlias = Literal["site_subgroup", "calibration_attribute", "no_site_attribute"]
#: Why a site is left out of the pooling: its site was not recorded; fewer evaluation studies than
#: ``min_group_size``; no correct prediction (log O/E undefined); fewer than two patients; zero variance.
SiteExclusionReason: TypeAlias = Literal[
    "site_unknown", "site_too_small", "log_oe_undefined", "too_few_clusters", "zero_variance"
]
#: A note on a pooled stage of the heterogeneity analysis: one site only (no heterogeneity to measure).
PooledNote: TypeAlias = Literal["one_site"]
#: Why a stage of the heterogeneity analysis pooled nothing: no site large enough to pool.
UnpooledNote: TypeAlias = Literal["no_site_pooled"]
#: Why a left-out site's metrics are null: no evaluation or no fit studies remain, or the temperatures
#: could not be refitted on what remains.
LeftOutNote: TypeAlias = Literal["no_evaluation_studies", "no_fit_studies", "refit_failed"]
#: What the cohort characteristics do not describe: the sex mix (no subgroup read from PatientSex) or the
#: age-band mix (no subgroup read from PatientAge with bands).
CharacteristicsNote: TypeAlias = Literal["no_sex_attribute", "no_age_band_attribute"]
#: Why no highest-confidence error is listed: no study keys were passed, or they look like DICOM UIDs.
ErrorsNote: TypeAlias = Literal["no_study_keys", "study_keys_look_like_uids"]
# How a sensitivity statistic is defined and its interval computed: fixed by sitecal, named by a code in
# the document and described by the report.
#: The event of the recalibration statistics: the predicted class is correct (top label).
RecalibrationEvent: TypeAlias = Literal["top_label_correct"]
#: The slope model: logit P(correct) = a + b logit(confidence); the slope is b.
SlopeModel: TypeAlias = Literal["logit_slope"]
#: The intercept model: logit P(correct) = alpha + logit(confidence), slope fixed at 1 (offset).
InterceptModel: TypeAlias = Literal["logit_offset_intercept"]
#: Observed / expected = accuracy / mean top-label confidence.
OeDefinition: TypeAlias = Literal["accuracy_over_mean_confidence"]
#: How a recalibration interval is computed: Wald with a cluster-robust (patient) sandwich standard
#: error, or the patient-cluster bootstrap of the document's bootstrap settings (temperatures fixed).
RecalibrationIntervalMethod: TypeAlias = Literal["wald_cluster_robust", "cluster_bootstrap"]
#: The effect pooled across sites: log(O/E).
HeterogeneityEffect: TypeAlias = Literal["log_oe"]
#: Its variance: cluster-robust (patient) delta-method variance.
HeterogeneityVariance: TypeAlias = Literal["cluster_robust_delta_method"]
#: The pooling: random effects with tau² by REML and the Hartung-Knapp(-Sidik-Jonkman) interval (t with
#: k - 1 df), Q against chi-squared with k - 1 df ('dersimonian_laird': moment tau², Wald interval; older
#: documents).
HeterogeneityMethod: TypeAlias = Literal["reml_hartung_knapp", "dersimonian_laird"]
#: Leave one site out: the temperatures are refitted by the protocol's policy on the remaining fit part.
LeaveOneOutRefit: TypeAlias = Literal["refit_by_protocol_policy"]

#: Every vocabulary of codes that the report words (each code in exactly one of them).
CODE_VOCABULARIES: tuple[object, ...] = (
    WarningCode,
    TemperatureNote,
    DisparityNote,
    IntervalNote,
    RecalibrationNote,
    SiteSource,
    SiteExclusionReason,
    PooledNote,
    UnpooledNote,
    LeftOutNote,
    CharacteristicsNote,
    ErrorsNote,
    RecalibrationEvent,
    SlopeModel,
    InterceptModel,
    OeDefinition,
    RecalibrationIntervalMethod,
    HeterogeneityEffect,
    HeterogeneityVariance,
    HeterogeneityMethod,
    LeaveOneOutRefit,
)
