"""``evaluation.json``: every number of a validation report, as one typed document."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from sitecal.results._characteristics import Characteristics, HighestConfidenceErrors
from sitecal.results._codec import Record, check_keys
from sitecal.results._comparison import MethodComparison
from sitecal.results._criteria import Criterion, CriterionResult, PlanningSettings, StudySize
from sitecal.results._fields import Constraint, OrAbsent
from sitecal.results._flow import CohortFlow
from sitecal.results._groups import BootstrapSummary, GroupResult, TemperatureInterval
from sitecal.results._kinds import (
    Count,
    DisparityNote,
    IntervalMethod,
    Name,
    Sha256,
    Share,
    Verdict,
    WarningCode,
)
from sitecal.results._sensitivity import Sensitivity

__all__ = [
    "BootstrapSettings",
    "Criterion",
    "CriterionResult",
    "Disparity",
    "DisparityStages",
    "EceSettings",
    "Evaluation",
    "GroupWarning",
    "NotCompared",
    "PlanningSettings",
    "ProtocolRef",
    "SplitSettings",
    "StudySize",
]

#: A deployed calibration other than temperature scaling (calibration.method).
OtherMethod = Literal["vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"]
_Level = Annotated[float, Constraint(exclusive_minimum=0, exclusive_maximum=1)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolRef(Record):
    """The protocol the run followed.

    Attributes
    ----------
    name : str
        The protocol's name.
    sha256 : str
        SHA-256 of the protocol file's bytes, as recorded in provenance.json.
    """

    name: Name
    sha256: Sha256


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitSettings(Record):
    """The seeded, stratified patient-level split: a temperature is never evaluated where it was fitted.

    Attributes
    ----------
    method : {"patient", "crossfit"}
        ``patient``: one fit part and one evaluation part, all studies of a patient on one side.
        ``crossfit``: patients in ``folds`` folds; each fold evaluated with temperatures fitted on the
        others, so every study is evaluated once (``n_fit`` = ``n_evaluation`` = all studies).
    fit_fraction : float or None
        Share of each stratum's patients in the fit part; null under cross-fitting.
    folds : int or None
        Number of folds under cross-fitting; null for one split.
    stratify : str or None
        Subgroup whose groups are split separately; null: not stratified.
    """

    method: Literal["patient", "crossfit"]
    fit_fraction: _Level | None
    folds: Annotated[int, Constraint(minimum=2)] | None
    seed: int
    stratify: str | None
    n_fit: Count
    n_evaluation: Count
    patients_fit: Count
    patients_evaluation: Count


@dataclass(frozen=True, slots=True, kw_only=True)
class EceSettings(Record):
    """The ECE reported as 'ece' (and drawn in the reliability curves).

    Attributes
    ----------
    binning : {"width"}
        Equal-width bins on [0, 1].
    kind : {"top-label"}
        Confidence and correctness of the predicted class.
    edges : {"(lo, hi]"}
        Bins are open below and closed above; a confidence of 0 falls in the first bin.
    """

    n_bins: Annotated[int, Constraint(minimum=1)]
    binning: Literal["width"]
    kind: Literal["top-label"]
    edges: Literal["(lo, hi]"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapSettings(Record):
    """How every interval was computed: patients are resampled (clusters), within strata.

    Attributes
    ----------
    level : float
        Two-sided confidence level.
    cluster : {"patient"}
        The resampled unit.
    strata : str or None
        Subgroup whose groups are resampled separately; null: not stratified.
    refit : bool
        Whether the temperature is refitted in every resample, so that the after-calibration intervals of
        the calibration groups include its uncertainty.
    refit_scope : str or None
        Rows whose after-calibration intervals are refitted: the calibration attribute's groups, or
        'overall' for a global temperature; null without refit.
    """

    n_resamples: Annotated[int, Constraint(minimum=1)]
    level: _Level
    method: IntervalMethod
    seed: int
    cluster: Literal["patient"]
    strata: str | None
    refit: bool
    refit_scope: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Disparity(Record):
    """Gaps of one metric between the groups of one attribute, every group on the same patient resamples.

    Attributes
    ----------
    groups : tuple of str
        Groups compared (at least min_group_size studies), sorted.
    too_small : Mapping of str to int
        Groups left out of the comparison, with their study counts.
    per_group : Mapping of str to BootstrapSummary
        Each compared group's metric.
    range : BootstrapSummary
        Highest minus lowest group value (the spread; which groups are extreme may change between
        resamples).
    highest : str
        Group with the highest point estimate.
    lowest : str
        Group with the lowest point estimate.
    versus_rest : Mapping of str to BootstrapSummary
        Each compared group minus all other studies (small groups included in the rest): its own
        interval, with no multiplicity control and the metric's size bias left in.
    expected_gap : Mapping of str to float
        The gap a random set of the cohort's patients of the group's size shows (mean over the
        permutations): not 0 for a metric biased by group size, as the plug-in ECE.
    adjusted_p : Mapping of str to float
        Max-T adjusted p-value of the group's gap against that size-matched reference, over all the
        attribute's compared groups (sitecal.stats.size_matched_flags).
    flagged : Mapping of str to bool
        The group's gap to the rest differs from the size-matched reference after the multiplicity
        control: ``adjusted_p <= 1 - level``.
    n_permutations : int
        Permutations of whole patients between the groups.
    refit : bool, optional
        True: the intervals of ``per_group``, ``range`` and ``versus_rest`` (after calibration) refit every
        temperature in every resample, so they include its uncertainty; the flags still hold it fixed.
        Absent: the temperatures were held fixed.
    """

    metric: str
    groups: Annotated[tuple[str, ...], Constraint(min_items=2)]
    too_small: Mapping[str, Count]
    per_group: Mapping[str, BootstrapSummary]
    range: BootstrapSummary
    highest: str
    lowest: str
    versus_rest: Mapping[str, BootstrapSummary]
    expected_gap: Mapping[str, float]
    adjusted_p: Mapping[str, Share]
    flagged: Mapping[str, bool]
    n_permutations: Annotated[int, Constraint(minimum=1)]
    refit: OrAbsent[Literal[True]] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NotCompared(Record):
    """Why the groups of an attribute were not compared, with the numbers the report's sentence needs.

    Attributes
    ----------
    note : {"too_few_groups"}
        Fewer than two groups have at least min_group_size evaluation studies.
    min_group_size : int
        The minimum.
    sizes : Mapping of str to int
        Evaluation studies of every group of the attribute.
    """

    note: DisparityNote
    min_group_size: Annotated[int, Constraint(minimum=1)]
    sizes: Mapping[str, Count]


@dataclass(frozen=True, slots=True, kw_only=True)
class DisparityStages(Record):
    """One metric's disparity before and after calibration; why not, where it cannot be compared."""

    before: Disparity | NotCompared
    after: Disparity | NotCompared


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupWarning(Record):
    """A point to note about one group: a code and the numbers and names the report's sentence needs.

    Attributes
    ----------
    code : {"small_group"}
        The group has fewer than min_group_size evaluation studies: its intervals are wide and it is not
        judged.
    attribute : str
        The subgroup attribute (its display label is in the document's attribute_labels).
    group : str
        The group's value.
    n : int
        Its evaluation studies.
    min_group_size : int
        The minimum.
    """

    code: WarningCode
    attribute: str
    group: str
    n: Count
    min_group_size: Annotated[int, Constraint(minimum=1)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation(Record):
    """Every number of a sitecal validation report: ``evaluation.json`` of one run.

    Temperatures are fitted on the fit split and every metric is measured on the evaluation split,
    before and after calibration, with patient-level bootstrap intervals (paired, so the change has its
    own interval). Non-finite numbers are never written: where an interval of a disparity is undefined it
    is null and its note says why. The document holds no sentence: where something is missing, left out or
    not judged it stores a code (:mod:`sitecal.results._kinds`) with the numbers and names the report needs
    to word it; the only free texts are the protocol's own (criterion descriptions, attribute labels) and
    the names of classes, groups and cohort exclusion reasons.

    Attributes
    ----------
    class_names : tuple of str
        The model's classes, in logit order.
    calibration_attribute : str or None
        Subgroup with one temperature per group (calibration.per); null: one global temperature.
    global_temperature_interval : TemperatureInterval
        The global temperature, fitted on every fit study, with its bootstrap interval.
    min_group_size : int
        Groups with fewer evaluation studies are flagged small: reported, with a warning, not judged.
    metrics : tuple of str
        Metrics measured on every group, in protocol order; each group's 'metrics' has these keys.
    overall : GroupResult
        All studies of the evaluation split.
    subgroups : Mapping of str to tuple of GroupResult
        Per reported subgroup attribute, its groups in sorted order ('unknown' last).
    attribute_labels : Mapping of str to str
        Display label of each reported subgroup attribute.
    disparities : Mapping of str to Mapping of str to DisparityStages
        Per reported subgroup attribute and disparity metric: gaps between its groups with their own
        paired bootstrap intervals.
    acceptance : tuple of Criterion
        The protocol's go-live criteria, in protocol order.
    verdict : str
        'fail' if any criterion fails; else 'inconclusive' if any is inconclusive; else 'insufficient
        data' if any could not be judged; else 'pass' (also with no criteria).
    warnings : tuple of GroupWarning
        Points to note, one per small subgroup row (code 'small_group').
    sensitivity, characteristics, highest_confidence_errors : optional
        Absent in documents written before sitecal recorded them.
    planning : PlanningSettings, optional
        How the judged groups' study sizes were planned; absent when planning is off (or in documents
        written before sitecal planned them).
    calibration_method : str, optional
        The calibration deployed and evaluated after calibration when it is not temperature scaling
        (calibration.method: vector, matrix, dirichlet, histogram, isotonic or beta); absent: temperature
        scaling. The global temperature interval is then the temperature's, for reference only.
    method_comparison : MethodComparison, optional
        Recalibration methods against temperature scaling per calibration group; absent when
        calibration.compare lists none.
    """

    SCHEMA_VERSION: ClassVar[int] = 4
    FILE_NAME: ClassVar[str] = "evaluation.json"
    HINT: ClassVar[str] = (
        "evaluation.json is written by `sitecal run PROTOCOL`: write it again, or restore the unedited file"
    )
    VERSION_HINT: ClassVar[str] = (
        "Render this run with the sitecal version that made it (provenance.json names it), or run the "
        "protocol again with this sitecal (`sitecal run PROTOCOL`)"
    )

    protocol: ProtocolRef
    class_names: Annotated[tuple[str, ...], Constraint(min_items=2)]
    cohort_flow: CohortFlow
    split: SplitSettings
    calibration_attribute: str | None
    global_temperature_interval: TemperatureInterval
    ece: EceSettings
    bootstrap: BootstrapSettings
    min_group_size: Annotated[int, Constraint(minimum=1)]
    metrics: Annotated[tuple[str, ...], Constraint(min_items=1)]
    overall: GroupResult
    subgroups: Mapping[str, tuple[GroupResult, ...]]
    attribute_labels: Mapping[str, str]
    disparities: Mapping[str, Mapping[str, DisparityStages]]
    acceptance: tuple[Criterion, ...]
    verdict: Verdict
    warnings: tuple[GroupWarning, ...]
    sensitivity: OrAbsent[Sensitivity] = None
    characteristics: OrAbsent[Characteristics] = None
    highest_confidence_errors: OrAbsent[HighestConfidenceErrors] = None
    planning: OrAbsent[PlanningSettings] = None
    method_comparison: OrAbsent[MethodComparison] = None
    calibration_method: OrAbsent[OtherMethod] = None

    def _problems(self) -> Iterator[tuple[str, str]]:
        if self.overall.attribute != "overall":
            yield ".overall.attribute", f'expected "overall", got {self.overall.attribute!r}'
        rows = [(".overall", self.overall)] + [
            (f".subgroups.{name}[{i}]", row)
            for name, groups in self.subgroups.items()
            for i, row in enumerate(groups)
        ]
        for path, row in rows:
            yield from check_keys(
                row.metrics, self.metrics, path=f"{path}.metrics", what="document's metrics"
            )
        for i, warning in enumerate(self.warnings):
            if warning.attribute not in self.subgroups:
                reported = ", ".join(self.subgroups) or "none"
                problem = f"{warning.attribute!r} is not a reported subgroup ({reported})"
                yield f".warnings[{i}].attribute", problem
