"""The recalibration methods compared with temperature scaling per group (``evaluation.json``'s part)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, TypeAlias

from sitecal.results._codec import Record, check_keys
from sitecal.results._fields import Constraint, OrAbsent
from sitecal.results._groups import BootstrapSummary
from sitecal.results._kinds import Count

__all__ = ["ComparedGroup", "ComparedMeasure", "ComparisonFinding", "MethodComparison"]

#: What the interval of ``method - temperature`` (lower is better) says: wholly below 0 (``better``),
#: wholly above 0 (``worse``), straddling 0 (``no_clear_difference``), or undefined (``no_interval``).
ComparisonFinding: TypeAlias = Literal["better", "worse", "no_clear_difference", "no_interval"]
#: Which fit rows a group's methods were fitted on: its own, or every fit row (a group below
#: ``calibration.min_group_size``, as the temperature's global fallback).
FitRows: TypeAlias = Literal["own", "global"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparedMeasure(Record):
    """One held-out measure after one method, and its paired difference from temperature scaling.

    Attributes
    ----------
    value : BootstrapSummary
        The measure on the group's evaluation studies, refit-bootstrap interval.
    difference : BootstrapSummary, optional
        This method minus temperature scaling, on the same resamples (absent for temperature itself).
    finding : str, optional
        What the difference's interval says (``ComparisonFinding``); absent for temperature itself.
    """

    value: BootstrapSummary
    difference: OrAbsent[BootstrapSummary] = None
    finding: OrAbsent[ComparisonFinding] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparedGroup(Record):
    """Every method on one group: fitted on its fit studies, measured on its evaluation studies.

    Attributes
    ----------
    attribute : str
        ``"overall"`` (every study, the global fits) or the calibration attribute (calibration.per).
    group : str
    n_fit, n_evaluation : int
        Studies the methods were fitted on and measured on.
    fit_rows : {"own", "global"}
        ``global``: the group had fewer than ``min_group_size`` fit studies, so every method was fitted
        on every fit study (the temperature's global fallback, for every method alike).
    small : bool
        Fewer evaluation studies than evaluation.min_group_size: shown, not to be read as a finding.
    methods : Mapping of str to Mapping of str to ComparedMeasure
        Per method (the document's ``methods``), per measure (its ``metrics``).
    """

    attribute: str
    group: str
    n_fit: Count
    n_evaluation: Annotated[int, Constraint(minimum=1)]
    fit_rows: FitRows
    small: bool
    methods: Mapping[str, Mapping[str, ComparedMeasure]]


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodComparison(Record):
    """Recalibration methods against temperature scaling, per calibration group, with paired intervals.

    Every method is fitted on the group's fit studies (the same small-group rule for all: below
    ``min_group_size`` fit studies, on every fit study) and measured on its evaluation studies. Each
    resample draws the fit and the evaluation patients once and refits every method on the same draw, so
    a difference from temperature scaling is paired and includes both fits' uncertainty.

    Attributes
    ----------
    reference : {"temperature"}
        The method every other is compared with.
    methods : tuple of str
        The reference first, then calibration.compare's methods in protocol order.
    metrics : tuple of str
        Held-out measures, all lower-is-better.
    interval_method : {"percentile"}
        Percentile intervals, whatever the protocol's bootstrap method (BCa would need every method
        refitted without each patient in turn).
    level : float
    n_resamples, seed : int
    min_group_size : int
        calibration.min_group_size.
    options : Mapping of str to Mapping of str to float
        Per method, the numeric options its fits used (e.g. histogram ``n_bins``, ODIR penalties).
    groups : tuple of ComparedGroup
        ``overall`` first, then the calibration groups in sorted order.
    """

    reference: Literal["temperature"]
    methods: Annotated[tuple[str, ...], Constraint(min_items=2)]
    metrics: Annotated[tuple[str, ...], Constraint(min_items=1)]
    interval_method: Literal["percentile"]
    level: Annotated[float, Constraint(exclusive_minimum=0, exclusive_maximum=1)]
    n_resamples: Annotated[int, Constraint(minimum=1)]
    seed: int
    min_group_size: Annotated[int, Constraint(minimum=1)]
    options: Mapping[str, Mapping[str, float]]
    groups: tuple[ComparedGroup, ...]

    def _problems(self) -> Iterator[tuple[str, str]]:
        if self.methods[0] != self.reference:
            yield ".methods[0]", f"expected the reference {self.reference!r}, got {self.methods[0]!r}"
        for i, group in enumerate(self.groups):
            path = f".groups[{i}].methods"
            yield from check_keys(group.methods, self.methods, path=path, what="document's methods")
            for method, measures in group.methods.items():
                yield from check_keys(
                    measures, self.metrics, path=f"{path}.{method}", what="document's metrics"
                )
                for metric, measure in measures.items():
                    paired = measure.difference is not None and measure.finding is not None
                    if paired == (method == self.reference):
                        want = "no difference" if method == self.reference else "a difference and a finding"
                        yield f"{path}.{method}.{metric}", f"expected {want}"
