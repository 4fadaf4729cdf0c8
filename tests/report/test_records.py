"""Closing sections: DRAFT marking, the site's statements in the sign-off, provenance tables."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pypdf
import pytest

from sitecal.report import ReportArtifacts, ReportInputs, render_report
from sitecal.report._governance import GOVERNANCE_FIELDS
from sitecal.report._records import draft_fields

STATEMENTS = {
    "ethics_approval": "Approved by the regional ethics committee (REC 26/LO/0001); consent waived.",
    "reference_standard": "Two consultant radiologists <blinded> & a third for disputes.",
    "interpretation": "Probabilities after calibration are honest except on the smallest scanner.",
    "human_oversight": "A radiologist reports every study and may disregard the model.",
}


def squash(text: str) -> str:
    return " ".join(text.split())


def _lean(raw: dict[str, Any]) -> dict[str, Any]:
    parts = copy.deepcopy(raw)
    ev = parts["evaluation"]
    for group in [ev["overall"], *[g for gs in ev["subgroups"].values() for g in gs]]:
        group.pop("reliability", None)
    return parts


def _render(parts: dict[str, Any], out: Path) -> ReportArtifacts:
    inputs = ReportInputs(parts["evaluation"], parts["calibration"], parts["provenance"], parts["protocol"])
    return render_report(inputs, out)


@pytest.fixture(scope="module")
def complete(raw: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> ReportArtifacts:
    """A report whose protocol gives every governance statement."""
    parts = _lean(raw)
    parts["protocol"]["governance"] = dict(STATEMENTS)
    parts["provenance"]["document_id"] = "SC-0123456789AB"
    return _render(parts, tmp_path_factory.mktemp("complete"))


@pytest.fixture(scope="module")
def partial(raw: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> ReportArtifacts:
    """Two statements given, one blank, one absent."""
    parts = _lean(raw)
    parts["protocol"]["governance"] = {
        "ethics_approval": STATEMENTS["ethics_approval"],
        "reference_standard": "  ",
        "interpretation": STATEMENTS["interpretation"],
    }
    return _render(parts, tmp_path_factory.mktemp("partial"))


def _meta(pdf: Path) -> tuple[str, str]:
    """(title, subject) of the PDF's document information."""
    meta = pypdf.PdfReader(pdf).metadata
    assert meta is not None
    return str(meta.title), str(meta.subject)


def _pages(pdf: Path, poppler_text: Callable[[Path], str]) -> list[str]:
    return poppler_text(pdf).split("\f")[: len(pypdf.PdfReader(pdf).pages)]


def test_draft_fields_lists_the_missing_statements_in_order() -> None:
    names = [f.name for f in GOVERNANCE_FIELDS]
    assert names == ["ethics_approval", "reference_standard", "interpretation", "human_oversight"]
    assert draft_fields({"name": "x"}) == names  # no governance at all
    assert draft_fields({"name": "x", "governance": None}) == names
    assert draft_fields({"name": "x", "governance": dict(STATEMENTS)}) == []
    blank = {**STATEMENTS, "reference_standard": " \n", "human_oversight": None}
    assert draft_fields({"name": "x", "governance": blank}) == ["reference_standard", "human_oversight"]


def test_a_draft_says_so_on_every_page(
    raw: dict[str, Any], report: ReportArtifacts, poppler_text: Callable[[Path], str]
) -> None:
    assert "governance" not in raw["protocol"]
    pages = _pages(report.pdf, poppler_text)
    assert len(pages) > 5
    for number, page in enumerate(pages, start=1):
        header = page.strip().splitlines()[0]
        assert header.startswith("DRAFT"), (number, header)
    title, subject = _meta(report.pdf)
    assert subject.startswith("DRAFT: Calibration validation report, protocol demo")
    assert title == raw["protocol"]["title"]  # the title itself is unchanged


def test_a_draft_shows_each_missing_statement_as_a_required_placeholder(
    report: ReportArtifacts, text: str
) -> None:
    sign_off = squash(text[text.index("Sign-off\n") :])
    assert "DRAFT. 4 of 4 statements that only the site can make are missing" in sign_off
    for field in GOVERNANCE_FIELDS:
        assert f"Required before sign-off: {field.label.lower()}." in sign_off
        assert f"Add it to the protocol as report.governance.{field.name} and run again." in sign_off


