"""Protocol schema, the analysis side: split, calibration, evaluation, acceptance, report, and the whole."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sitecal.metrics.registry import ECE, metric
from sitecal.metrics.registry import names as metric_names
from sitecal.protocol._base import (
    _NAME_PATTERN,
    CriterionMetricName,
    DisparityMetricName,
    MetricName,
    _at_most,
    _check_reference,
    _ReferenceError,
    _Strict,
    refused_column,
)
from sitecal.protocol._inputs import (
    DataSettings,
    InputSettings,
    ModelSettings,
    SubgroupSettings,
    _check_intersections,
)
from sitecal.protocol._planning import PlanningSettings
from sitecal.protocol._report import ReportSettings

_DEFAULT_METRICS: tuple[MetricName, ...] = metric_names(default=True)
_ECE_ONLY: tuple[MetricName, ...] = (ECE.name,)

# Upper bounds checked at validation, so that a typo such as 10**9 is refused in `sitecal check` instead of
# ending a run in MemoryError or hours of work after inference. Each is far above any useful value.
#: Reliability bins: every group's curve keeps every bin; 10 to 20 is usual.
MAX_N_BINS = 1000
#: Bootstrap resamples: the replicates of every metric, group and stage are kept (8 bytes each), and
#: 10,000 already fix a 95% interval's bounds well below the reported precision.
MAX_N_RESAMPLES = 100_000
#: Minimum group sizes (calibration and evaluation): a minimum above any site's cohort only makes every
#: group fall back or go unjudged.
MAX_MIN_GROUP_SIZE = 100_000


def _seed(value: int) -> int:
    """A seed of ``numpy.random.default_rng``, which refuses negative integers (at evaluation, too late)."""
    if value < 0:
        raise ValueError(f"must be an integer >= 0 (a seed of numpy's random generator). Got {value}")
    return value


#: Most cross-fitting folds: each fold refits every temperature (and, with ``bootstrap.refit``, does so in
#: every resample); 5 to 10 is usual.
MAX_FOLDS = 20


class SplitSettings(_Strict):
    """The seeded, patient-level split: a fit part and an evaluation part, or K cross-fitted folds.

    ``fit_fraction`` belongs to ``by: patient`` (default 0.5) and ``folds`` to ``by: crossfit``
    (default 5); the other method's setting is None, and giving it is an error.
    """

    by: Literal["patient", "crossfit"] = "patient"
    fit_fraction: float | None = Field(default=None, gt=0.0, lt=1.0, description="with by: patient")
    folds: int | None = Field(
        default=None,
        ge=2,
        le=MAX_FOLDS,
        description="with by: crossfit, the number of folds (each fold's temperatures fitted on the others)",
    )
    seed: int = Field(description="seed of numpy.random.default_rng, an integer >= 0")
    stratify: str | None = Field(default=None, description="subgroup name; default: calibration.per")

    _seed_range = field_validator("seed")(_seed)

    @model_validator(mode="before")
    @classmethod
    def _one_method(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("by", "patient") == "crossfit":
            if data.get("fit_fraction") is not None:
                raise ValueError(
                    "fit_fraction applies to by: patient (one fit part); by: crossfit fits each fold's "
                    "temperatures on the other folds. Remove fit_fraction, or set by: patient"
                )
            return data if data.get("folds") is not None else {**data, "folds": 5}
        if data.get("folds") is not None:
            raise ValueError(
                "folds applies to by: crossfit; by: patient splits once into a fit and an evaluation part. "
                "Remove folds, or set by: crossfit"
            )
        return data if data.get("fit_fraction") is not None else {**data, "fit_fraction": 0.5}


#: Recalibration methods ``calibration.compare`` may list (temperature scaling is always the reference).
ComparedMethod = Literal["vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"]


class CalibrationSettings(_Strict):
    """Temperature scaling, one temperature per group of ``per``."""

    method: Literal["temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"] = Field(
        default="temperature",
        description="the calibration deployed (calibration.json): temperature scaling, or vector, matrix, "
        "dirichlet, histogram, isotonic or beta (binary models) fitted per group of per",
    )
    per: str | None = None
    min_group_size: int = Field(default=50, ge=1)
    fallback: Literal["global", "shrink", "empirical_bayes"] = Field(
        default="global",
        description="temperature of a group below min_group_size: 'global' (the global T), 'shrink' "
        "(penalised toward it); 'empirical_bayes' shrinks every group, whatever its size, toward the REML "
        "mean log T of all groups (min_group_size not used)",
    )
    split: SplitSettings
    compare: list[ComparedMethod] = Field(
        default_factory=list,
        description="recalibration methods to compare with temperature scaling per group in the report: "
        "vector, matrix, dirichlet, histogram, isotonic, beta (binary models); each is fitted on the fit "
        "split, measured on the evaluation split, and refitted in every bootstrap resample",
    )

    @field_validator("min_group_size")
    @classmethod
    def _min_group_size_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_MIN_GROUP_SIZE,
            "a minimum above any cohort's size gives no group its own temperature (every group falls back)",
        )

    @field_validator("compare")
    @classmethod
    def _compare_once(cls, value: list[ComparedMethod]) -> list[ComparedMethod]:
        if len(set(value)) != len(value):
            raise ValueError(f"list each method once; got {value}")
        return value


class BootstrapSettings(_Strict):
    """Patient-level bootstrap of every metric."""

    n_resamples: int = Field(default=1000, ge=50)
    level: float = Field(default=0.95, gt=0.5, lt=1.0)
    method: Literal["percentile", "bca"] = "percentile"
    seed: int = Field(default=0, description="seed of numpy.random.default_rng, an integer >= 0")
    refit: bool = Field(
        default=False,
        description="refit the temperature in every resample, so that intervals after calibration of the "
        "calibration groups include the temperature's uncertainty",
    )

    _seed_range = field_validator("seed")(_seed)

    @field_validator("n_resamples")
    @classmethod
    def _n_resamples_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_N_RESAMPLES,
            "every metric of every group is recomputed in each resample, and 10000 already fix a 95% "
            "interval's bounds; 1000 to 10000 is usual",
        )


class EvaluationSettings(_Strict):
    """What is measured on the evaluation split."""

    metrics: list[MetricName] = Field(default_factory=lambda: list(_DEFAULT_METRICS), min_length=1)
    n_bins: int = Field(default=15, ge=1)
    min_group_size: int = Field(default=30, ge=1)
    subgroups: list[str] | None = Field(default=None, description="subgroups to report; default: all")
    disparity_metrics: list[DisparityMetricName] = Field(
        default_factory=lambda: list(_ECE_ONLY), description="metrics whose gaps between groups get intervals"
    )
    bootstrap: BootstrapSettings = Field(default_factory=BootstrapSettings)
    planning: PlanningSettings = Field(default_factory=PlanningSettings)

    @field_validator("disparity_metrics")
    @classmethod
    def _comparable(cls, value: list[DisparityMetricName]) -> list[DisparityMetricName]:
        # the gaps between groups and the size-matched flags are evaluated from per-patient sums of each
        # group (thousands of permutations per group); a metric the registry does not mark comparable is
        # refused here, so that `sitecal check` refuses what `sitecal run` would
        allowed = ", ".join(metric_names(comparable=True))
        for name in value:
            if metric(name).squared:
                raise ValueError(
                    f"'{name}' cannot be compared between groups: its gaps would be differences of square "
                    "roots of estimates clamped at 0, which have no valid interval. Keep it in "
                    f"'evaluation.metrics' and compare groups on one of {allowed}"
                )
            if not metric(name).comparable:
                raise ValueError(
                    f"'{name}' cannot be compared between groups: the gaps between groups and their flags "
                    f"are computed from per-patient sums of each group's terms, and {metric(name).label} is "
                    "not a sum of per-study terms (its kernel bandwidth is refitted in every resample). Keep "
                    f"it in 'evaluation.metrics' and compare groups on one of {allowed}"
                )
        return value

    @field_validator("n_bins")
    @classmethod
    def _n_bins_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_N_BINS,
            "every group's reliability curve keeps every bin, and with more bins than studies most are "
            "empty; 10 to 20 is usual",
        )

    @field_validator("min_group_size")
    @classmethod
    def _min_group_size_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_MIN_GROUP_SIZE,
            "a minimum above any cohort's size leaves every group unjudged",
        )


class AcceptanceCriterion(_Strict):
    """One go-live criterion, judged on each group's whole interval, e.g. ECE after calibration below 0.05.

    Exactly one of ``below``, ``above`` or ``within: [low, high]`` (an equivalence margin, e.g. a
    calibration slope within [0.8, 1.25]). A group passes when its whole interval clears the margin,
    fails when it lies wholly beyond it, and is inconclusive when it straddles it.
    """

    id: str = Field(pattern=_NAME_PATTERN)
    description: str | None = None
    metric: CriterionMetricName
    stage: Literal["before", "after"] = "after"
    below: float | None = Field(default=None, allow_inf_nan=False)
    above: float | None = Field(default=None, allow_inf_nan=False)
    within: tuple[float, float] | None = None
    scope: str = "overall"

    @field_validator("metric", mode="before")
    @classmethod
    def _judgeable(cls, name: Any) -> Any:
        if isinstance(name, str) and name in metric_names(reported=True) and not metric(name).criterion:
            raise ValueError(
                f"'{name}' cannot be judged against a margin: the {metric(name).label} is a plug-in "
                "estimate, biased upward on small groups, and its interval does not contain the true "
                "value (for a calibrated group, never), so a criterion on it fails good groups. Judge "
                "calibration on "
                "'ece_debiased', whose interval covers (benchmarks/coverage_debiased.md), and keep "
                f"'{name}' in evaluation.metrics to report it"
            )
        return name

    @model_validator(mode="before")
    @classmethod
    def _no_statistic(cls, data: Any) -> Any:
        if isinstance(data, dict) and "statistic" in data:
            raise ValueError(
                "'statistic' is no longer a criterion field: a criterion is now judged on the whole "
                "interval (pass when it clears the margin, fail when it lies beyond, inconclusive when it "
                f"straddles it). Remove 'statistic: {data['statistic']}' and keep 'below', 'above' or "
                "'within: [low, high]'"
            )
        return data

    @model_validator(mode="after")
    def _one_margin(self) -> AcceptanceCriterion:
        given = [k for k in ("below", "above", "within") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'below', 'above' or 'within: [low, high]'"
                + (f" (got {' and '.join(given)})" if given else "")
            )
        if self.within is not None:
            low, high = self.within
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(
                    "'within' must be two finite numbers [low, high] with low < high; "
                    f"got {list(self.within)}"
                )
        return self

    @property
    def rule(self) -> Literal["below", "above", "within"]:
        """Which margin the criterion sets."""
        return "below" if self.below is not None else "above" if self.above is not None else "within"

    @property
    def margin(self) -> tuple[float | None, float | None]:
        """``(lower, upper)``: the margin's ends, None for the side the rule leaves open."""
        if self.within is not None:
            return self.within
        return (None, self.below) if self.below is not None else (self.above, None)


