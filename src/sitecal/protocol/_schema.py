"""Protocol schema, the whole: privacy, the :class:`Protocol`, and the checks that span its sections.

The analysis sections (split, calibration, evaluation, acceptance) are in
:mod:`sitecal.protocol._analysis`, the inputs in :mod:`sitecal.protocol._inputs`; the analysis models are
importable from here too.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from sitecal.metrics.registry import metric
from sitecal.protocol._analysis import (
    MAX_FOLDS,
    MAX_MIN_GROUP_SIZE,
    MAX_N_BINS,
    MAX_N_RESAMPLES,
    AcceptanceCriterion,
    BootstrapSettings,
    CalibrationSettings,
    ComparedMethod,
    EvaluationSettings,
    SplitSettings,
)
from sitecal.protocol._base import (
    _NAME_PATTERN,
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
from sitecal.protocol._report import ReportSettings

__all__ = [
    "MAX_FOLDS",
    "MAX_MIN_GROUP_SIZE",
    "MAX_N_BINS",
    "MAX_N_RESAMPLES",
    "AcceptanceCriterion",
    "BootstrapSettings",
    "CalibrationSettings",
    "ComparedMethod",
    "EvaluationSettings",
    "PrivacySettings",
    "Protocol",
    "SplitSettings",
]


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
