"""The Fairness section: every judged group ranked by its gap to the rest, spreads, small groups listed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from tests.report.sections import render_section

from sitecal.report._fairness import fairness, ranked_gaps

HOSTILE = '<b>St. Mary\'s & "Ünïcødé" <font color=red>'


def _entry(estimate: float, low: float, high: float, n: int = 0) -> dict[str, Any]:
    return {"estimate": estimate, "low": low, "high": high, "n": n}


def _stage(
    per_group: dict[str, tuple[float, int]],
    gaps: dict[str, tuple[float, float, float]],
    flagged: tuple[str, ...] = (),
) -> dict:
    """One stage; the size-matched reference is 0.03 above each gap except a flagged group's."""
    values = {g: v for g, (v, _) in per_group.items()}
    highest, lowest = max(values, key=values.__getitem__), min(values, key=values.__getitem__)
    return {
        "groups": sorted(per_group),
        "per_group": {g: _entry(v, v - 0.01, v + 0.02, n) for g, (v, n) in per_group.items()},
        "range": _entry(values[highest] - values[lowest], 0.001, 0.09),
        "highest": highest,
        "lowest": lowest,
        "too_small": {"tiny": 7},
        "versus_rest": {g: _entry(*gap) for g, gap in gaps.items()},
        "expected_gap": {g: round(gap[0] + 0.03, 3) for g, gap in gaps.items()},
        "adjusted_p": {g: 0.01 if g in flagged else 0.4 for g in gaps},
        "flagged": {g: g in flagged for g in gaps},
        "n_permutations": 1000,
    }


DISPARITIES = {
    "scanner": {
        "ece": {
            "after": _stage(
                {"A": (0.05, 300), HOSTILE: (0.12, 120)},
                {"A": (-0.04, -0.07, -0.01), HOSTILE: (0.061, 0.012, 0.1)},
                flagged=(HOSTILE,),  # A's interval excludes 0 too, but its gap is that of its size
            ),
            "before": _stage(
                {"A": (0.09, 300), HOSTILE: (0.2, 120)},
                {"A": (-0.08, -0.1, -0.02), HOSTILE: (0.1, 0.05, 0.2)},
                flagged=("A", HOSTILE),
            ),
        }
    },
    "sex": {
        "ece": {
            "after": _stage(
                {"F": (0.07, 200), "M": (0.06, 220)}, {"F": (0.009, -0.02, 0.03), "M": (-0.009, -0.03, 0.02)}
            ),
            # a code with its numbers: the report words it
            "before": {"note": "too_few_groups", "min_group_size": 30, "sizes": {"F": 25, "M": 220}},
        }
    },
}


def test_ranked_gaps_sort_by_the_gap_after_calibration_largest_first() -> None:
    rows = ranked_gaps(DISPARITIES, "ece")
    assert [(r["attribute"], r["group"]) for r in rows] == [
        ("scanner", HOSTILE),
        ("sex", "F"),
        ("sex", "M"),
        ("scanner", "A"),
    ]
    assert rows[0]["n"] == 120
    assert rows[0]["before"]["estimate"] == 0.1
    assert rows[1]["before"] is None  # before calibration the sex groups were not compared


def test_ranked_gaps_put_groups_without_an_estimate_last() -> None:
    data = copy.deepcopy(DISPARITIES)
    data["scanner"]["ece"]["after"]["versus_rest"]["A"]["estimate"] = None
    assert ranked_gaps(data, "ece")[-1]["group"] == "A"


def _render(tmp_path: Path, evaluation: dict[str, Any]) -> str:
    return render_section(tmp_path, fairness, evaluation)


@pytest.fixture
def evaluation() -> dict[str, Any]:
    return {
        "disparities": copy.deepcopy(DISPARITIES),
        "attribute_labels": {"scanner": "Scanner", "sex": "Sex"},
        "bootstrap": {"level": 0.95},
        "min_group_size": 30,
    }


def test_section_prints_the_ranking_spreads_and_small_groups(tmp_path: Path, evaluation: dict) -> None:
    text = " ".join(_render(tmp_path, evaluation).split())
    assert text.startswith("1 Fairness")
    rows = [
        # the star follows the flag (the size-matched, max-T test), not the interval excluding 0
        f"1 Scanner: {HOSTILE} 120 0.120 [0.110, 0.140] +0.061 [+0.012, +0.100] * +0.091 +0.100 [+0.050, "
        "+0.200] *",
        "2 Sex: F 200 0.070 [0.060, 0.090] +0.009 [-0.020, +0.030] +0.039 not compared",
        "3 Sex: M 220 0.060 [0.050, 0.080] -0.009 [-0.030, +0.020] +0.021 not compared",
        # A's interval excludes 0 but it is not flagged: why, beside the gap (its gap -0.040 is below the
        # size-matched reference -0.010, and only a higher ECE gap is tested)
        "4 Scanner: A 300 0.050 [0.040, 0.070] -0.040 [-0.070, -0.010] not flagged: no higher than random "
        "sets of its size (-0.010) -0.010 -0.080 [-0.100, -0.020] *",
    ]
    positions = [text.find(row) for row in rows]
    assert -1 not in positions, (positions, text)
    assert positions == sorted(positions)
    # spread per attribute: scanner 0.12 - 0.05 after, 0.2 - 0.09 before; sex compared after only
    assert f"Scanner 2 highest: {HOSTILE} lowest: A 0.110 [0.001, 0.090] 0.070 [0.001, 0.090]" in text
    assert "Sex 2 highest: F lowest: M not compared 0.010 [0.001, 0.090]" in text
    assert (
        "Sex, before calibration: not compared (disparity_intervals needs at least two groups with at least "
        "30 rows. Got sizes {'F': 25, 'M': 220}.)." in text
    )
    assert "Scanner: tiny (n = 7)" in text and "Sex: tiny (n = 7)" in text


def test_section_without_disparities_says_so(tmp_path: Path) -> None:
    text = _render(tmp_path, {"bootstrap": {"level": 0.95}})
    assert "not recorded in this run's evaluation.json" in text
