"""One group's results in ``evaluation.json``: size, temperature, metrics with intervals, reliability."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from sitecal.results._codec import Record
from sitecal.results._fields import Constraint, OrAbsent
from sitecal.results._kinds import (
    Count,
    IntervalMethod,
    IntervalNote,
    Positive,
    Share,
    TemperatureNote,
    TemperatureSource,
)

__all__ = [
    "BootstrapSummary",
    "GroupResult",
    "Interval",
    "MetricResult",
    "Note",
    "Reliability",
    "ReliabilityCurve",
    "TemperatureInterval",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval(Record):
    """Point estimate on the evaluation studies and the bootstrap interval [low, high]."""

    estimate: float
    low: float
    high: float


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricResult(Record):
    """A metric before and after calibration, and the paired change after - before."""

    before: Interval
    after: Interval
    difference: Interval


@dataclass(frozen=True, slots=True, kw_only=True)
class TemperatureInterval(Record):
    """A fitted temperature and its bootstrap interval (patients of the fit rows resampled).

    Attributes
    ----------
    estimate, low, high : float
        The temperature and the interval's ends (> 0).
    n_fit : int
        Fit studies it came from.
    """

    estimate: Positive
    low: Positive
    high: Positive
    n_fit: Count


@dataclass(frozen=True, slots=True, kw_only=True)
class Note(Record):
    """Why a temperature has no interval: a code the report words.

    Attributes
    ----------
    note : {"no_interval_shrunk"}
        A shrunk temperature's penalty weight is chosen from the data, which the bootstrap does not
        repeat; its after-calibration intervals hold T fixed.
    """

    note: TemperatureNote


@dataclass(frozen=True, slots=True, kw_only=True)
class ReliabilityCurve(Record):
    """Reliability bins: every bin kept, empty ones included (their confidence and accuracy are null).

    Attributes
    ----------
    binning : {"width", "mass"}
        Equal-width or equal-mass bins.
    n : int
        Studies.
    n_bins : int
        Bins.
    bin_edges : tuple of float
        ``n_bins + 1`` edges; bin ``b`` is ``(edges[b], edges[b + 1]]``.
    confidence : tuple of float or None
        Mean top-label confidence per bin.
    accuracy : tuple of float or None
        Share of correct predictions per bin.
    count : tuple of int
        Studies per bin.
    """

    binning: Literal["width", "mass"]
    n: Count
    n_bins: Annotated[int, Constraint(minimum=1)]
    bin_edges: tuple[Share, ...]
    confidence: tuple[Share | None, ...]
    accuracy: tuple[Share | None, ...]
    count: tuple[Count, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reliability(Record):
    """Reliability curves before and after calibration (``ece.n_bins`` equal-width bins)."""

    before: ReliabilityCurve
    after: ReliabilityCurve


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupResult(Record):
    """One group (or all studies) of the evaluation split: its size, temperature and every metric.

    Rows with ``temperature_source`` (the calibration groups, or 'overall' with one global temperature)
    carry the temperature and its interval (a note for a shrunk temperature); other rows carry neither and
    are never refitted.

    Attributes
    ----------
    attribute : str
        The subgroup attribute, or 'overall'.
    group : str
        The group's value (normalised; 'unknown' where the tag was absent).
    n : int
        Evaluation studies in the group.
    n_patients : int
        Distinct patients among them (the bootstrap resamples patients).
    small : bool
        ``n < min_group_size``: flagged, not judged.
    temperature : float or None
        The temperature applied to this group's studies after calibration; null on rows that are not a
        calibration group (each of their studies gets its own calibration group's temperature), including
        'overall' when there is a calibration attribute.
    temperature_interval : TemperatureInterval or Note or None
        The temperature's interval where temperature_source is present; a note (code
        'no_interval_shrunk') for a shrunk temperature; else null.
    refit : bool
        Whether the after-calibration intervals of this row refit the temperature in every resample.
    metrics : Mapping of str to MetricResult
        Each metric of the document's 'metrics' list.
    reliability : Reliability or None
        Reliability curves before and after calibration; absent: not recorded.
    temperature_source : str or None
        'own' fit, 'global_fallback' (too few fit studies: the global temperature), 'shrunk' toward the
        global one, 'global' (one temperature for all), or 'empirical_bayes' (its own fit shrunk toward
        the REML mean of all groups; its interval repeats the shrinkage in every resample); absent on
        rows that are not a calibration group, and under another method than temperature scaling.
    calibration_source : str or None
        Under another method than temperature scaling (the document's ``calibration_method``), on the
        calibration groups: 'own' fit, 'global_fallback' (too few fit studies: the global fit) or 'global'
        (one fit for all); ``refit`` then says whether the method was refitted in every resample.
    membership : str or None
        A fingerprint of the group's evaluation rows (``sitecal.evaluation.membership_digest``: 16 hex
        digits of a hash of their positions, no identifier): equal across groups of different attributes
        means the same studies, which the report shows once. Absent in documents written before it.
    """

    attribute: str
    group: str
    n: Count
    n_patients: Count
    small: bool
    temperature: Positive | None
    temperature_interval: TemperatureInterval | Note | None
    refit: bool
    metrics: Mapping[str, MetricResult]
    reliability: OrAbsent[Reliability] = None
    temperature_source: OrAbsent[TemperatureSource] = None
    calibration_source: OrAbsent[Literal["own", "global_fallback", "global"]] = None
    membership: OrAbsent[Annotated[str, Constraint(pattern="^[0-9a-f]{16}$")]] = None

    def _problems(self) -> Iterator[tuple[str, str]]:
        if self.calibration_source is not None:
            if self.temperature_source is not None or self.temperature is not None:
                yield ".calibration_source", "expected no temperature on a row with calibration_source"
            elif self.temperature_interval is not None:
                yield ".temperature_interval", "expected null on a row with calibration_source"
            return
        if self.temperature_source is None:
            if self.temperature is not None:
                yield ".temperature", "expected null on a row without temperature_source"
            elif self.temperature_interval is not None:
                yield ".temperature_interval", "expected null on a row without temperature_source"
            elif self.refit:
                yield ".refit", "expected false on a row without temperature_source"
            return
        if self.temperature is None:
            yield (
                ".temperature",
                f"expected a number on a row with temperature_source {self.temperature_source!r}",
            )
        elif self.temperature_source == "shrunk":
            if not isinstance(self.temperature_interval, Note):
                yield ".temperature_interval", "expected a note: a shrunk temperature has no interval"
            elif self.refit:
                yield ".refit", "expected false: a shrunk temperature is not refitted"
        elif not isinstance(self.temperature_interval, TemperatureInterval):
            yield ".temperature_interval", "expected the temperature's interval (estimate, low, high, n_fit)"


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapSummary(Record):
    """A bootstrap interval with what it was computed from; null ends where undefined (see ``note``).

    Attributes
    ----------
    estimate, low, high : float or None
        The statistic and the interval's ends.
    level : float
        Two-sided confidence level.
    method : {"percentile", "bca"}
        How the interval is read from the replicates.
    n_resamples, seed : int
        The resampling.
    n : int
        Studies.
    n_clusters : int
        Patients resampled.
    n_strata : int
        Strata resampled independently.
    standard_error : float or None
        Standard deviation of the replicates.
    bias : float or None
        Mean of the replicates minus the estimate.
    note : str or None
        Null, or a code saying why the interval is degenerate or undefined (``IntervalNote``: e.g.
        'replicates_equal_one_cluster', a zero-width interval).
    """

    estimate: float | None
    low: float | None
    high: float | None
    level: Annotated[float, Constraint(exclusive_minimum=0, exclusive_maximum=1)]
    method: IntervalMethod
    n_resamples: Annotated[int, Constraint(minimum=1)]
    seed: int
    n: Count
    n_clusters: Count
    n_strata: Count
    standard_error: Annotated[float, Constraint(minimum=0)] | None
    bias: float | None
    note: IntervalNote | None