class PrivacySettings(_Strict):
    """Pseudonymisation and small groups.

    Keys are HMAC-SHA256 of identifiers under a site secret kept in ``key_file`` (created by sitecal,
    mode 0600). A subgroup value held by fewer than ``min_count_shown`` studies is never shown: all such
    values of an attribute are pooled as ``"other (n < k)"`` before anything is evaluated or written, so
    that a value typed by hand into a header (a person's name in StationName) cannot reach an output.
    ``network_key_file`` names a network's shared key (:mod:`sitecal.cohort._parts`): keys are then
    HMAC-SHA256 under it, the same at every site of the network.
    """

    key_file: str | None = Field(
        default=None,
        description="default: <report.output_dir>/.sitecal-pseudonym-key; a key sitecal created, mode 0600",
    )
    min_count_shown: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="subgroup values of fewer studies are pooled as 'other (n < k)'; 1 shows every value",
    )
    network_key_file: str | None = Field(
        default=None,
        description="a network's shared key (from 'sitecal network-key'): pseudonyms under it instead of "
        "key_file, so that sites' predictions parts join into one evaluation; never created by a run",
    )


class Protocol(_Strict):
    """A validated protocol (plain data; paths still as written)."""

    name: str = Field(pattern=_NAME_PATTERN)
    intended_use: str
    model: ModelSettings
    inputs: InputSettings = Field(default_factory=InputSettings)
    data: DataSettings
    subgroups: dict[str, SubgroupSettings] = Field(default_factory=dict)
    calibration: CalibrationSettings
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    acceptance: list[AcceptanceCriterion] = Field(default_factory=list)
    report: ReportSettings = Field(default_factory=ReportSettings)
    privacy: PrivacySettings = Field(default_factory=PrivacySettings)

    @field_validator("subgroups")
    @classmethod
    def _subgroup_names(cls, value: dict[str, SubgroupSettings]) -> dict[str, SubgroupSettings]:
        for name in value:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name == "overall":
                raise ValueError(
                    f"subgroup name '{name}' must be lower case letters, digits and '_' (and not 'overall')"
                )
        return value

    @model_validator(mode="after")
    def _references(self) -> Protocol:
        names = list(self.subgroups)
        _check_intersections(self.subgroups)
        if self.data.series is not None and self.inputs.kind != "volume":
            raise _ReferenceError(
                ("data", "series"), "series rules choose a volume: set inputs.kind: volume, or remove them"
            )
        _check_route(self)
        _check_reference(self.calibration.per, names, "calibration", "per")
        _check_reference(self.calibration.split.stratify, names, "calibration", "split", "stratify")
        boot = self.evaluation.bootstrap
        if (
            self.calibration.split.by == "crossfit"
            and boot.refit
            and self.calibration.fallback == "empirical_bayes"
        ):
            raise _ReferenceError(
                ("evaluation", "bootstrap", "refit"),
                "refit under calibration.split.by: crossfit does not yet repeat the empirical-Bayes "
                "shrinkage in each fold; use refit: false (the temperature intervals still repeat it), "
                "split.by: patient, or another calibration.fallback",
            )
        if self.calibration.split.by == "crossfit" and boot.refit and boot.method == "bca":
            raise _ReferenceError(
                ("evaluation", "bootstrap", "method"),
                "method bca with refit under calibration.split.by: crossfit is not available (its "
                "acceleration would refit every fold without each patient); use method: percentile, or "
                "refit: false",
            )
        squared = [m for m in self.evaluation.metrics if metric(m).squared]
        if boot.method == "bca" and squared:
            raise _ReferenceError(
                ("evaluation", "bootstrap", "method"),
                f"method bca is not valid for {', '.join(squared)}: the debiased ECE is the square root "
                "of an estimate clamped at 0, and when it is clamped the BCa interval collapses to [0, 0] "
                "even on groups beyond the margin (a group at 0.11 against a 0.10 margin passed 40 % of "
                "the time at 50 studies). Use method: percentile (its studentised interval covers: "
                "benchmarks/coverage_debiased.md), or leave ece_debiased out of evaluation.metrics",
            )
        _check_method(self)
        _check_compare(self)
        for i, name in enumerate(self.evaluation.subgroups or []):
            _check_reference(name, names, "evaluation", "subgroups", i)
        for i, criterion in enumerate(self.acceptance):
            if criterion.scope != "overall":
                _check_reference(criterion.scope, [*names, "overall"], "acceptance", i, "scope")
            # slope, intercept and O:E come from the recalibration analysis, computed for every group
            if criterion.metric not in self.evaluation.metrics and not metric(criterion.metric).recalibration:
                raise _ReferenceError(
                    ("acceptance", i, "metric"),
                    f"'{criterion.metric}' is not among evaluation.metrics {self.evaluation.metrics}",
                )
        ids = [c.id for c in self.acceptance]
        if len(set(ids)) != len(ids):
            raise _ReferenceError(("acceptance",), "acceptance ids must be distinct")
        return self

    @property
    def reported_subgroups(self) -> list[str]:
        """Subgroup names evaluated and reported, in protocol order."""
        return list(self.evaluation.subgroups or self.subgroups)


