"""The appendix crosswalk from TRIPOD+AI and CLAIM 2024 items to the sections of the report."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pypdf
import pytest

from sitecal.report import ReportArtifacts, ReportInputs
from sitecal.report._context import Context
from sitecal.report._crosswalk import CLAIM_2024, DEV_ONLY, TRIPOD_AI, crosswalk_rows
from sitecal.report._styles import make_styles, register_fonts

# TRIPOD+AI (Collins et al., BMJ 2024;385:e078378): 27 main items and their sub-items
TRIPOD_ITEMS = (
    "1 2 3a 3b 3c 4 5a 5b 6a 6b 6c 7 8a 8b 8c 9a 9b 9c 10 11 12a 12b 12c 12d 12e 12f 12g 13 14 15 16 17 "
    "18a 18b 18c 18d 18e 18f 19 20a 20b 20c 21 22 23a 23b 24 25 26 27a 27b 27c"
).split()
# the items TRIPOD+AI marks [D], development only
TRIPOD_DEVELOPMENT_ONLY = {"9a", "12b", "12c", "22", "27a", "27b"}
# the report's sections in their final order (other builders join as they are written)
FINAL_SECTIONS = {
    "Intended use",
    "Data",
    "Cohort flow",
    "Cohort characteristics",
    "Methods",
    "Fitted temperatures",
    "Results",
    "Fairness",
    "Acceptance criteria",
    "Limitations",
    "Sensitivity analyses",
    "Provenance",
    "Sign-off",
    "Appendix",
}


def _context(
    protocol: dict[str, Any], headings: dict[str, str], evaluation: dict[str, Any] | None = None
) -> Context:
    inputs = ReportInputs(evaluation or {}, {}, {}, protocol)
    ctx = Context(inputs=inputs, styles=make_styles(register_fonts()), width=480, figures_dir=Path("."))
    ctx.headings.update(headings)
    return ctx


def _outline(pdf: Path) -> list[tuple[str, str, str]]:
    """(number, title, chapter title) of every numbered heading, from the PDF bookmarks."""
    found: list[tuple[str, str, str]] = []

    def walk(items: list[Any], chapter: str) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, found[-1][1] if found else chapter)
                continue
            match = re.match(r"^([\d.]+)\s+(.*)$", item.title)
            if match:
                number, title = match.groups()
                found.append((number, title, title if "." not in number else chapter))

    walk(pypdf.PdfReader(pdf).outline, "")
    return found


def _headings_of(pdf: Path) -> dict[str, str]:
    """Rebuild ``Context.headings`` from the rendered document's bookmarks."""
    headings: dict[str, str] = {}
    for number, title, chapter in _outline(pdf):
        headings["/".join([chapter, title]) if "." in number else title] = number
    return headings


def squash(text: str) -> str:
    return " ".join(text.split())


def test_item_lists_are_complete_and_unique() -> None:
    assert [item for item, _, _ in TRIPOD_AI] == TRIPOD_ITEMS
    assert len({re.match(r"\d+", i).group() for i in TRIPOD_ITEMS}) == 27  # type: ignore[union-attr]
    assert [item for item, _, _ in CLAIM_2024] == [str(n) for n in range(1, 45)]
    for _, topic, _ in (*TRIPOD_AI, *CLAIM_2024):
        assert 5 < len(topic) <= 70, topic  # a paraphrase, not the guideline's wording
    assert {item for item, _, code in TRIPOD_AI if code == "dev"} == TRIPOD_DEVELOPMENT_ONLY


def test_every_item_resolves_with_the_final_sections() -> None:
    headings = {title: str(n) for n, title in enumerate(sorted(FINAL_SECTIONS - {"Cohort flow"}), start=1)}
    headings["Appendix/Protocol as run"] = "13.1"
    rows = crosswalk_rows(_context({"name": "x"}, headings))
    assert len(rows) == 52 + 44
    assert [r[1] for r in rows if r[0] == "TRIPOD+AI (2024)"] == TRIPOD_ITEMS
    for guideline, item, _, answer in rows:
        assert answer.text, (guideline, item)
        assert not answer.missing, (guideline, item, answer.missing)
        assert "not in this report" not in answer.text
    by_item = {(g, i): a for g, i, _, a in rows}
    assert by_item["TRIPOD+AI (2024)", "12b"].text == DEV_ONLY
    assert by_item["CLAIM 2024", "42"].sections == (("13.1", "Protocol as run"),)
    # "Data" is preferred to the older "Cohort flow" where both exist
    assert by_item["CLAIM 2024", "7"].sections == ((headings["Data"], "Data"),)


