"""The validation protocol: its schema and :func:`load_protocol`.

A protocol is a YAML file read with ``yaml.safe_load`` semantics (``yaml.SafeLoader``), validated by the
pydantic models below. Every error names the file, the line and the dotted field, and says what to do::

    protocols/site.yaml:14: calibration.pre: unknown field. Did you mean 'per'?

Paths in the protocol (``data.dicom_dir``, ``data.labels``, ``model.path``, ``report.output_dir``) are
relative to the protocol file's folder. ``model.path`` may also name a file shipped inside the package as
``sitecal:demo/demo_cnn.safetensors``.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sitecal.errors import ProtocolError

__all__ = [
    "AcceptanceCriterion",
    "BootstrapSettings",
    "CalibrationSettings",
    "DataSettings",
    "EvaluationSettings",
    "InputSettings",
    "LoadedProtocol",
    "ModelSettings",
    "PrivacySettings",
    "Protocol",
    "ReportSettings",
    "SeriesRules",
    "SplitSettings",
    "SubgroupSettings",
    "TransformSettings",
    "load_protocol",
    "protocol_summary",
]

MetricName = Literal["ece", "nll", "brier", "accuracy"]
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_IDENTIFYING_TAGS = frozenset(
    {
        "PatientID",
        "PatientName",
        "PatientBirthDate",
        "AccessionNumber",
        "OtherPatientIDs",
        "PatientAddress",
        "ReferringPhysicianName",
        "PatientTelephoneNumbers",
        "IssuerOfPatientID",
        "MedicalRecordLocator",
    }
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class TransformSettings(_Strict):
    """One MONAI array transform, by class name in ``monai.transforms``, with keyword arguments."""

    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ModelSettings(_Strict):
    """The model under validation.

    ``format`` says what ``path`` holds (see :func:`sitecal.inference.load_model`):

    - ``safetensors`` or ``state_dict``: weights only (a safetensors file, or a ``.pt`` read with
      ``torch.load(weights_only=True)``); ``architecture`` names the class and ``architecture_args`` its
      keyword arguments.
    - ``torch_export``: a ``.pt2`` program written by ``torch.export.save``.
    - ``torchscript``: a TorchScript archive (a program: load it only from a provider you trust).
    - ``monai_bundle``: a MONAI bundle folder; the network comes from its ``configs/inference.json``
      (or ``.yaml``) ``network_def`` and its ``models/`` weights, so ``architecture`` is not given.
    """

    name: str = "model"
    format: Literal["safetensors", "state_dict", "torch_export", "torchscript", "monai_bundle"]
    path: str = Field(description="the model file, or the bundle folder for monai_bundle")
    architecture: str | None = Field(
        default=None,
        description="'package.module:ClassName', required for safetensors and state_dict; "
        "not allowed for monai_bundle",
    )
    architecture_args: dict[str, Any] = Field(default_factory=dict)
    class_names: list[str] = Field(min_length=2)

    @model_validator(mode="after")
    def _architecture_for_weights(self) -> ModelSettings:
        if self.format in ("safetensors", "state_dict") and not self.architecture:
            raise ValueError(
                f"format '{self.format}' holds weights only: add 'architecture: package.module:ClassName'"
            )
        if self.format == "monai_bundle" and (self.architecture or self.architecture_args):
            raise ValueError(
                "format 'monai_bundle' builds the network from the bundle's network_def: "
                "remove 'architecture' and 'architecture_args'"
            )
        if self.architecture and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", self.architecture):
            raise ValueError(
                f"architecture must look like 'package.module:ClassName'. Got {self.architecture!r}"
            )
        if len(set(self.class_names)) != len(self.class_names):
            raise ValueError("class_names must be distinct")
        return self


class InputSettings(_Strict):
    """How each image becomes a model input."""

    transforms: list[TransformSettings] = Field(default_factory=list)
    voi: Literal["none", "window"] = Field(
        default="none",
        description="'window': apply each image's VOI LUT or first window (to [0, 1]) before the transforms",
    )
    kind: Literal["image", "volume"] = Field(
        default="image",
        description="'image': one image per study; 'volume': one series per study (data.series)",
    )
    batch_size: int = Field(default=32, ge=1)
    num_workers: int = Field(default=0, ge=0)
    logit_cache: bool = Field(
        default=True, description="reuse logits computed before for the same model, transforms and image"
    )
    logit_cache_dir: str | None = Field(
        default=None, description="default: <report.output_dir>/.sitecal-logit-cache"
    )


class SeriesRules(_Strict):
    """Which series of a study is the volume analysed (``inputs.kind: volume``).

    A series qualifies when every stated rule holds for its first instance by path: ``modality`` lists the
    accepted Modality values, ``series_description`` is a regular expression searched in SeriesDescription
    (``(?i)`` for case-insensitive), ``body_part`` lists BodyPartExamined values (compared ignoring case),
    and it has at least ``min_slices`` slices (instances, or frames of a multi-frame instance). Among the
    qualifying series of a study, :data:`sitecal.cohort.series.SERIES_TIE_BREAK` picks one.
    """

    modality: list[str] | None = Field(default=None, description="accepted Modality values, e.g. [CT]")
    series_description: str | None = Field(
        default=None, description="regular expression searched in SeriesDescription, e.g. '(?i)axial'"
    )
    body_part: list[str] | None = Field(default=None, description="accepted BodyPartExamined values")
    min_slices: int = Field(default=1, ge=1)

    @field_validator("series_description")
    @classmethod
    def _a_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc}): {value!r}") from None
        return value

    @field_validator("modality", "body_part")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not [v for v in value if v.strip()]:
            raise ValueError("list at least one value, or leave the rule out")
        return value


class DataSettings(_Strict):
    """Where the studies and their ground truth are."""

    dicom_dir: str
    labels: str = Field(description="ground truth: a CSV file, or a Parquet file ending in .parquet")
    key: Literal["StudyInstanceUID", "AccessionNumber"] = "StudyInstanceUID"
    key_column: str | None = Field(default=None, description="labels column holding the key; default: key")
    label_column: str = "label"
    series: SeriesRules | None = Field(
        default=None, description="series selection rules, for inputs.kind: volume"
    )


class SubgroupSettings(_Strict):
    """A subgroup attribute: a DICOM tag (by keyword), or the intersection of other subgroups.

    A tag's values are normalised (see ``sitecal.cohort.attributes``), then banded (``bands``) and renamed
    through ``mapping``: a CSV file (relative to the protocol) with the columns ``value,group``, compared
    ignoring case and extra spaces. Values the mapping does not list become ``unmapped``; absent values stay
    ``unknown``. An intersection's value joins its subgroups' values, ``"F × 40–59"``, and is ``unknown``
    when any of them is.
    """

    tag: str | None = None
    intersection: list[str] | None = Field(
        default=None, description="names of two or more tag subgroups, e.g. [sex, age_band]"
    )
    bands: list[float] | None = Field(default=None, description="age band edges in years, for PatientAge")
    mapping: str | None = Field(default=None, description="CSV 'value,group' renaming values, e.g. stations")
    label: str | None = None

    @field_validator("tag")
    @classmethod
    def _known_tag(cls, value: str | None) -> str | None:
        from pydicom.datadict import keyword_dict

        if value is None:
            return value
        if value not in keyword_dict:
            guess = _spelling_guess(value, keyword_dict)
            raise ValueError(f"'{value}' is not a DICOM keyword.{guess}")
        if value in _IDENTIFYING_TAGS or value.endswith("UID"):
            raise ValueError(
                f"'{value}' identifies patients or studies and cannot be a subgroup: it would appear in "
                "clear in the report. Use a site mapping or another tag."
            )
        return value

    @field_validator("bands")
    @classmethod
    def _increasing(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (len(value) < 2 or any(b <= a for a, b in pairwise(value))):
            raise ValueError("bands must be at least two strictly increasing numbers, e.g. [0, 40, 60, 80]")
        return value

    @field_validator("intersection")
    @classmethod
    def _two_or_more(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) < 2:
            raise ValueError(
                f"an intersection combines two or more subgroups, e.g. [sex, age_band]. Got {value}"
            )
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"an intersection names each subgroup once. Got {value}")
        return value

    @field_validator("mapping")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError(
                "give the path of a CSV file with the columns 'value,group', or leave mapping out"
            )
        return value

    @model_validator(mode="after")
    def _tag_or_intersection(self) -> SubgroupSettings:
        if (self.tag is None) == (self.intersection is None):
            raise ValueError(
                "give exactly one of 'tag' (a DICOM keyword) or 'intersection' (a list of two or more other "
                "subgroups)"
            )
        for name in ("bands", "mapping"):
            if self.intersection is not None and getattr(self, name) is not None:
                raise ValueError(
                    f"'{name}' applies to a tag; an intersection combines the values of its subgroups as "
                    f"they are. Put '{name}' on the subgroups it combines."
                )
        return self


def _check_intersections(subgroups: Mapping[str, SubgroupSettings]) -> None:
    """Every intersection names subgroups defined under ``subgroups`` that are tags, not intersections."""
    names = list(subgroups)
    for name, settings in subgroups.items():
        parts = settings.intersection or []
        for i, part in enumerate(parts):
            _check_reference(part, names, "subgroups", name, "intersection", i)
            nested = subgroups[part].intersection
            if nested is not None:
                flat = [p for q in parts for p in (subgroups[q].intersection or [q])]
                raise _ReferenceError(
                    ("subgroups", name, "intersection", i),
                    f"'{part}' is itself an intersection (of {', '.join(nested)}). List tag subgroups "
                    f"instead: [{', '.join(dict.fromkeys(flat))}].",
                )


class SplitSettings(_Strict):
    """The seeded, patient-level split into a fit part (temperatures) and an evaluation part."""

    by: Literal["patient"] = "patient"
    fit_fraction: float = Field(default=0.5, gt=0.0, lt=1.0)
    seed: int
    stratify: str | None = Field(default=None, description="subgroup name; default: calibration.per")


class CalibrationSettings(_Strict):
    """Temperature scaling, one temperature per group of ``per``."""

    method: Literal["temperature"] = "temperature"
    per: str | None = None
    min_group_size: int = Field(default=50, ge=1)
    fallback: Literal["global", "shrink"] = "global"
    split: SplitSettings


class BootstrapSettings(_Strict):
    """Patient-level bootstrap of every metric."""

    n_resamples: int = Field(default=1000, ge=50)
    level: float = Field(default=0.95, gt=0.5, lt=1.0)
    method: Literal["percentile", "bca"] = "percentile"
    seed: int = 0
    refit: bool = Field(
        default=False,
        description="refit the temperature in every resample, so that intervals after calibration of the "
        "calibration groups include the temperature's uncertainty",
    )


class EvaluationSettings(_Strict):
    """What is measured on the evaluation split."""

    metrics: list[MetricName] = Field(
        default_factory=lambda: ["ece", "nll", "brier", "accuracy"], min_length=1
    )
    n_bins: int = Field(default=15, ge=1)
    min_group_size: int = Field(default=30, ge=1)
    subgroups: list[str] | None = Field(default=None, description="subgroups to report; default: all")
    disparity_metrics: list[MetricName] = Field(
        default_factory=lambda: ["ece"], description="metrics whose gaps between groups get intervals"
    )
    bootstrap: BootstrapSettings = Field(default_factory=BootstrapSettings)


class AcceptanceCriterion(_Strict):
    """One go-live criterion, e.g. the upper CI of ECE after calibration below 0.05 in every scanner group."""

    id: str = Field(pattern=_NAME_PATTERN)
    description: str | None = None
    metric: MetricName
    stage: Literal["before", "after"] = "after"
    statistic: Literal["estimate", "low", "high"] = "high"
    below: float | None = None
    above: float | None = None
    scope: str = "overall"

    @model_validator(mode="after")
    def _one_bound(self) -> AcceptanceCriterion:
        if (self.below is None) == (self.above is None):
            raise ValueError("give exactly one of 'below' or 'above'")
        return self

    @property
    def operator(self) -> str:
        """``"<"`` for ``below``, ``">"`` for ``above``."""
        return "<" if self.below is not None else ">"

    @property
    def threshold(self) -> float:
        """The bound, whichever side it is on."""
        value = self.below if self.below is not None else self.above
        assert value is not None
        return value


class ReportSettings(_Strict):
    """Where the run folder goes and what the PDF says."""

    output_dir: str = "reports"
    title: str = "Calibration validation report"
    sign_off: list[str] = Field(default_factory=list)
    page_size: Literal["A4", "Letter"] = "A4"


class PrivacySettings(_Strict):
    """Pseudonymisation: keys are HMAC-SHA256 of identifiers under a site secret kept in ``key_file``."""

    key_file: str | None = Field(
        default=None, description="default: <report.output_dir>/.sitecal-pseudonym-key"
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
        _check_reference(self.calibration.per, names, "calibration", "per")
        _check_reference(self.calibration.split.stratify, names, "calibration", "split", "stratify")
        for i, name in enumerate(self.evaluation.subgroups or []):
            _check_reference(name, names, "evaluation", "subgroups", i)
        for i, criterion in enumerate(self.acceptance):
            if criterion.scope != "overall":
                _check_reference(criterion.scope, [*names, "overall"], "acceptance", i, "scope")
            if criterion.metric not in self.evaluation.metrics:
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


class _ReferenceError(ValueError):
    """A cross-field reference failed; carries the location of the offending field."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _check_reference(value: str | None, allowed: list[str], *loc: str | int) -> None:
    if value is not None and value not in allowed:
        guess = _spelling_guess(value, allowed)
        raise _ReferenceError(loc, f"'{value}' is not a subgroup defined under 'subgroups' {allowed}.{guess}")


