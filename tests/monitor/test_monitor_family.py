"""The family of monitoring tests: which criteria give which tests, where, and the shared threshold."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sitecal.monitor import test_family as family_of
from sitecal.results import Criterion


def _criterion(
    id_: str, metric: str, rule: str, low: float | None, high: float | None, scope: str
) -> Criterion:
    return Criterion(
        id=id_,
        description=None,
        metric=metric,
        stage="after",
        rule=rule,  # type: ignore[arg-type]
        lower_margin=low,
        upper_margin=high,
        level=0.95,
        scope=scope,
        results=(),
        verdict="pass",
    )


GROUPS = {"scanner": ["A", "B"], "site": ["north"]}
CRITERIA = [
    _criterion("ece", "ece_debiased", "below", None, 0.1, "scanner"),
    _criterion("acc", "accuracy", "above", 0.7, None, "overall"),
    _criterion("slope", "slope", "within", 0.8, 1.25, "overall"),
    _criterion("nll", "nll", "below", None, 0.5, "overall"),  # no sequential test for the NLL
]


def test_each_criterion_is_tested_where_the_validation_judged_it() -> None:
    tests = family_of(CRITERIA, GROUPS, alpha=0.05, calibrated_by="scanner")
    where = {(t.criterion, t.kind, t.side, t.attribute, t.group) for t in tests}
    assert where == {
        # the ECE per scanner, both signs of the gap
        *{("ece", "gap", side, "scanner", g) for side in ("above", "below") for g in "AB"},
        # the accuracy overall only (its scope), not per scanner
        ("acc", "accuracy", "below", "overall", "All studies"),
        # the deployed temperatures: every study and each calibration group, whatever the slope's scope
        *{("slope", "temperature", side, a, g) for side in ("above", "below")
          for a, g in (("overall", "All studies"), ("scanner", "A"), ("scanner", "B"))},
    }  # fmt: skip
    margins = {(t.kind, t.side): t.margin for t in tests}
    assert margins[("gap", "below")] == -0.1 and margins[("accuracy", "below")] == 0.7
    assert margins[("temperature", "above")] == pytest.approx(1 / 0.8)
    assert margins[("temperature", "below")] == pytest.approx(1 / 1.25)
    assert [t.threshold for t in tests] == pytest.approx([math.log(len(tests) / 0.05)] * len(tests))
    assert len({t.id for t in tests}) == len(tests) == 11


def test_a_global_temperature_is_watched_overall_and_criteria_before_calibration_are_not() -> None:
    before = [dataclasses.replace(_criterion("raw", "ece", "below", None, 0.1, "overall"), stage="before")]
    tests = family_of([*CRITERIA[2:], *before], GROUPS, alpha=0.05, calibrated_by=None)
    assert {(t.attribute, t.kind) for t in tests} == {("overall", "temperature")}
    assert family_of([], GROUPS, alpha=0.05) == ()
