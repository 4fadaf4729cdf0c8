"""The validation protocol: its schema and :func:`load_protocol`.

A protocol is a YAML file read with ``yaml.safe_load`` semantics (``yaml.SafeLoader``), validated by the
pydantic models below. Every error names the file, the line and the dotted field, and says what to do::

    protocols/site.yaml:14: calibration.pre: unknown field. Did you mean 'per'?

Paths in the protocol (``data.dicom_dir``, ``data.labels``, ``model.path``, ``report.output_dir``) are
relative to the protocol file's folder. ``model.path`` may also name a file shipped inside the package as
``sitecal:demo/demo_cnn.safetensors``.

``inputs.transforms`` is data: :data:`TRANSFORM_ALLOWLIST` lists the MONAI array transforms a protocol may
name and the plain arguments each takes, and :func:`transform_problem` says why an entry is refused.
"""

from sitecal.protocol._analysis import (
    AcceptanceCriterion,
    BootstrapSettings,
    CalibrationSettings,
    EvaluationSettings,
    SplitSettings,
)
from sitecal.protocol._analysis_checks import check_analysis
from sitecal.protocol._base import SHOWN_TAGS
from sitecal.protocol._inputs import (
    DataSettings,
    InputSettings,
    ModelSettings,
    SeriesRules,
    SubgroupSettings,
    TransformSettings,
)
from sitecal.protocol._load import LoadedProtocol, YamlExcess, load_protocol, protocol_summary, yaml_excess
from sitecal.protocol._monitoring import MonitoringSettings
from sitecal.protocol._pacs import (
    DicomwebDestination,
    DicomwebService,
    DicomwebSource,
    DimseDestination,
    DimseService,
    DimseSource,
    PacsQuery,
    TlsSettings,
)
from sitecal.protocol._planning import DEFAULT_PLAN_SIZES, PlanningSettings
from sitecal.protocol._report import DesignSettings, GovernanceSettings, MlflowSettings, ReportSettings
from sitecal.protocol._schema import PrivacySettings, Protocol
from sitecal.protocol._transforms import TRANSFORM_ALLOWLIST, transform_problem

__all__ = [
    "DEFAULT_PLAN_SIZES",
    "SHOWN_TAGS",
    "TRANSFORM_ALLOWLIST",
    "AcceptanceCriterion",
    "BootstrapSettings",
    "CalibrationSettings",
    "DataSettings",
    "DesignSettings",
    "DicomwebDestination",
    "DicomwebService",
    "DicomwebSource",
    "DimseDestination",
    "DimseService",
    "DimseSource",
    "EvaluationSettings",
    "GovernanceSettings",
    "InputSettings",
    "LoadedProtocol",
    "MlflowSettings",
    "ModelSettings",
    "MonitoringSettings",
    "PacsQuery",
    "PlanningSettings",
    "PrivacySettings",
    "Protocol",
    "ReportSettings",
    "SeriesRules",
    "SplitSettings",
    "SubgroupSettings",
    "TlsSettings",
    "TransformSettings",
    "YamlExcess",
    "check_analysis",
    "load_protocol",
    "protocol_summary",
    "transform_problem",
    "yaml_excess",
]
