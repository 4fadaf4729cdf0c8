"""The Cohort artifact: one row per study, and the exclusions met on the way."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = [
    "UNITS",
    "UNLABELLED",
    "Cohort",
    "Exclusion",
    "PredictionsFileSummary",
    "Study",
    "Unit",
    "exclusion_counts",
]

Unit = Literal["file", "image", "series", "study", "label", "prediction"]
UNITS: tuple[Unit, ...] = ("file", "image", "series", "study", "label", "prediction")


@dataclass(frozen=True)
class Exclusion:
    """Something that did not enter the analysis, the stage that dropped it and why.

    ``path`` is relative to the DICOM folder (pseudonymised where it carries an identifier when written);
    ``key`` is a pseudonymised study key where there is one. ``study_uid`` (in memory only, never written)
    lets a label whose study's file was excluded be recognised as such rather than as matching no study.
    ``unit`` says what was left out (:data:`UNITS`): a file, an image of a study, a series, a study, a
    label row or a predictions file row; only a ``study`` removes a study from the flow.
    """

    stage: str
    reason: str
    path: Path | None = None
    key: str | None = None
    study_uid: str | None = field(default=None, repr=False)
    series_key: str | None = None  # pseudonymised SeriesInstanceUID, for series-stage exclusions
    unit: Unit = field(kw_only=True)


#: The label of a study kept without one (``sitecal monitor``'s studies whose labels have not come yet).
UNLABELLED = -1


@dataclass(frozen=True)
class Study:
    """One study entering the analysis.

    ``study_key`` and ``patient_key`` are pseudonyms. ``files`` are what the model reads: the one image,
    or the chosen series' files (in scan order; the reader orders the slices). ``instance_uids`` (their
    SOPInstanceUIDs, same order) stay in memory for caching and provenance hashing and are never written
    in clear. ``relative_path`` is the pseudonymised file, or the folder holding the series' files.
    ``logits`` are the model's outputs read from a predictions file (``None`` when the model runs here).
    ``split_key`` (the patient's) and ``study_order`` (the study's) order the rows for the fit/evaluation
    split and the resampling (:mod:`sitecal._split_key`): in memory only, never written or shown.
    ``label`` is :data:`UNLABELLED` for a study kept without one (``sitecal monitor``); ``study_date`` is
    the header's StudyDate as written, in memory only, which places the study in a monitoring window.
    """

    study_key: str
    patient_key: str
    files: tuple[Path, ...]
    relative_path: str
    instance_uids: tuple[str, ...]
    attributes: dict[str, str]
    label: int
    sources: dict[str, str] = field(default_factory=dict)  # sitecal.cohort.sources.source_values
    series_key: str = ""  # pseudonymised SeriesInstanceUID of the image or chosen series
    series_number: str = ""  # its SeriesNumber as written ("" when absent)
    declared_values: int = 0  # pixel values its files declare (Rows x Columns x frames x samples, summed)
    logits: np.ndarray | None = field(default=None, compare=False, repr=False)
    split_key: str = field(default="", repr=False)
    study_order: str = field(default="", repr=False)
    study_date: str = field(default="", repr=False)  # StudyDate as written: a monitoring window's day

    @property
    def path(self) -> Path:
        """The image's file (a volume's first file by path)."""
        return self.files[0]


@dataclass(frozen=True)
class PredictionsFileSummary:
    """What a predictions file was, for provenance and the report (no key, no cell)."""

    rows: int
    usable_rows: int
    score_kind: Literal["logit", "prob"]
    pseudonymised: bool  # keys are sitecal's own pseudonyms (a file sitecal wrote)
    patients: Literal["column", "one per study", "DICOM PatientID"]
    labels: Literal["labels file", "predictions file"]


@dataclass(frozen=True)
class Cohort:
    """Studies to analyse, exclusions, and the counts of the flow from files to studies."""

    studies: tuple[Study, ...]
    exclusions: tuple[Exclusion, ...]
    files_found: int
    dicom_instances: int
    n_studies_found: int
    n_labelled: int
    attributes: tuple[str, ...] = field(default=())
    n_series_found: int | None = None  # volumes: series considered, and those chosen (one per study)
    n_series_selected: int | None = None
    predictions_file: PredictionsFileSummary | None = None  # when the model's outputs came from a file
    retrieval: Mapping[str, Any] | None = None  # when the studies came from a PACS: what was asked, and got

    def exclusion_counts(self) -> list[dict[str, object]]:
        """Exclusions counted by (stage, reason), in order of first appearance."""
        return exclusion_counts(self.exclusions)


def exclusion_counts(exclusions: Sequence[Exclusion]) -> list[dict[str, object]]:
    """Exclusions counted by (stage, reason, unit), in order of first appearance."""
    counts = Counter((e.stage, e.reason, e.unit) for e in exclusions)
    return [{"stage": s, "reason": r, "unit": u, "count": n} for (s, r, u), n in counts.items()]
