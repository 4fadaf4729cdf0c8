"""The PDF report: sections, numbers as printed, verdicts, literal text, page furniture, robustness."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pypdf
import pytest

from sitecal.errors import DataError
from sitecal.report import ReportArtifacts, format_interval, render_report

NASTY = '<b>St. Mary\'s & "Ünïcødé" <font color=red>'

SECTIONS = [
    "Validation report",
    "Intended use",
    "Question answered",
    "Data",
    "Sources",
    "Eligibility",
    "Flow",
    "Cohort characteristics",
    "Methods",
    "Fitted temperatures",
    "Results",
    "Overall",
    "Scanner",
    "Site",
    "Sex",
    "Age band",
    "Judged metrics by subgroup",
    "Reliability diagrams",
    "Fairness",
    "Acceptance criteria",
    "Study size",
    "Limitations",
    "Highest-confidence errors",
    "Sensitivity analyses",
    "Provenance",
    "Sign-off",
    "Appendix",
    "Protocol as run",
    "Reporting-guideline crosswalk",
]


def outline_titles(pdf: Path) -> list[str]:
    def walk(items: list[Any]) -> list[str]:
        out: list[str] = []
        for item in items:
            out += walk(item) if isinstance(item, list) else [item.title]
        return out

    return walk(pypdf.PdfReader(pdf).outline)


def squash(text: str) -> str:
    return " ".join(text.split())


def test_every_section_is_a_heading_in_order(report: ReportArtifacts, text: str) -> None:
    titles = outline_titles(report.pdf)
    # bookmarks carry the section numbers: "1  Intended use", "5.2  Scanner", ...
    bare = [re.sub(r"^[\d.]+\s+", "", t) for t in titles]
    assert bare == SECTIONS
    position = 0
    for heading in titles[1:]:
        # as printed (two spaces after the number); the crosswalk cites sections with one space
        found = text.find(heading, position)
        found = found if found >= 0 else text.find(heading.replace("  ", " "), position)
        assert found >= 0, heading
        position = found


def test_a_scanner_groups_numbers_are_printed_as_stored(raw: dict[str, Any], text: str) -> None:
    ev = raw["evaluation"]
    group, following = ev["subgroups"]["scanner"][0], ev["subgroups"]["scanner"][1]
    assert group["group"] == "GE Definium 656"
    # the scanner results table, from this group's name to the next group's name, one cell per line
    table = text[text.index("By scanner: estimate") :]
    cells = [
        line.strip()
        for line in table[table.index(group["group"]) : table.index(following["group"])].splitlines()
    ]
    expected = [group["group"], "n = 282 studies", "169 patients", "T = 1.769"]
    names = {"ece": "ECE (plug-in)", "nll": "NLL", "brier": "Brier score", "accuracy": "Accuracy"}

    def shown(e: dict[str, Any], *, signed: bool = False) -> str:
        outside = not e["low"] <= e["estimate"] <= e["high"]  # marked, never altered
        return format_interval(e["estimate"], e["low"], e["high"], signed=signed) + (" †" if outside else "")

    for metric in ev["metrics"]:
        entry = group["metrics"][metric]
        expected.append(names[metric])
        expected += [shown(entry[s]) for s in ("before", "after")]
        expected.append(shown(entry["difference"], signed=True))
    assert cells == expected
    # by hand, from the fixture: ECE before {estimate 0.1227, low 0.0919, high 0.171}, 3 decimals each;
    # ECE after {0.0291, 0.0303, 0.086}: the estimate below its own interval, marked †;
    # the change {-0.0936, -0.1149, -0.0241} signed; T 1.7688 -> 1.769
    assert cells[5:8] == ["0.123 [0.092, 0.171]", "0.029 [0.030, 0.086] †", "-0.094 [-0.115, -0.024]"]
    # the mark's legend line is under the table
    assert "† the estimate lies outside its own interval" in table[: table.index("By site")]


def test_verdicts_are_shown(raw: dict[str, Any], report: ReportArtifacts, text: str) -> None:
    first_page = pypdf.PdfReader(report.pdf).pages[0].extract_text()
    assert raw["evaluation"]["verdict"] == "inconclusive"  # one scanner's interval straddles its margin
    assert "Overall verdict" in first_page and "INCONCLUSIVE" in first_page
    assert "Report status" in first_page and "DRAFT" in first_page  # as prominent as the verdict
    assert "Overall verdict: INCONCLUSIVE" in text
    assert re.search(r"ece-after-per-scanner\s+INCONCLUSIVE", text)
    assert re.search(r"ece-after-overall\s+PASS", text)
    assert "Insufficient data" in text  # the small scanner is not judged
    # Methods says which bound is one-sided at what level, and what judging five scanners costs
    flat = " ".join(text.split())
    assert "Each end of a two-sided 95% interval is a one-sided 97.5% bound" in flat
    assert (
        "with 5 groups all exactly on the margin, the chance that at least one fails is up to 1 − 0.975"
        in (flat)
    )
    assert "= 12%" in flat
    assert "n < 30: interpret with caution" in text  # and flagged, not hidden


def test_dicom_header_text_is_printed_verbatim(
    report: ReportArtifacts, text: str, poppler_text: Callable[[Path], str]
) -> None:
    assert NASTY in text
    poppler = poppler_text(report.pdf)
    assert NASTY in poppler  # on one line in the acceptance table
    # the results table wraps it over lines of its narrow group column; the acceptance table does not
    assert squash(poppler).count(NASTY) >= 2


def test_markup_in_every_external_string_is_literal(
    lean: dict[str, Any], build: Callable[..., ReportArtifacts], pdf_text: Callable[[Path], str]
) -> None:
    weird = 'A & B <i>not italic</i> $\\alpha$ \x07 "q" </para>'
    ev = lean["evaluation"]
    scanner = ev["subgroups"]["scanner"][0]
    scanner["group"] = NASTY  # also drawn in a reliability figure title
    ev["acceptance"][1]["results"][0]["group"] = NASTY
    ev["warnings"].append(  # a group name is the external string of a warning (its words are the report's)
        {"code": "small_group", "attribute": "scanner", "group": weird, "n": 3, "min_group_size": 30}
    )
    ev["cohort_flow"]["exclusions"][0]["reason"] = weird
    lean["protocol"]["title"] = weird
    lean["protocol"]["intended_use"] = weird
    lean["protocol"]["sign_off"] = [weird]
    lean["provenance"]["command_line"] = weird
    lean["calibration"]["groups"] = {NASTY: lean["calibration"]["groups"]["GE Definium 656"]}
    artifacts = build(lean)
    out = squash(pdf_text(artifacts.pdf))
    shown = weird.replace("\x07", "\ufffd")
    assert out.count(shown) >= 5
    assert squash(NASTY) in out
    meta = pypdf.PdfReader(artifacts.pdf).metadata
    assert meta is not None and meta.title == weird


def test_letter_page_size(lean: dict[str, Any], build: Callable[..., ReportArtifacts]) -> None:
    artifacts = build(lean, page_size="Letter")
    reader = pypdf.PdfReader(artifacts.pdf)
    for page in reader.pages:
        assert (round(float(page.mediabox.width)), round(float(page.mediabox.height))) == (612, 792)
    a4 = build(lean, page_size="a4")  # case-insensitive
    box = pypdf.PdfReader(a4.pdf).pages[0].mediabox
    assert (round(float(box.width)), round(float(box.height))) == (595, 842)


def test_unknown_page_size_is_refused_with_a_suggestion(
    parts: dict[str, Any], inputs: Callable[..., Any], tmp_path: Path
) -> None:
    with pytest.raises(
        ValueError, match=r"must be one of 'A4', 'Letter'. Got 'Leter'. Did you mean 'Letter'\?"
    ):
        render_report(inputs(parts), tmp_path, page_size="Leter")
    assert not (tmp_path / "report.pdf").exists()


def test_metadata_and_page_furniture(raw: dict[str, Any], report: ReportArtifacts, text: str) -> None:
    reader = pypdf.PdfReader(report.pdf)
    meta = reader.metadata
    assert meta is not None and meta.subject is not None
    assert meta.title == raw["protocol"]["title"]
    assert meta.author == "sitecal"
    assert "protocol demo" in meta.subject
    total = len(reader.pages)
    sha = raw["protocol"]["sha256"][:12]
    for number, page in enumerate(reader.pages, start=1):
        page_text = page.extract_text()
        assert f"Page {number} of {total}" in page_text
        assert f"Protocol sha256 {sha}" in page_text
        if number > 1:
            assert raw["protocol"]["title"] in page_text  # running header
        assert "DRAFT" in page_text  # the fixture protocol gives no governance statements


def test_contents_of_the_fixed_sections(raw: dict[str, Any], text: str) -> None:
    flow = raw["evaluation"]["cohort_flow"]
    for reason in (e["reason"] for e in flow["exclusions"]):
        assert reason in text
    assert "2,003" in text and "1,999" in text
    assert "15 equal-width bins" in text and "(lo, hi]" in text
    assert (
        "1,000 bootstrap resamples of patients, stratified by scanner; 95% percentile intervals; seed 7."
        in text
    )
    assert "seed 20261202" in text
    assert "global fallback" in text  # Fujifilm uses the global temperature
    for role in raw["protocol"]["sign_off"]:
        assert role in text
    for value in raw["provenance"]["sha256"].values():
        assert value in text  # full hashes for the auditor
    assert raw["provenance"]["command_line"] in text
    assert "2026-12-02 18:00 UTC" in text


def test_writes_atomically_and_overwrites(
    report: ReportArtifacts,
    lean: dict[str, Any],
    inputs: Callable[..., Any],
    build: Callable[..., ReportArtifacts],
) -> None:
    assert report.pdf.name == "report.pdf"
    assert not [p for p in report.pdf.parent.rglob("*") if p.name.endswith(".tmp")]
    first = build(lean)
    second = render_report(inputs(lean), first.pdf.parent)  # same folder again: replaced, no leftovers
    assert second.pdf == first.pdf and second.figures == first.figures
    assert second.pdf.read_bytes().startswith(b"%PDF-")
    assert not [p for p in second.pdf.parent.rglob("*") if p.name.endswith(".tmp")]


def test_missing_optional_fields_print_not_recorded(
    parts: dict[str, Any], build: Callable[..., ReportArtifacts], pdf_text: Callable[[Path], str]
) -> None:
    # what a valid evaluation.json may lack (sitecal.results.Evaluation: the OrAbsent fields), and the
    # provenance and protocol summary beyond the protocol's name
    ev = parts["evaluation"]
    assert not {"sensitivity", "characteristics", "highest_confidence_errors"} & set(ev)
    assert "sources" not in ev["cohort_flow"]
    for group in [ev["overall"], *[g for gs in ev["subgroups"].values() for g in gs]]:
        group.pop("reliability")
    parts["provenance"] = {}
    parts["protocol"] = {"name": "bare"}
    artifacts = build(parts)
    out = pdf_text(artifacts.pdf)
    assert out.count("not recorded") >= 8
    assert "Sources of the studies: not recorded in this run's evaluation.json." in out
    assert "Reliability data for All studies: not recorded." in out
    assert "Calibration validation: protocol bare" in out
    assert not [f for f in artifacts.figures if f.name.startswith("reliability_")]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda p: p["evaluation"]["overall"]["metrics"]["ece"].pop("after"),
            r"^evaluation\.json: \$\.overall\.metrics\.ece\.after: is missing \(expected an object\)\.",
        ),
        (
            lambda p: p["evaluation"]["subgroups"]["site"][2].pop("n"),
            r"^evaluation\.json: \$\.subgroups\.site\[2\]\.n: is missing",
        ),
        (
            lambda p: p["evaluation"]["subgroups"]["sex"][0].update(n="many"),
            r'\$\.subgroups\.sex\[0\]\.n: expected an integer, got "many"',
        ),
        (lambda p: p["evaluation"].pop("verdict"), r"^evaluation\.json: \$\.verdict: is missing"),
        (lambda p: p["evaluation"].pop("cohort_flow"), r"^evaluation\.json: \$\.cohort_flow: is missing"),
        (
            lambda p: p["evaluation"]["acceptance"][1]["results"][0].pop("verdict"),
            r"\$\.acceptance\[1\]\.results\[0\]\.verdict: is missing",
        ),
        (
            lambda p: p["calibration"]["global_fit"].pop("temperature"),
            r"^calibration\.json: \$\.global_fit\.temperature: is missing",
        ),
        (lambda p: p["protocol"].pop("name"), r"protocol: the required field 'name' is missing"),
        (
            lambda p: p["evaluation"].update(schema_version=2),
            r"^evaluation\.json: \$\.schema_version: schema_version 2 is not supported by this sitecal \(it "
            r"reads schema_version 4 of Evaluation\)\. Render this run with the sitecal version that made it",
        ),
    ],
)
def test_missing_required_field_names_the_field(
    parts: dict[str, Any],
    inputs: Callable[..., Any],
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], object],
    message: str,
) -> None:
    edit(parts)
    with pytest.raises(DataError, match=message):
        render_report(inputs(parts), tmp_path)
    assert not tmp_path.joinpath("report.pdf").exists()
