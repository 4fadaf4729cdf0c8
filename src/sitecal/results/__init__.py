"""Typed results: what the stages hand on and what the run folder stores.

Frozen dataclasses, one per document and per part of one. Each document type has one
``to_dict`` / ``from_dict`` pair (``to_dict`` gives the JSON object as written; ``from_dict`` checks a
parsed one strictly: unknown keys, missing keys, wrong types, out-of-range values and a wrong
``schema_version`` raise a :class:`~sitecal.errors.DataError` naming the file and the JSON path), a
``SCHEMA_VERSION`` and a JSON Schema generated from the same annotations (:func:`json_schema`).
:func:`write_document` and :func:`read_document` check every document on the way out and on the way in.

Documents: :class:`Evaluation` (``evaluation.json``), :class:`CalibrationDocument` (``calibration.json``).
Tables: :func:`metrics_table` (``metrics.csv`` and ``metrics.parquet``, one :class:`MetricRow` per group,
metric and stage of an evaluation), written by :func:`write_metrics_table`.
In memory only: :class:`Predictions`.

>>> from sitecal.results import Interval
>>> Interval.from_dict({"estimate": 0.04, "low": 0.03, "high": 0.06}).to_dict()
{'estimate': 0.04, 'low': 0.03, 'high': 0.06}
>>> Interval.from_dict({"estimate": 0.04, "low": "x", "high": 0.06})
Traceback (most recent call last):
...
sitecal.errors.DataError: Interval: $.low: expected a number, got "x".
"""

from __future__ import annotations

from sitecal.results._calibration import (
    CalibrationDocument,
    GroupTemperatureRecord,
    MethodCalibrationDocument,
    TemperatureFitRecord,
)
from sitecal.results._characteristics import (
    Characteristics,
    CharacteristicsRow,
    ClassCount,
    HighestConfidenceErrors,
    ListedError,
    MixEntry,
)
from sitecal.results._codec import Record
from sitecal.results._comparison import ComparedGroup, ComparedMeasure, ComparisonFinding, MethodComparison
from sitecal.results._documents import read_calibration, read_document, write_document
from sitecal.results._evaluation import (
    BootstrapSettings,
    Criterion,
    CriterionResult,
    Disparity,
    DisparityStages,
    EceSettings,
    Evaluation,
    GroupWarning,
    NotCompared,
    PlanningSettings,
    ProtocolRef,
    SplitSettings,
    StudySize,
)
from sitecal.results._fields import JSON
from sitecal.results._flow import CohortFlow, ExclusionCount, SourceMonths, Sources, ValueCount
from sitecal.results._groups import (
    BootstrapSummary,
    GroupResult,
    Interval,
    MetricResult,
    Note,
    Reliability,
    ReliabilityCurve,
    TemperatureInterval,
)
from sitecal.results._kinds import (
    CharacteristicsNote,
    ErrorsNote,
    IntervalNote,
    LeftOutNote,
    RecalibrationNote,
    SiteExclusionReason,
    SiteSource,
    Verdict,
)
from sitecal.results._metrics_table import METRIC_COLUMNS, MetricRow, metrics_table, write_metrics_table
from sitecal.results._monitoring import (
    AlertKind,
    MonitorAlert,
    MonitorBaseline,
    MonitoringDocument,
    MonitorTest,
    MonitorWindow,
)
from sitecal.results._predictions import Predictions
from sitecal.results._provenance import FileHashCounts, LogitSources, ModelRecord, ProvenanceDocument
from sitecal.results._schema import json_schema
from sitecal.results._sensitivity import (
    Heterogeneity,
    HeterogeneityExcluded,
    HeterogeneitySite,
    LeaveOneSiteOut,
    LeftOutSite,
    PooledSites,
    Recalibration,
    RecalibrationGroup,
    RecalibrationIntervals,
    RecalibrationStage,
    RecalibrationValue,
    RemainingCohort,
    Sensitivity,
    UnpooledSites,
)

__all__ = [
    "JSON",
    "METRIC_COLUMNS",
    "AlertKind",
    "BootstrapSettings",
    "BootstrapSummary",
    "CalibrationDocument",
    "Characteristics",
    "CharacteristicsNote",
    "CharacteristicsRow",
    "ClassCount",
    "CohortFlow",
    "ComparedGroup",
    "ComparedMeasure",
    "ComparisonFinding",
    "Criterion",
    "CriterionResult",
    "Disparity",
    "DisparityStages",
    "EceSettings",
    "ErrorsNote",
    "Evaluation",
    "ExclusionCount",
    "FileHashCounts",
    "GroupResult",
    "GroupTemperatureRecord",
    "GroupWarning",
    "Heterogeneity",
    "HeterogeneityExcluded",
    "HeterogeneitySite",
    "HighestConfidenceErrors",
    "Interval",
    "IntervalNote",
    "LeaveOneSiteOut",
    "LeftOutNote",
    "LeftOutSite",
    "ListedError",
    "LogitSources",
    "MethodCalibrationDocument",
    "MethodComparison",
    "MetricResult",
    "MetricRow",
    "MixEntry",
    "ModelRecord",
    "MonitorAlert",
    "MonitorBaseline",
    "MonitorTest",
    "MonitorWindow",
    "MonitoringDocument",
    "NotCompared",
    "Note",
    "PlanningSettings",
    "PooledSites",
    "Predictions",
    "ProtocolRef",
    "ProvenanceDocument",
    "Recalibration",
    "RecalibrationGroup",
    "RecalibrationIntervals",
    "RecalibrationNote",
    "RecalibrationStage",
    "RecalibrationValue",
    "Record",
    "Reliability",
    "ReliabilityCurve",
    "RemainingCohort",
    "Sensitivity",
    "SiteExclusionReason",
    "SiteSource",
    "SourceMonths",
    "Sources",
    "SplitSettings",
    "StudySize",
    "TemperatureFitRecord",
    "TemperatureInterval",
    "UnpooledSites",
    "ValueCount",
    "Verdict",
    "json_schema",
    "metrics_table",
    "read_calibration",
    "read_document",
    "write_document",
    "write_metrics_table",
]