def _check_method(protocol: Protocol) -> None:
    """A deployed method other than temperature scaling: the global fallback, percentile intervals."""
    cal, boot = protocol.calibration, protocol.evaluation.bootstrap
    if cal.method == "temperature":
        return
    if cal.method == "beta" and len(protocol.model.class_names) != 2:
        raise _ReferenceError(
            ("calibration", "method"),
            f"beta calibration is for two classes and model.class_names lists "
            f"{len(protocol.model.class_names)}; use dirichlet (its multiclass generalisation) or another "
            "method",
        )
    if cal.fallback != "global":
        raise _ReferenceError(
            ("calibration", "fallback"),
            f"fallback {cal.fallback} pulls a temperature toward the global one; with method {cal.method} a "
            "group below min_group_size takes the global fit. Use fallback: global, or method: temperature",
        )
    if boot.refit and boot.method == "bca":
        raise _ReferenceError(
            ("evaluation", "bootstrap", "method"),
            "method bca with refit: true needs every fit repeated without each patient, which is available "
            f"for method: temperature only; use method: percentile with method {cal.method}, or refit: false",
        )


def _check_compare(protocol: Protocol) -> None:
    """``calibration.compare`` with beta calibration needs a binary model."""
    compare = protocol.calibration.compare
    if "beta" in compare and len(protocol.model.class_names) != 2:
        raise _ReferenceError(
            ("calibration", "compare", compare.index("beta")),
            f"beta calibration is for two classes and model.class_names lists "
            f"{len(protocol.model.class_names)}; compare dirichlet (its multiclass generalisation), "
            "vector, matrix, histogram or isotonic instead",
        )


