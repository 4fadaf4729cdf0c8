"""Every number of the demo's and the CT demo's evaluation.json, and their report text, pinned.

From fixed predictions (tests/e2e/pinned.py says how the pins were made): a restructuring of the
evaluation or the report must leave evaluation.json byte for byte and the report's text as they were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.e2e.pinned import differences, evaluation_bytes, load, pinned_evaluation, report_text


@pytest.mark.parametrize("name", ["demo", "ct"])
def test_the_evaluation_and_its_report_are_those_pinned(name: str, tmp_path: Path) -> None:
    new = evaluation_bytes(load(name), tmp_path)
    pinned = pinned_evaluation(name)
    if new != pinned:
        changed = list(differences(json.loads(new), json.loads(pinned)))
        pytest.fail(f"{name}: evaluation.json moved at {len(changed)} places, first: {changed[:8]}")
    text = report_text(name, new, tmp_path / "run")
    assert text == (Path(__file__).parent / "data" / name / "report.txt").read_text()


def test_the_pin_sees_a_change_of_one_number(tmp_path: Path) -> None:
    pinned = load("ct")
    logits = pinned.data.logits.copy()
    logits[0, 0] += 1e-6  # one study's logit, in its sixth decimal
    moved = type(pinned)(
        protocol=pinned.protocol,
        data=type(pinned.data)(**{**vars(pinned.data), "logits": logits}),
        cohort_flow=pinned.cohort_flow,
        protocol_sha256=pinned.protocol_sha256,
    )
    assert evaluation_bytes(moved, tmp_path) != pinned_evaluation("ct")
