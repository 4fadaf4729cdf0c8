"""The acceptance tables' Needed n column and the Study size text, read from the document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.report.conftest import Parts
from tests.report.sections import render_section

from sitecal.report._acceptance import acceptance
from sitecal.report._context import Context
from sitecal.report._data import data_section
from sitecal.report._inputs import ReportInputs
from sitecal.report._limitations import _more_studies
from sitecal.report._marks import Marks
from sitecal.report._sections import _not_passing
from sitecal.report._styles import make_styles, register_fonts


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_every_judged_row_shows_its_planned_size_and_the_text_says_how(tmp_path: Path, parts: Parts) -> None:
    ev: dict[str, Any] = parts["evaluation"]
    criterion = ev["acceptance"][1]  # per scanner: four judged groups and one too small
    rows = criterion["results"]
    rows[0]["study_size"] = {"needed": 300, "pass_rate": 0.86}
    rows[1]["study_size"] = {"needed": None, "pass_rate": 0.41}
    assert "study_size" not in rows[4]  # not judged: no size
    text = _squash(render_section(tmp_path, acceptance, ev))
    assert "Group n Estimate [interval] Margin Needed n if calibrated (80%) Verdict" in text
    assert "below 0.12 300 Pass" in text  # the first scanner
    # the column says what it assumes, once, under the first table that has it
    assert (
        text.count(
            "Needed n: the evaluation studies a group would need for a 80% chance of a conclusive "
            "pass if it were perfectly calibrated at the criterion's stage"
        )
        == 1
    )
    assert "It is not the number of studies that would settle this group" in text
    # Carestream, inconclusive: 0.077 [0.0617, 0.1553] against 0.12; |0.077 - 0.12| = 0.043 is less than
    # half its interval's width (0.0468), so its planned size is followed by the caveat
    assert "400 estimate near the margin: more studies may not settle it Inconclusive" in text
    assert "below 0.12 > 1600 " in text  # none of the planned sizes reached 80%
    assert "below 0.12 – Insufficient data" in text  # the small group
    assert "1.1 Study size" in text
    assert "100 groups of each size were drawn from the group's probabilities" in text
    assert "(200 bootstrap resamples each)" in text
    assert (
        "smallest of 50, 100, 200, 300, 400, 600, 800, 1200, 1600 studies whose pass rate reached 80%" in text
    )
    assert "(Monte Carlo standard error about 4 percentage points)" in text
    assert "with a fit fraction of 0.5, a group needs about 2 times as many studies in all" in text
    assert "fails to pass at most 20% of the time" in text
    assert "read each size as a lower bound" in text


def test_without_planning_there_is_no_column_and_no_study_size_text(tmp_path: Path, parts: Parts) -> None:
    ev = parts["evaluation"]
    del ev["planning"]
    text = _squash(render_section(tmp_path, acceptance, ev))
    assert "Group n Estimate [interval] Margin Verdict" in text
    assert "Needed n" not in text and "Study size" not in text


def test_the_data_section_states_the_design_the_protocol_gives_escaped(tmp_path: Path, parts: Parts) -> None:
    protocol = parts["protocol"]
    text = _squash(render_section(tmp_path, data_section, parts["evaluation"], protocol=protocol))
    assert (
        "Data collection: retrospective (as the protocol states it). The studies were acquired before" in text
    )
    assert (
        'Image acquisition protocol, as the site states it: PA erect, 125 kVp <AEC> & "grid"; lateral where '
        "clinically indicated" in text
    )
    del protocol["design"]
    text = _squash(render_section(tmp_path, data_section, parts["evaluation"], protocol=protocol))
    assert "Data collection" not in text and "acquisition protocol" not in text


def test_an_inconclusive_groups_limitation_says_what_more_studies_would_do(
    tmp_path: Path, parts: Parts
) -> None:
    below = {"rule": "below", "upper_margin": 0.1}
    assert _more_studies({"n": 176}, below) == "More studies would narrow the interval."
    far = {"n": 176, "estimate": 0.016, "low": 0.0, "high": 0.112, "study_size": {"needed": 400}}
    assert _more_studies(far, below) == (
        "A perfectly calibrated group like it would need about 400 evaluation studies to pass at least 80% "
        "of the time (Study size)."
    )
    # the demo's DRX Demo: 0.081 [0.050, 0.129] against 0.1; 0.019 from the margin, less than half the
    # interval's width (0.0395): more studies narrow it around a value near the margin
    near = {"n": 585, "estimate": 0.081, "low": 0.050, "high": 0.129, "study_size": {"needed": 600}}
    assert _more_studies(near, below) == (
        "A perfectly calibrated group like it would need about 600 evaluation studies to pass at least 80% "
        "of the time (Study size); this group's estimate lies near the margin, so more studies may not "
        "settle it: its interval would narrow around a value close to the margin."
    )
    assert "fewer than it has: its calibration may be worse than the margin allows" in _more_studies(
        {"n": 500, "study_size": {"needed": 400, "pass_rate": 0.83}}, below
    )
    assert "more studies alone may not settle it" in _more_studies(
        {"n": 176, "study_size": {"needed": None, "pass_rate": 0.4}}, below
    )


def test_the_cover_names_the_planned_size_of_an_inconclusive_group_that_has_too_few(parts: Parts) -> None:
    ev = parts["evaluation"]
    ctx = Context(
        inputs=ReportInputs(ev, {}, {}, {"name": "t"}),
        styles=make_styles(register_fonts()),
        width=400.0,
        figures_dir=Path("."),
    )
    criterion = ev["acceptance"][1]
    inconclusive = [r for r in criterion["results"] if r["verdict"] == "inconclusive"]
    assert len(inconclusive) == 1
    row = inconclusive[0]
    row["study_size"] = {"needed": 400, "pass_rate": 0.84}
    # 0.077 [0.0617, 0.1553] against 0.12: 0.043 from the margin, under half the width (0.0468)
    assert (
        f"(inconclusive; n = {row['n']}; about 400 needed if it were perfectly calibrated, but its estimate "
        "is near the margin, so more studies may not settle it)"
    ) in _not_passing(ctx, criterion, Marks())
    row["high"] = 0.1  # half-width 0.0192 < 0.043: no longer near the margin (a made-up row)
    assert f"(inconclusive; n = {row['n']}; about 400 needed if it were perfectly calibrated)" in (
        _not_passing(ctx, criterion, Marks())
    )
    row["study_size"] = {"needed": 100, "pass_rate": 0.84}  # it has enough: no size is quoted
    assert "(inconclusive)" in _not_passing(ctx, criterion, Marks())
