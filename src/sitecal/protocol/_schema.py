"""Protocol schema, the whole: privacy, the :class:`Protocol`, and the checks that span its sections.

The analysis sections (split, calibration, evaluation, acceptance) are in
:mod:`sitecal.protocol._analysis`, the checks spanning them in :mod:`sitecal.protocol._analysis_checks`,
the inputs in :mod:`sitecal.protocol._inputs`.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from sitecal.protocol._analysis import AcceptanceCriterion, CalibrationSettings, EvaluationSettings
from sitecal.protocol._analysis_checks import check_analysis
from sitecal.protocol._base import (
    _NAME_PATTERN,
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
from sitecal.protocol._monitoring import MonitoringSettings
from sitecal.protocol._report import ReportSettings

__all__ = ["PrivacySettings", "Protocol"]


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
    monitoring: MonitoringSettings | None = Field(
        default=None, description="after go-live: how sitecal monitor watches the deployed calibration"
    )

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
        _check_monitoring(self)
        check_analysis(
            names, self.calibration, self.evaluation, self.acceptance, n_classes=len(self.model.class_names)
        )
        return self

    @property
    def reported_subgroups(self) -> list[str]:
        """Subgroup names evaluated and reported, in protocol order."""
        return list(self.evaluation.subgroups or self.subgroups)


def _check_monitoring(protocol: Protocol) -> None:
    """Monitoring reads a predictions file by its date column, or DICOM studies by StudyDate; not both.

    DICOM studies come from a folder or a PACS, and the model is run on them here.
    """
    monitoring = protocol.monitoring
    if monitoring is None:
        return
    data = protocol.data
    # DICOM studies: the model is run here (_check_route), each study dated by its header
    if data.predictions is None:
        if monitoring.date_column is not None:
            raise _ReferenceError(
                ("monitoring", "date_column"),
                "names a column of data.predictions, which is not given: DICOM studies are placed in "
                "windows by their StudyDate; leave date_column out",
            )
        return
    if data.dicom_dir is not None or data.source is not None:
        raise _ReferenceError(
            ("monitoring",),
            "sitecal monitor reads either a predictions file (data.predictions, by monitoring.date_column) "
            "or DICOM studies (data.dicom_dir or data.source, by StudyDate, the model run here), not both "
            "joined: leave one out",
        )
    if monitoring.date_column is None:
        raise _ReferenceError(
            ("monitoring", "date_column"),
            "required with data.predictions: the column holding each study's date, which places it in a "
            "window",
        )
    if monitoring.date_column in {data.key_column or data.key, data.patient_column, data.label_column}:
        raise _ReferenceError(
            ("monitoring", "date_column"), "is the key, patient or label column: name the date's own column"
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
            if value is None and not (field == ("data", "labels") and protocol.monitoring is not None):
                # a monitored study's label may come later (sitecal monitor keeps it unlabelled)
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
