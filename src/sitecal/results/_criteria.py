"""The go-live criteria of ``evaluation.json``: each criterion judged per group, and the study-size planning.

:class:`Criterion` holds one acceptance criterion with a :class:`CriterionResult` per group of its scope;
a judged group's result may carry its planned :class:`StudySize`, and :class:`PlanningSettings` records
how the sizes were planned. Part of :class:`~sitecal.results.Evaluation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from sitecal.results._codec import Record
from sitecal.results._fields import Constraint, OrAbsent
from sitecal.results._kinds import Count, Name, Rule, Share, Stage, Verdict

__all__ = ["Criterion", "CriterionResult", "PlanningSettings", "StudySize"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanningSettings(Record):
    """How each judged group's study size was planned (the document's ``planning``).

    For every judged group of every criterion, groups of each size were drawn from the group's own
    probabilities at the criterion's stage, each label drawn from its study's probabilities (a calibrated
    model by assumption), and judged with the run's rule on intervals computed as the run computes them
    (``n_resamples`` resamples each). The temperature is taken as known.

    Attributes
    ----------
    target_power : float
        The pass rate a planned size must reach.
    n_simulations : int
        Simulated groups per size.
    n_resamples : int
        Bootstrap resamples of each simulated group's interval.
    sizes : tuple of int
        The sizes a planned size is chosen from (a bisection simulates only some of them).
    seed : int
        Seed of the simulations (the bootstrap's seed).
    """

    target_power: Share
    n_simulations: Annotated[int, Constraint(minimum=1)]
    n_resamples: Annotated[int, Constraint(minimum=1)]
    sizes: Annotated[tuple[int, ...], Constraint(min_items=1)]
    seed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StudySize(Record):
    """Evaluation studies a group would need for the planned chance to pass its criterion.

    Attributes
    ----------
    needed : int or None
        The smallest planned size whose simulated pass rate reached the target; null when none did
        (more than the largest planned size is needed).
    pass_rate : float
        The simulated pass rate at ``needed``, or at the largest planned size when ``needed`` is null.
    """

    needed: Count | None
    pass_rate: Share


@dataclass(frozen=True, slots=True, kw_only=True)
class CriterionResult(Record):
    """One group judged by a criterion: its estimate and interval, and the verdict they give.

    Attributes
    ----------
    estimate, low, high : float or None
        The group's estimate of the criterion's metric at its stage and the ends of its interval (the
        evaluation's bootstrap interval, or the recalibration analysis's for slope, intercept and O:E);
        null where not estimable (then the verdict is 'insufficient data').
    verdict : str
        'pass' when the whole interval clears the margin, 'fail' when it lies wholly beyond it,
        'inconclusive' when it straddles it, 'insufficient data' for a small group or no interval.
    study_size : StudySize, optional
        The planned study size of a judged group (absent for an unjudged group, or when planning is off).
    """

    group: str
    n: Count
    estimate: float | None
    low: float | None
    high: float | None
    verdict: Verdict
    study_size: OrAbsent[StudySize] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Criterion(Record):
    """One acceptance criterion: the metric at the stage, its interval judged against a margin.

    Attributes
    ----------
    description : str or None
        The protocol's own description of the criterion; null where the protocol gives none (the report
        then words the criterion from its fields).
    rule : {"below", "above", "within"}
        'below': the value must lie below ``upper_margin``; 'above': above ``lower_margin``; 'within':
        between the two (an equivalence margin).
    lower_margin, upper_margin : float or None
        The margin's ends; null for the side a rule does not bound.
    level : float
        The two-sided level of the intervals judged; each end is a one-sided bound at (1 + level) / 2.
    scope : str
        'overall' or a subgroup attribute.
    results : tuple of CriterionResult
        One row per group of the scope; empty when the scope is not a reported subgroup.
    verdict : str
        'fail' if any group fails; else 'inconclusive' if any is inconclusive; else 'insufficient data'
        if any could not be judged or there is no group; else 'pass'.
    """

    id: Name
    description: str | None
    metric: str
    stage: Stage
    rule: Rule
    lower_margin: float | None
    upper_margin: float | None
    level: Share
    scope: str
    results: tuple[CriterionResult, ...]
    verdict: Verdict
