"""Protocol schema, the input side: the model, how images become inputs, where the data are, subgroups."""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sitecal.protocol._base import (
    _at_most,
    _check_reference,
    _ReferenceError,
    _spelling_guess,
    _Strict,
    refused_tag,
    unbandable_tag,
    unshown_tag,
)
from sitecal.protocol._pacs import DicomwebSource, DimseSource, one_peer_kind
from sitecal.protocol._transforms import transform_problem


class TransformSettings(_Strict):
    """One MONAI array transform, by class name in ``monai.transforms``, with keyword arguments.

    Only the transforms and arguments of :data:`sitecal.protocol.TRANSFORM_ALLOWLIST` are accepted, with
    plain values (numbers, booleans, words from a fixed vocabulary, short lists of those): a protocol is
    data, and nothing in it may name code for MONAI to look up (a reader, a function, a dtype).
    """

    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _allowlisted(self) -> TransformSettings:
        problem = transform_problem(self.name, self.args)
        if problem is not None:
            raise _ReferenceError(*problem)  # located at the entry's field: args.mode, name, ...
        return self


class ModelSettings(_Strict):
    """The model under validation.

    With ``data.predictions`` the model is not run here (a vendor's model, or predictions made elsewhere):
    ``name``, ``version`` and ``class_names`` identify it, and ``format`` and ``path`` may be left out (when
    given, the file is hashed into provenance but never loaded). Otherwise ``format`` and ``path`` are
    required, and ``format`` says what ``path`` holds (see :func:`sitecal.inference.load_model`):

    - ``safetensors`` or ``state_dict``: weights only (a safetensors file, or a ``.pt`` read with
      ``torch.load(weights_only=True)``); ``architecture`` names the class and ``architecture_args`` its
      keyword arguments.
    - ``torch_export``: a ``.pt2`` program written by ``torch.export.save``.
    - ``torchscript``: a TorchScript archive (a program: load it only from a provider you trust).
    - ``monai_bundle``: a MONAI bundle folder; the network comes from its ``configs/inference.json``
      (or ``.yaml``) ``network_def`` and its ``models/`` weights, so ``architecture`` is not given.
    """

    name: str = "model"
    version: str | None = Field(default=None, description="the model's version as its provider names it")
    format: Literal["safetensors", "state_dict", "torch_export", "torchscript", "monai_bundle"] | None = None
    path: str | None = Field(
        default=None,
        description="the model file, or the bundle folder for monai_bundle; required unless data.predictions",
    )
    architecture: str | None = Field(
        default=None,
        description="'package.module:ClassName', required for safetensors and state_dict; "
        "not allowed for monai_bundle",
    )
    architecture_args: dict[str, Any] = Field(default_factory=dict)
    class_names: list[str] = Field(min_length=2)

    @model_validator(mode="after")
    def _architecture_for_weights(self) -> ModelSettings:
        if (self.format is None) != (self.path is None):
            given, missing = ("format", "path") if self.format is not None else ("path", "format")
            raise ValueError(
                f"model.{given} is given without model.{missing}: give both to run the model here, or "
                "neither when data.predictions holds the model's outputs"
            )
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
    batch_size: int | Literal["auto"] = Field(
        default=32,
        description="studies per forward pass; 'auto': the largest power of two up to 256 that fits the GPU "
        "(32 on a CPU)",
    )
    num_workers: int = Field(default=0, ge=0)
    precision: Literal["float32", "float16", "bfloat16"] = Field(
        default="float32",
        description="'float16' or 'bfloat16': mixed precision (autocast; bfloat16 also on a CPU), used only "
        "when the first 32 studies' class probabilities move less than precision_tolerance against float32",
    )
    precision_tolerance: float = Field(
        default=1e-3,
        gt=0,
        le=0.05,
        description="the largest change of any class probability, at temperatures 0.25 to 4, that "
        "precision may cause; above it the run is in float32",
    )
    logit_cache: bool = Field(
        default=True, description="reuse logits computed before for the same model, transforms and image"
    )
    logit_cache_dir: str | None = Field(
        default=None, description="default: <report.output_dir>/.sitecal-logit-cache"
    )

    # Upper bounds, so that a typo such as 10**9 is refused by `sitecal check`, not by the memory of the
    # machine after the scan: a batch is held in memory whole, and each worker is a process.
    max_pixels_per_image: int = Field(
        default=2**28,
        ge=1,
        le=2**34,
        description="pixel values an image may declare (Rows x Columns x frames x samples; a volume's "
        "slices together) before it is excluded unread: 2**28 is 1 GiB as float32; it also buys 6 bytes "
        "a value of decoding memory (1.5 GiB at 2**28)",
    )
    max_pixels_per_run: int = Field(
        default=2**42,
        ge=1,
        le=2**50,
        description="pixel values all analysed images may declare together before the run stops ahead of "
        "inference: a bound on the work a folder can ask for (2**42 is about a million 2048 x 2048 "
        "radiographs, or 50,000 CT series of 300 slices of 512 x 512)",
    )
    MAX_BATCH_SIZE: ClassVar[int] = 1024
    MAX_NUM_WORKERS: ClassVar[int] = 64

    @field_validator("batch_size", mode="before")
    @classmethod
    def _whole_or_auto(cls, value: Any) -> Any:
        # one clear message instead of pydantic's two (one per member of the union)
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        if isinstance(value, float) and value.is_integer():  # 32.0, as YAML may write it
            return int(value)
        raise ValueError(
            "must be a whole number of studies (e.g. 32), or 'auto' for the largest batch that fits the GPU. "
            f"Got {value!r}"
        )

    @field_validator("batch_size")
    @classmethod
    def _batch_size_bound(cls, value: int | Literal["auto"]) -> int | Literal["auto"]:
        if value == "auto":
            return value
        if value < 1:
            raise ValueError(f"must be at least 1 (or 'auto'). Got {value}")
        why = (
            "a batch of images is held in memory whole (1024 images of 512 x 512 already take 1 GiB); "
            "8 to 64 is usual"
        )
        return _at_most(value, cls.MAX_BATCH_SIZE, why)

    @field_validator("num_workers")
    @classmethod
    def _num_workers_bound(cls, value: int) -> int:
        why = (
            "each worker is a separate process with its own memory, and more workers than cores only add "
            "memory; 2 to 8 is usual"
        )
        return _at_most(value, cls.MAX_NUM_WORKERS, why)


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
    """Where the studies, the model's outputs and the ground truth are.

    Two routes: the model is run here on ``dicom_dir`` (``model.format`` and ``model.path`` given) or on
    the studies ``source`` retrieves from a PACS (:mod:`sitecal.protocol._pacs`), or its
    outputs are read from ``predictions`` (a CSV or Parquet file, one row per study; see
    :mod:`sitecal.cohort.predictions_file`). With ``predictions``, ``dicom_dir`` is optional: given, the
    studies' headers supply tag subgroups and are joined to the file on ``key``; absent, subgroups come from
    the file's columns (``subgroups.<name>.column``). Labels come from ``labels`` or, when it is left out,
    from the predictions file's ``label_column``.
    """

    dicom_dir: str | None = Field(
        default=None, description="the exported studies; required unless predictions"
    )
    labels: str | None = Field(
        default=None,
        description="ground truth: a CSV file, or a Parquet file ending in .parquet; default with "
        "predictions: the predictions file's label_column",
    )
    predictions: str | None = Field(
        default=None,
        description="the model's outputs per study (CSV, or Parquet ending in .parquet): the model is not "
        "run here",
    )
    key: Literal["StudyInstanceUID", "AccessionNumber"] = "StudyInstanceUID"
    key_column: str | None = Field(
        default=None, description="column of the labels and predictions files holding the key; default: key"
    )
    patient_column: str | None = Field(
        default=None,
        description="predictions file column identifying the patient; absent: each study is its own patient",
    )
    label_column: str = "label"
    series: SeriesRules | None = Field(
        default=None, description="series selection rules, for inputs.kind: volume"
    )
    read_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="seconds one file's header read may take before the file is excluded (a hung share)",
    )
    source: DicomwebSource | DimseSource | None = Field(
        default=None,
        description="a PACS to retrieve the studies from (DICOMweb or DIMSE), instead of dicom_dir",
    )

    @field_validator("source", mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        return one_peer_kind(value, (DicomwebSource, DimseSource))

    @model_validator(mode="after")
    def _folder_or_pacs(self) -> DataSettings:
        if self.source is not None and self.dicom_dir is not None:
            raise ValueError(
                "give data.dicom_dir (a folder of exported studies) or data.source (a PACS), not both"
            )
        if self.source is not None and self.predictions is not None:
            raise ValueError(
                "data.source retrieves studies to run the model on; it does not go with predictions"
            )
        return self


class SubgroupSettings(_Strict):
    """A subgroup attribute: a DICOM tag (by keyword), a predictions file column, or an intersection.

    ``column`` names a column of ``data.predictions`` (e.g. the site a vendor file records); its values
    are normalised, banded and mapped like a tag's, and pooled when rare like every value.

    A tag's values are normalised (see ``sitecal.cohort.attributes``), then banded (``bands``) and renamed
    through ``mapping``: a CSV file (relative to the protocol) with the columns ``value,group``, compared
    ignoring case and extra spaces. Values the mapping does not list become ``unmapped``; absent values stay
    ``unknown``. An intersection's value joins its subgroups' values, ``"F × 40–59"``, and is ``unknown``
    when any of them is.

    Which tags may be subgroups is the identifier policy of ``sitecal.protocol._base``: the tags of
    ``SHOWN_TAGS`` as they are; any other tag only with a ``mapping`` (or, for a number, ``bands``); names,
    dates, times, UIDs, free text and the identifiers of ``IDENTIFYING_TAGS`` never.
    """

    tag: str | None = None
    column: str | None = Field(default=None, description="a column of data.predictions, e.g. site")
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
        problem = refused_tag(value)
        if problem is not None:
            raise ValueError(problem)
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
        from pydicom.datadict import keyword_dict

        if sum(v is not None for v in (self.tag, self.column, self.intersection)) != 1:
            raise ValueError(
                "give exactly one of 'tag' (a DICOM keyword), 'column' (a column of data.predictions) or "
                "'intersection' (a list of two or more other subgroups)"
            )
        for name in ("bands", "mapping"):
            if self.intersection is not None and getattr(self, name) is not None:
                raise ValueError(
                    f"'{name}' applies to a tag or column; an intersection combines the values of its "
                    f"subgroups as they are. Put '{name}' on the subgroups it combines."
                )
        if self.column is not None and self.column in keyword_dict:
            # a column named like a DICOM keyword holds what that tag would: the same identifier policy
            problem = refused_tag(self.column) or unshown_tag(
                self.column, mapping=self.mapping is not None, bands=self.bands is not None
            )
            if problem is not None:
                raise ValueError(f"column '{self.column}': {problem}")
        if self.tag is not None:
            problem = (unbandable_tag(self.tag) if self.bands is not None else None) or unshown_tag(
                self.tag, mapping=self.mapping is not None, bands=self.bands is not None
            )
            if problem is not None:
                raise ValueError(problem)
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
