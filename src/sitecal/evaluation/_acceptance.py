"""Acceptance: each protocol criterion judged on the stored group intervals.

A group **passes** when its whole interval clears the criterion's margin, **fails** when its whole interval
lies beyond it, and is **inconclusive** when the interval straddles the margin (the data are not enough to
tell). A small group, or one with no finite interval, is **insufficient data**. Each end of a two-sided
interval at level L is a one-sided bound at (1 + L) / 2: ``below: 0.05`` judged on a 95 % interval
passes a group whose one-sided 97.5 % upper bound is below 0.05.

>>> from sitecal.protocol import AcceptanceCriterion
>>> c = AcceptanceCriterion(id="slope", metric="slope", within=(0.8, 1.25))
>>> [group_verdict(c, 1.0, lo, hi) for lo, hi in [(0.9, 1.1), (0.6, 0.7), (0.7, 1.1)]]
['pass', 'fail', 'inconclusive']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sitecal.evaluation._groups import OVERALL
from sitecal.metrics.registry import metric as registry_metric
from sitecal.protocol import AcceptanceCriterion
from sitecal.results import Criterion, CriterionResult, Evaluation, GroupResult, Recalibration, Verdict

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "INSUFFICIENT",
    "PASS",
    "combine",
    "group_verdict",
    "judge",
    "margin_verdict",
    "verdict_problems",
]

PASS: Final = "pass"
FAIL: Final = "fail"
INCONCLUSIVE: Final = "inconclusive"
INSUFFICIENT: Final = "insufficient data"


def group_verdict(criterion: AcceptanceCriterion, estimate: float, low: float, high: float) -> Verdict:
    """One group's verdict from its estimate and interval ``[low, high]`` against the criterion's margin.

    >>> from sitecal.protocol import AcceptanceCriterion
    >>> below = AcceptanceCriterion(id="ece", metric="ece_debiased", below=0.05)
    >>> [group_verdict(below, 0.03, lo, hi) for lo, hi in [(0.01, 0.04), (0.06, 0.09), (0.02, 0.07)]]
    ['pass', 'fail', 'inconclusive']
    >>> group_verdict(below, 0.03, float("nan"), 0.04)
    'insufficient data'
    """
    return margin_verdict(*criterion.margin, estimate, low, high)


def margin_verdict(
    lower: float | None, upper: float | None, estimate: float, low: float, high: float
) -> Verdict:
    """The verdict of an estimate and its interval ``[low, high]`` against the margin ``(lower, upper)``.

    >>> margin_verdict(None, 0.05, 0.03, 0.01, 0.04), margin_verdict(0.8, 1.25, 1.0, 0.7, 1.1)
    ('pass', 'inconclusive')
    """
    if not all(math.isfinite(v) for v in (estimate, low, high)):
        return INSUFFICIENT
    # pass: the whole interval lies strictly inside the open side(s) of the margin
    clears = (lower is None or low > lower) and (upper is None or high < upper)
    if clears:
        return PASS
    # fail: the whole interval lies at or beyond one end of the margin
    beyond = (lower is not None and high <= lower) or (upper is not None and low >= upper)
    return FAIL if beyond else INCONCLUSIVE


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """The verdict of several: fail, else inconclusive, else insufficient data, else pass.

    Nothing judged is insufficient data.

    >>> combine(["pass", "inconclusive", "pass"]), combine(["inconclusive", "fail"]), combine([])
    ('inconclusive', 'fail', 'insufficient data')
    """
    seen = list(verdicts)
    for verdict in (FAIL, INCONCLUSIVE, INSUFFICIENT):
        if verdict in seen:
            return verdict
    return PASS if seen else INSUFFICIENT


def _interval(group: Any, criterion: AcceptanceCriterion) -> tuple[float, float, float]:
    """``(estimate, low, high)`` of the criterion's metric at its stage in one group; NaN where absent.

    A group result holds ``metrics[name].<stage>``; a recalibration group ``<stage>.<name>``.
    """
    if registry_metric(criterion.metric).recalibration:
        value = getattr(getattr(group, criterion.stage), criterion.metric)
    else:
        value = getattr(group.metrics[criterion.metric], criterion.stage)
    estimate, low, high = (
        math.nan if v is None else float(v) for v in (value.estimate, value.low, value.high)
    )
    return estimate, low, high


def judge(
    criterion: AcceptanceCriterion,
    overall: GroupResult,
    results: Mapping[str, Sequence[GroupResult]],
    level: float,
    recalibration: Recalibration | None = None,
) -> Criterion:
    """The criterion judged on every group of its scope (the overall row for scope 'overall').

    A criterion on slope, intercept or O:E (the registry's ``recalibration`` metrics) is judged on the
    recalibration analysis's estimates and intervals of each group, at that analysis's level.
    """
    if registry_metric(criterion.metric).recalibration:
        if recalibration is None:
            raise ValueError(
                f"criterion {criterion.id!r} on {criterion.metric} needs the recalibration analysis"
            )
        level = recalibration.level
        groups: Sequence[Any] = (
            [recalibration.overall]
            if criterion.scope == OVERALL
            else list(recalibration.subgroups.get(criterion.scope, ()))
        )
    else:
        groups = [overall] if criterion.scope == OVERALL else list(results.get(criterion.scope, ()))
    rows = []
    for g in groups:
        estimate, low, high = _interval(g, criterion)
        verdict = INSUFFICIENT if g.small else group_verdict(criterion, estimate, low, high)
        finite = [v if math.isfinite(v) else None for v in (estimate, low, high)]  # null, never NaN
        rows.append(
            CriterionResult(
                group=g.group, n=g.n, estimate=finite[0], low=finite[1], high=finite[2], verdict=verdict
            )
        )
    lower, upper = criterion.margin
    return Criterion(
        id=criterion.id,
        description=criterion.description or None,  # the protocol's words; else the report words it
        metric=criterion.metric,
        stage=criterion.stage,
        rule=criterion.rule,
        lower_margin=lower,
        upper_margin=upper,
        level=level,
        scope=criterion.scope,
        results=tuple(rows),
        verdict=combine(r.verdict for r in rows) if rows else INSUFFICIENT,
    )


def verdict_problems(evaluation: Evaluation) -> list[str]:
    """Where a stored evaluation's verdicts are not those its own numbers give; empty when all agree.

    Each group's verdict is judged again from its stored estimate, interval and n against the criterion's
    stored margins (a group under ``min_group_size`` is insufficient data), each criterion's from its
    groups' and the document's from its criteria's, as :func:`judge` and :func:`combine` do. ``sitecal
    report`` refuses a document with any problem: a verdict on the cover must be the one its tables give.
    """
    problems = []
    for criterion in evaluation.acceptance:
        for row in criterion.results:
            values = [math.nan if v is None else float(v) for v in (row.estimate, row.low, row.high)]
            expected = (
                INSUFFICIENT
                if row.n < evaluation.min_group_size
                else margin_verdict(criterion.lower_margin, criterion.upper_margin, *values)
            )
            if row.verdict != expected:
                problems.append(
                    f"$.acceptance[{criterion.id}] group {row.group!r}: verdict {row.verdict!r}, but its "
                    f"estimate and interval give {expected!r}"
                )
        expected = combine(r.verdict for r in criterion.results) if criterion.results else INSUFFICIENT
        if criterion.verdict != expected:
            problems.append(
                f"$.acceptance[{criterion.id}]: verdict {criterion.verdict!r}, but its groups give "
                f"{expected!r}"
            )
    overall = combine(c.verdict for c in evaluation.acceptance) if evaluation.acceptance else PASS
    if evaluation.verdict != overall:
        problems.append(f"$.verdict: {evaluation.verdict!r}, but its criteria give {overall!r}")
    return problems