def _spelling_guess(value: str, options: Any) -> str:
    close = difflib.get_close_matches(value, list(options), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


@dataclass(frozen=True)
class LoadedProtocol:
    """A validated protocol with where it came from and its paths resolved."""

    protocol: Protocol
    path: Path
    text: str
    sha256: str

    def resolve(self, value: str) -> Path:
        """Resolve a protocol path relative to the protocol file's folder (``sitecal:`` = package data)."""
        if value.startswith("sitecal:"):
            from importlib.resources import files

            return Path(str(files("sitecal").joinpath(value.removeprefix("sitecal:"))))
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    @property
    def dicom_dir(self) -> Path:
        """The folder of DICOM files to scan."""
        return self.resolve(self.protocol.data.dicom_dir)

    @property
    def labels_path(self) -> Path:
        """The ground-truth table."""
        return self.resolve(self.protocol.data.labels)

    @property
    def model_path(self) -> Path:
        """The model file (or folder)."""
        return self.resolve(self.protocol.model.path)

    @property
    def output_root(self) -> Path:
        """The folder that receives run folders."""
        return self.resolve(self.protocol.report.output_dir)

    @property
    def logit_cache_dir(self) -> Path | None:
        """The logit cache folder, or ``None`` when ``inputs.logit_cache`` is off."""
        inputs = self.protocol.inputs
        if not inputs.logit_cache:
            return None
        if inputs.logit_cache_dir is not None:
            return self.resolve(inputs.logit_cache_dir)
        return self.output_root / ".sitecal-logit-cache"

    @property
    def key_file(self) -> Path:
        """The site secret for pseudonymisation."""
        key_file = self.protocol.privacy.key_file
        return self.resolve(key_file) if key_file else self.output_root / ".sitecal-pseudonym-key"


def load_protocol(path: str | Path) -> LoadedProtocol:
    """Read, parse and validate a protocol file.

    Parameters
    ----------
    path : str or Path
        The YAML protocol.

    Returns
    -------
    LoadedProtocol
        The validated protocol, its text and sha256.

    Raises
    ------
    ProtocolError
        When the file is missing or unreadable, is not valid YAML, has duplicate keys, or does not follow the
        schema. The message lists every problem as ``file:line: field: what is wrong``.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ProtocolError(f"{path}: protocol file not found. Check the path.") from None
    except OSError as exc:
        raise ProtocolError(f"{path}: cannot read the protocol ({exc.strerror}).") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(
            f"{path}: the protocol is not UTF-8 text (byte {exc.start}). Save it as UTF-8."
        ) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is None:
            raise ProtocolError(f"{path}: the protocol is empty. Start from protocols/demo.yaml.")
        _reject_duplicate_keys(root, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProtocolError(
            f"{where}: invalid YAML: {problem}. Fix the syntax and run 'sitecal check' again."
        ) from None
    if not isinstance(data, dict):
        raise ProtocolError(
            f"{path}:1: the protocol must be a mapping of fields (name:, model:, data:, ...)."
        )
    try:
        protocol = Protocol.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(_format_validation_error(exc, root, path)) from None
    return LoadedProtocol(
        protocol=protocol, path=path.resolve(), text=text, sha256=hashlib.sha256(raw).hexdigest()
    )


def _reject_duplicate_keys(node: yaml.Node, path: Path) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            if name in seen:
                raise ProtocolError(
                    f"{path}:{key.start_mark.line + 1}: '{name}' appears twice in the same mapping "
                    f"(first on line {seen[name]}). Keep one."
                )
            seen[name] = key.start_mark.line + 1
            _reject_duplicate_keys(value, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _reject_duplicate_keys(item, path)


def _format_validation_error(exc: ValidationError, root: yaml.Node, path: Path) -> str:
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        message = error["msg"]
        if error["type"] in ("literal_error", "int_parsing", "float_parsing", "bool_parsing", "string_type"):
            message += f". Got {error.get('input')!r}"
        ctx = error.get("ctx") or {}
        inner = ctx.get("error")
        if isinstance(inner, _ReferenceError):
            loc, message = loc + inner.loc, str(inner)
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field." + _spelling_guess(str(loc[-1]), _allowed_fields(loc[:-1]))
        elif error["type"] == "missing":
            message = "required field is missing."
        line = _line_of(root, loc)
        field = ".".join(str(part) for part in loc) or "(top level)"
        lines.append(f"{path}:{line}: {field}: {message}")
    lines.append("Fix the protocol and run 'sitecal check' again.")
    return "\n".join(lines)


def _line_of(root: yaml.Node, loc: tuple[Any, ...]) -> int:
    """The 1-based line of the deepest YAML node on ``loc`` (the key itself for mapping entries)."""
    node, line = root, root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    node, line = value, key.start_mark.line + 1
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _allowed_fields(loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at ``loc`` in the schema, for spelling guesses."""
    model: Any = Protocol
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if field is None:
            # a free-form mapping (subgroups: {name: SubgroupSettings})
            model = _mapping_value_model(model, part)
            continue
        model = _model_of(field.annotation)
    return list(model.model_fields) if model is not None and hasattr(model, "model_fields") else []


def _model_of(annotation: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _mapping_value_model(model: Any, part: Any) -> Any:
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def protocol_summary(loaded: LoadedProtocol) -> Mapping[str, Any]:
    """The protocol facts the report prints (plain data)."""
    p = loaded.protocol
    return {
        "name": p.name,
        "title": p.report.title,
        "intended_use": p.intended_use,
        "sha256": loaded.sha256,
        "yaml_text": loaded.text,
        "sign_off": list(p.report.sign_off),
        "source_path": loaded.path.name,
    }