def test_governance_items_point_to_the_site_or_to_the_sign_off() -> None:
    headings = {"Sign-off": "12"}
    rows = {(g, i): a for g, i, _, a in crosswalk_rows(_context({"name": "x"}, headings))}
    assert rows["TRIPOD+AI (2024)", "17"].text == (
        "by the site: ethics approval, required before sign-off (report.governance.ethics_approval)"
    )
    assert rows["TRIPOD+AI (2024)", "17"].sections == ()
    given = {"name": "x", "governance": {"ethics_approval": "REC 1", "interpretation": "fine"}}
    rows = {(g, i): a for g, i, _, a in crosswalk_rows(_context(given, headings))}
    assert rows["TRIPOD+AI (2024)", "17"].text == "12 Sign-off (statement: ethics approval)"
    assert rows["TRIPOD+AI (2024)", "17"].sections == (("12", "Sign-off"),)
    assert rows["CLAIM 2024", "41"].text == (
        "12 Sign-off (statement: interpretation); by the site: human oversight, required before sign-off "
        "(report.governance.human_oversight)"
    )


def test_every_item_appears_once_and_every_cited_section_exists(
    report: ReportArtifacts, text: str, raw: dict[str, Any]
) -> None:
    outline = _outline(report.pdf)
    numbered = {(number, title) for number, title, _ in outline}
    assert [t for _, t, _ in outline][-2:] == ["Protocol as run", "Reporting-guideline crosswalk"]
    ctx = _context(raw["protocol"], _headings_of(report.pdf), raw["evaluation"])
    rows = crosswalk_rows(ctx)
    flat = squash(text)
    tripod = flat[flat.index("TRIPOD+AI (2024) items and where") : flat.index("CLAIM 2024 items and where")]
    claim = flat[flat.index("CLAIM 2024 items and where") :]
    cited: set[tuple[str, str]] = set()
    for guideline, item, topic, answer in rows:
        region = tripod if guideline.startswith("TRIPOD") else claim
        # one row per item: its number and topic once, followed by where it is answered
        assert region.count(f" {item} {topic} ") == 1, (guideline, item)
        assert f"{item} {topic} {answer.text}" in region, (guideline, item)
        cited.update(answer.sections)
        # every section the crosswalk names is built (a missing one would print "section not in this report")
        assert not answer.missing, (guideline, item, answer.missing)
    assert cited, "the crosswalk cites no section"
    for number, title in cited:
        assert (number, title) in numbered, (number, title)
        assert f"{number} {title}" in flat  # the heading as printed


@pytest.mark.parametrize("guideline", [TRIPOD_AI, CLAIM_2024])
def test_answer_codes_are_all_understood(guideline: tuple[tuple[str, str, str], ...]) -> None:
    for _, _, code in guideline:
        for piece in code.split(" + "):
            title = r"[A-Za-z :-]+(/[A-Za-z :-]+)?"
            assert re.fullmatch(
                rf"dev|na:.+|by:.+|site:[a-z_]+|design:[a-z_]+|§{title}(\|{title})*", piece
            ), piece


def test_study_size_and_design_items_point_at_their_text_when_the_run_has_it() -> None:
    headings = {"Data": "2", "Data/Sources": "2.1", "Methods": "4", "Acceptance criteria": "8"}
    without = {(g, i): a for g, i, _, a in crosswalk_rows(_context({"name": "x"}, headings))}
    assert (
        without["TRIPOD+AI (2024)", "10"].text
        == "by the site: the sample-size calculation behind the study size"
    )
    assert (
        without["CLAIM 2024", "21"].text
        == "4 Methods; by the site: how the intended sample size was determined"
    )
    assert without["CLAIM 2024", "5"].text == (
        "by the site: retrospective or prospective data collection (report.design.collection)"
    )
    assert (
        without["CLAIM 2024", "13"].text
        == "by the site: the image acquisition protocol (report.design.acquisition)"
    )
    planned = {"planning": {"target_power": 0.8}}
    given = {"name": "x", "design": {"collection": "retrospective", "acquisition": "PA erect, 125 kVp"}}
    rows = {
        (g, i): a
        for g, i, _, a in crosswalk_rows(
            _context(given, {**headings, "Acceptance criteria/Study size": "8.1"}, planned)
        )
    }
    assert rows["TRIPOD+AI (2024)", "10"].sections == (("8.1", "Study size"),)
    assert rows["CLAIM 2024", "21"].text == "4 Methods; 8.1 Study size"
    assert rows["CLAIM 2024", "5"].text == "2.1 Sources (retrospective or prospective data collection)"
    assert rows["CLAIM 2024", "13"].sections == (("2.1", "Sources"),)