def _check_route(protocol: Protocol) -> None:
    """The model is run here (model.format, model.path, data.dicom_dir, data.labels) or read from a file."""
    data, model = protocol.data, protocol.model
    if data.predictions is None:
        for field, value in (
            (("model", "format"), model.format),
            (("model", "path"), model.path),
            (
                ("data", "dicom_dir"),
                data.dicom_dir if data.source is None else "retrieved from data.source",
            ),
            (("data", "labels"), data.labels),
        ):
            if value is None:
                pacs = (
                    " (a folder of exported studies, or data.source: a PACS to retrieve them from)"
                    if field == ("data", "dicom_dir")
                    else ""
                )
                raise _ReferenceError(
                    field,
                    f"required to run the model here{pacs}; or give "
                    "data.predictions (a file of the model's outputs per study) to evaluate a model that is "
                    "not run here",
                )
        if data.patient_column is not None:
            raise _ReferenceError(
                ("data", "patient_column"),
                "names a column of data.predictions, which is not given; patients come from the DICOM "
                "PatientID when the model is run here",
            )
    for name, subgroup in protocol.subgroups.items():
        if subgroup.column is not None and data.predictions is None:
            raise _ReferenceError(
                ("subgroups", name, "column"),
                "a column subgroup reads data.predictions, which is not given: use 'tag' (a DICOM keyword)",
            )
        if subgroup.tag is not None and data.predictions is not None and data.dicom_dir is None:
            raise _ReferenceError(
                ("subgroups", name, "tag"),
                "tags are read from DICOM headers, and data.dicom_dir is not given: give data.dicom_dir "
                "(joined to the predictions on data.key), or use 'column' (a column of data.predictions)",
            )
        own = {data.key_column or data.key, data.patient_column, data.label_column}
        if subgroup.column is not None and subgroup.column in own:
            raise _ReferenceError(
                ("subgroups", name, "column"),
                f"'{subgroup.column}' is the key, patient or label column: a subgroup is never drawn "
                "from an identifier or the ground truth",
            )
        # the identifier policy of tags, for a column named by whoever exported the file (PATIENTNAME, mrn)
        refused = None if subgroup.column is None else refused_column(subgroup.column)
        if refused is not None:
            raise _ReferenceError(("subgroups", name, "column"), refused)