def test_with_every_statement_given_there_is_no_draft_anywhere(
    complete: ReportArtifacts, pdf_text: Callable[[Path], str], poppler_text: Callable[[Path], str]
) -> None:
    out = poppler_text(complete.pdf)
    assert "DRAFT" not in out
    assert "Required before sign-off" not in out
    title, subject = _meta(complete.pdf)
    assert "DRAFT" not in subject and "DRAFT" not in title
    assert "document SC-0123456789AB" in subject
    statements = squash(pdf_text(complete.pdf))
    for field in GOVERNANCE_FIELDS:  # printed literally (markup in the text is not interpreted)
        assert f"{field.label} {STATEMENTS[field.name]}" in statements


def test_running_header_carries_the_document_id(
    complete: ReportArtifacts, poppler_text: Callable[[Path], str]
) -> None:
    pages = _pages(complete.pdf, poppler_text)
    for number, page in enumerate(pages, start=1):
        assert f"Page {number} of {len(pages)}" in page
        if number > 1:
            header = page.strip().splitlines()[:3]  # pdftotext: title and right-hand side on their own lines
            assert "Document SC-0123456789AB · protocol demo" in header


def test_partial_statements_leave_only_the_missing_ones_as_placeholders(
    partial: ReportArtifacts, pdf_text: Callable[[Path], str]
) -> None:
    out = squash(pdf_text(partial.pdf))
    assert "DRAFT. 2 of 4 statements" in out
    assert "Required before sign-off: reference standard." in out  # blank counts as missing
    assert "Required before sign-off: human oversight." in out
    assert "Required before sign-off: ethics approval." not in out
    assert f"Ethics approval {STATEMENTS['ethics_approval']}" in out
    assert f"Interpretation {STATEMENTS['interpretation']}" in out


def test_provenance_tables(raw: dict[str, Any], text: str) -> None:
    prov = raw["provenance"]
    section = text[text.index("Provenance\n") : text.index("Sign-off\n")]
    # hashes in the auditor's order, absent ones said so, then the others recorded
    labels = [
        "Protocol (the YAML file as run)",
        "Model file",
        "Dataset manifest (sorted SOP Instance UID + file sha256 pairs)",
        "Labels (ground-truth table)",
        "Predictions (predictions.csv)",
        "DICOM instances (set of SOP Instance UIDs)",
    ]
    flat = squash(section)
    positions = [flat.index(label) for label in labels]
    assert positions == sorted(positions)
    assert f"Protocol (the YAML file as run) {prov['sha256']['protocol']}" in flat
    assert "Dataset manifest (sorted SOP Instance UID + file sha256 pairs) not recorded" in flat
    assert "sort the lines bytewise (LC_ALL=C sort)" in flat
    # seeds, each named by the protocol field it comes from
    assert "Fit / evaluation split (calibration.split.seed) 20261202" in flat
    assert "Bootstrap resampling (evaluation.bootstrap.seed) 7" in flat
    # every dependency recorded, with its version, after sitecal and Python
    assert "sitecal 0.1.0 Python 3.11.7" in flat
    for name, version in prov["dependencies"].items():
        assert re.search(rf"\b{re.escape(name)} {re.escape(version)}\b", flat), name
    assert f"all {len(prov['dependencies'])} runtime dependencies" in flat
    assert prov["command_line"] in flat


def test_provenance_prints_the_architecture_its_arguments_and_code_hash(
    raw: dict[str, Any], tmp_path: Path, poppler_text: Callable[[Path], str]
) -> None:
    parts = _lean(raw)
    parts["provenance"]["model"] |= {
        "architecture": "cxr.nets:DenseNet121",
        "architecture_args": {"out_channels": 3, "spatial_dims": 2},
        "code_sha256": "c" * 64,
    }
    flat = squash(poppler_text(_render(parts, tmp_path).pdf))
    assert 'Architecture cxr.nets:DenseNet121 {"out_channels": 3, "spatial_dims": 2}' in flat
    assert f"Architecture code sha256 {'c' * 64}" in flat
