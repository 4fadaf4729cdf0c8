"""The cohort flow of ``evaluation.json``: from files found to studies analysed, and how they were split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from sitecal.results._codec import Record
from sitecal.results._fields import Constraint, OrAbsent
from sitecal.results._kinds import Count, ExclusionStage, ExclusionUnit

__all__ = ["CohortFlow", "ExclusionCount", "SourceMonths", "Sources", "ValueCount"]

_Month = Annotated[str, Constraint(pattern=r"^[0-9]{4}-[0-9]{2}$")]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExclusionCount(Record):
    """What did not enter the analysis, counted by pipeline stage, reason and unit.

    Attributes
    ----------
    stage : str
        The pipeline stage that dropped it.
    reason : str
        Why.
    unit : str or None
        What was left out: a file, an additional image of a study, a series, a study, a label row or a
        predictions-file row. Only 'study' removes a study from the flow; absent in documents written
        before it was recorded.
    count : int
        How many.
    """

    stage: ExclusionStage
    reason: Annotated[str, Constraint(min_length=1)]
    unit: OrAbsent[ExclusionUnit] = None
    count: Annotated[int, Constraint(minimum=1)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ValueCount(Record):
    """A value with its study count."""

    value: str
    count: Annotated[int, Constraint(minimum=1)]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceMonths(Record):
    """The first and last study month (month precision, never the day).

    Attributes
    ----------
    first, last : str or None
        ``YYYY-MM``; null when no study has a usable StudyDate.
    unknown : int
        Studies without a usable StudyDate.
    """

    first: _Month | None
    last: _Month | None
    unknown: Count


@dataclass(frozen=True, slots=True, kw_only=True)
class Sources(Record):
    """Where the analysed studies came from, from their headers.

    Sites (InstitutionName), scanners (Manufacturer + ManufacturerModelName) and modalities with study
    counts, most frequent first, 'unknown' last; and the first and last study month.
    """

    sites: tuple[ValueCount, ...]
    scanners: tuple[ValueCount, ...]
    modalities: tuple[ValueCount, ...]
    months: SourceMonths


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortFlow(Record):
    """From files found to studies analysed, and how the analysed studies were split.

    Attributes
    ----------
    files_found : int
        Files under the DICOM folder.
    dicom_instances : int
        Files read as DICOM instances.
    studies : int
        Studies formed from the instances.
    labelled : int
        Studies with a ground-truth label.
    analysed : int
        Studies that entered the evaluation (model output obtained).
    exclusions : tuple of ExclusionCount
        What did not enter the analysis, by stage and reason, in order of first appearance.
    sources : Sources or None
        Absent in documents written before it was recorded.
    model_failed : int or None
        Studies on which the model's forward pass raised (each an inference exclusion); absent when none.
    non_finite_logits : int or None
        Studies for which the model returned NaN or infinite logits; absent when none.
    series_found : int or None
        Volumes only: series considered (every series of every study).
    series_selected : int or None
        Volumes only: series chosen by data.series, at most one per study.
    source : "predictions_file", "network_parts" or None
        ``predictions_file`` when the studies are the rows of a predictions file (no DICOM folder was read):
        then ``files_found`` and ``dicom_instances`` are 0 and ``studies`` counts the file's usable rows.
        ``network_parts`` when they come from the predictions parts of a network's sites
        (:mod:`sitecal.cohort._parts`): the counts are the sums of the sites' own scans.
    fit : int
        Analysed studies in the fit split (temperatures fitted on them).
    evaluation : int
        Analysed studies in the evaluation split (every metric measured on them).
    """

    files_found: Count
    dicom_instances: Count
    studies: Count
    labelled: Count
    analysed: Count
    exclusions: tuple[ExclusionCount, ...]
    sources: OrAbsent[Sources] = None
    model_failed: OrAbsent[Count] = None
    non_finite_logits: OrAbsent[Count] = None
    series_found: OrAbsent[Count] = None
    series_selected: OrAbsent[Count] = None
    source: OrAbsent[Literal["predictions_file", "network_parts"]] = None
    fit: Count
    evaluation: Count
