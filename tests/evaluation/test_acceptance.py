"""The acceptance rules, pinned on hand-built intervals: pass, fail, inconclusive and insufficient data.

A group passes when its whole interval clears the margin, fails when it lies wholly beyond it, and is
inconclusive when it straddles it; a small group or a missing interval is insufficient data. The
criterion takes the worst of its groups (fail > inconclusive > insufficient data > pass).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from sitecal.evaluation import FAIL, INCONCLUSIVE, INSUFFICIENT, PASS
from sitecal.evaluation._acceptance import combine, group_verdict, judge
from sitecal.protocol import AcceptanceCriterion

NAN = math.nan
BELOW = AcceptanceCriterion(id="ece-below", metric="ece_debiased", below=0.05)
ABOVE = AcceptanceCriterion(id="acc-above", metric="accuracy", above=0.7)
WITHIN = AcceptanceCriterion(id="slope-within", metric="ece_debiased", within=(0.8, 1.25))


@pytest.mark.parametrize(
    ("criterion", "estimate", "low", "high", "verdict"),
    [
        # below 0.05: the upper end decides a pass, the lower end a fail
        (BELOW, 0.02, 0.01, 0.049, PASS),
        (BELOW, 0.03, 0.01, 0.05, INCONCLUSIVE),  # the upper end on the margin does not clear it
        (BELOW, 0.04, 0.02, 0.08, INCONCLUSIVE),
        (BELOW, 0.07, 0.05, 0.09, FAIL),  # the lower end on the margin: wholly at or beyond it
        (BELOW, 0.09, 0.06, 0.12, FAIL),
        # above 0.7
        (ABOVE, 0.8, 0.71, 0.85, PASS),
        (ABOVE, 0.72, 0.65, 0.78, INCONCLUSIVE),
        (ABOVE, 0.6, 0.55, 0.7, FAIL),
        # within [0.8, 1.25]: both ends must lie inside to pass; wholly outside on either side fails
        (WITHIN, 1.0, 0.85, 1.2, PASS),
        (WITHIN, 0.9, 0.75, 1.1, INCONCLUSIVE),
        (WITHIN, 1.2, 1.1, 1.4, INCONCLUSIVE),
        (WITHIN, 1.0, 0.7, 1.4, INCONCLUSIVE),  # wider than the margin: straddles both ends
        (WITHIN, 0.6, 0.5, 0.79, FAIL),
        (WITHIN, 1.5, 1.25, 1.7, FAIL),
        # no interval to judge
        (BELOW, 0.02, NAN, 0.04, INSUFFICIENT),
        (WITHIN, NAN, NAN, NAN, INSUFFICIENT),
        (ABOVE, 0.8, 0.75, math.inf, INSUFFICIENT),
    ],
)
def test_each_rule_on_hand_built_intervals(
    criterion: AcceptanceCriterion, estimate: float, low: float, high: float, verdict: str
) -> None:
    assert group_verdict(criterion, estimate, low, high) == verdict


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([PASS, PASS], PASS),
        ([PASS, INSUFFICIENT], INSUFFICIENT),
        ([PASS, INCONCLUSIVE, INSUFFICIENT], INCONCLUSIVE),
        ([INCONCLUSIVE, FAIL, PASS], FAIL),
        ([], INSUFFICIENT),
    ],
)
def test_a_criterion_takes_the_worst_of_its_groups(verdicts: list[Any], expected: str) -> None:
    assert combine(verdicts) == expected


def _group(name: str, n: int, low: float, estimate: float, high: float, *, small: bool = False) -> Any:
    interval = SimpleNamespace(estimate=estimate, low=low, high=high)
    metrics = {"ece_debiased": SimpleNamespace(after=interval)}
    return SimpleNamespace(group=name, n=n, small=small, metrics=metrics)


def test_judge_records_each_groups_interval_margin_and_level() -> None:
    overall = _group("All studies", 900, 0.02, 0.03, 0.04)
    groups = {
        "scanner": [
            _group("A", 400, 0.01, 0.02, 0.04),  # clears 0.05
            _group("B", 300, 0.03, 0.045, 0.07),  # straddles
            _group("C", 20, 0.0, 0.01, 0.02, small=True),  # clears, but too small to be judged
        ]
    }
    criterion = AcceptanceCriterion(id="c", metric="ece_debiased", below=0.05, scope="scanner")
    judged = judge(criterion, overall, groups, 0.9)
    assert [(r.group, r.verdict) for r in judged.results] == [
        ("A", PASS),
        ("B", INCONCLUSIVE),
        ("C", INSUFFICIENT),
    ]
    assert (judged.results[1].estimate, judged.results[1].low, judged.results[1].high) == (0.045, 0.03, 0.07)
    assert judged.verdict == INCONCLUSIVE
    assert (judged.rule, judged.lower_margin, judged.upper_margin, judged.level) == ("below", None, 0.05, 0.9)
    inside = AcceptanceCriterion(id="w", metric="ece_debiased", within=(0.0, 0.05))
    within = judge(inside, overall, groups, 0.95)
    assert (within.rule, within.lower_margin, within.upper_margin) == ("within", 0.0, 0.05)
    assert within.verdict == PASS and [r.group for r in within.results] == ["All studies"]
    nowhere = judge(
        AcceptanceCriterion(id="n", metric="ece_debiased", below=0.05, scope="site"), overall, groups, 0.95
    )
    assert nowhere.results == () and nowhere.verdict == INSUFFICIENT


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"below": 0.1, "above": 0.0},
            "give exactly one of 'below', 'above' or 'within: [low, high]' (got below and above)",
        ),
        ({}, "give exactly one of 'below', 'above' or 'within: [low, high]'"),
        ({"within": [1.25, 0.8]}, "'within' must be two finite numbers [low, high] with low < high"),
        ({"below": 0.1, "statistic": "high"}, "'statistic' is no longer a criterion field"),
    ],
)
def test_a_criterion_gives_one_well_formed_margin(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        AcceptanceCriterion.model_validate({"id": "c", "metric": "ece_debiased", **fields})
    assert message in str(caught.value)


def test_a_slope_criterion_is_judged_on_the_recalibration_analysis() -> None:
    # slope, intercept and O:E are not in evaluation.metrics: their estimates and intervals per group come
    # from the recalibration analysis (Sensitivity), and the criterion is judged on exactly those
    from tests.results import synthetic

    from sitecal.evaluation import evaluate
    from sitecal.protocol import Protocol

    raw = synthetic.protocol().model_dump(mode="json", exclude_none=True)
    raw["acceptance"] = [
        {"id": "slope", "metric": "slope", "within": [0.8, 1.25], "scope": "scanner"},
        {"id": "oe", "metric": "oe_ratio", "stage": "before", "within": [0.9, 1.1]},
    ]
    protocol = Protocol.model_validate(raw)
    doc = evaluate(protocol, synthetic.data(), cohort_flow=synthetic.FLOW, protocol_sha256="0" * 64).document
    recal = doc["sensitivity"]["recalibration"]
    slope, oe = doc["acceptance"]
    for row, group in zip(slope["results"], recal["subgroups"]["scanner"], strict=True):
        value = group["after"]["slope"]
        assert row["group"] == group["group"]
        assert (row["estimate"], row["low"], row["high"]) == (value["estimate"], value["low"], value["high"])
        expected = (
            INSUFFICIENT
            if group["small"]
            else group_verdict(WITHIN_SLOPE, *(value[k] for k in ("estimate", "low", "high")))
        )
        assert row["verdict"] == expected
    assert slope["level"] == recal["level"]
    value = recal["overall"]["before"]["oe_ratio"]
    assert (oe["results"][0]["estimate"], oe["results"][0]["high"]) == (value["estimate"], value["high"])
    # the synthetic scanners: two judged, their slope intervals wider than the margin; one too small
    assert [r["verdict"] for r in slope["results"]] == [INCONCLUSIVE, INCONCLUSIVE, INSUFFICIENT]


WITHIN_SLOPE = AcceptanceCriterion(id="s", metric="slope", within=(0.8, 1.25))


def test_a_group_without_an_estimate_is_insufficient_data_and_written_as_null() -> None:
    overall = _group("All studies", 900, math.nan, math.nan, math.nan)
    judged = judge(AcceptanceCriterion(id="c", metric="ece_debiased", below=0.05), overall, {}, 0.95)
    (row,) = judged.results
    assert row.verdict == INSUFFICIENT and (row.estimate, row.low, row.high) == (None, None, None)
    assert judged.to_dict()["results"][0]["estimate"] is None  # evaluation.json holds no NaN
