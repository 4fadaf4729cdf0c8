"""The report as a document: two runs give the same bytes and text, every section is there, and the
numbers of one subgroup read back from the PDF are those of evaluation.json.

One site's InstitutionName is rewritten, in every file, to text that looks like reportlab markup; it must
come out literally, in the tables and the headings that name it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pydicom
import pytest
from pypdf import PdfReader
from tests.conftest import assert_exit_is_the_verdicts, write_demo_protocol

from sitecal.cli import main
from sitecal.demo import generate_demo
from sitecal.report import format_interval
from sitecal.report._marks import Marks

pytestmark = pytest.mark.slow

HOSTILE = '<b>St. Mary\'s & "Ünïcødé" <font color=red>'
EPOCH = "1796203800"
STARTED = datetime.fromtimestamp(int(EPOCH), UTC)  # 2026-12-02 09:30:00 UTC


def _text(pdf: Path) -> str:
    return "\n".join(page.extract_text() or "" for page in PdfReader(pdf).pages)


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("document")
    manifest = generate_demo(root / "data", n_studies=300, seed=11)
    renamed = manifest.sites[0]
    for path in sorted(manifest.dicom_dir.rglob("*")):
        if not path.is_file():
            continue
        try:
            ds = pydicom.dcmread(path)
        except Exception:  # the planted non-DICOM and truncated files
            continue
        if ds.get("InstitutionName") == renamed:
            ds.InstitutionName = HOSTILE
            ds.save_as(path)
    protocol = write_demo_protocol(root, manifest, inputs={"num_workers": 0})
    previous = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = EPOCH
    try:
        folders = []
        for i in range(2):
            code = main(["run", str(protocol), "--no-progress", "--workers", "1"])
            (folder,) = (root / "reports").glob("demo-*")
            assert_exit_is_the_verdicts(code, folder)
            kept = root / f"run-{i}"
            shutil.move(folder, kept)  # the second run gets the same folder name, as a rerun would
            folders.append((folder.name, kept))
    finally:
        if previous is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = previous
    yield {"folders": folders, "renamed": renamed}


def test_two_runs_give_identical_evaluation_pdf_and_dicom_bytes(runs: dict) -> None:
    (name_a, a), (name_b, b) = runs["folders"]
    assert name_a == name_b == f"demo-{STARTED:%Y%m%dT%H%M%SZ}"
    # with the run time fixed, even the PDF and its DICOM wrapping are the same bytes
    tables = (
        "evaluation.json",
        "calibration.json",
        "predictions.csv",
        "cohort.csv",
        "exclusions.csv",
        "report.pdf",
        "report.dcm",
    )
    for artifact in tables:
        assert (a / artifact).read_bytes() == (b / artifact).read_bytes(), artifact
    text_a, text_b = _text(a / "report.pdf"), _text(b / "report.pdf")
    assert text_a == text_b
    assert f"{STARTED:%Y-%m-%d %H:%M} UTC" in text_a  # the run date is SOURCE_DATE_EPOCH's


def test_every_section_heading_is_in_the_text_and_the_outline(runs: dict) -> None:
    pdf = runs["folders"][0][1] / "report.pdf"
    reader = PdfReader(pdf)
    outline = [item.title for item in reader.outline if not isinstance(item, list)]
    text = _flat(_text(pdf))
    expected = [
        "Intended use",
        "Data",
        "Cohort characteristics",
        "Methods",
        "Fitted temperatures",
        "Results",
        "Fairness",
        "Acceptance criteria",
        "Limitations",
        "Provenance",
        "Sign-off",
        "Appendix",
    ]
    numbered = [re.sub(r"^\d+\s+", "", title) for title in outline]
    positions = []
    for heading in expected:
        assert heading in numbered, (heading, numbered)
        number = outline[numbered.index(heading)].split()[0]
        found = text.find(f"{number} {heading}")
        assert found >= 0, heading
        positions.append(found)
    assert positions == sorted(positions)


def test_one_subgroup_reads_back_from_the_pdf_as_in_evaluation_json(runs: dict) -> None:
    folder = runs["folders"][0][1]
    evaluation = json.loads((folder / "evaluation.json").read_text())
    (group,) = [g for g in evaluation["subgroups"]["site"] if g["group"] == HOSTILE]
    text = _flat(_text(folder / "report.pdf"))
    cells = [f"{HOSTILE} n = {group['n']:,} studies {group['n_patients']:,} patients"]
    for metric in evaluation["metrics"]:
        entry = group["metrics"][metric]
        before, after, change = (entry[k] for k in ("before", "after", "difference"))
        # the table's own marks: a clamped debiased ECE prints "< noise", an estimate outside its interval
        # gets a dagger (report._marks); the numbers are format_interval's
        marks = Marks()
        cells.append(marks.interval(before, metric=metric))
        cells.append(marks.interval(after, metric=metric))
        cells.append(marks.interval(change, signed=True))
        plain = format_interval(before["estimate"], before["low"], before["high"])
        assert marks.interval(before, metric=metric).replace(" †", "") == plain or "clamped" in marks.used
    start = text.find(cells[0])
    assert start >= 0, "the site group's cell is not in the results table"
    position = start
    for cell in cells[1:]:
        found = text.find(cell, position)
        assert found >= 0, cell
        position = found
    assert position - start < 600  # all in that group's rows


def test_markup_in_a_header_prints_literally(runs: dict) -> None:
    folder = runs["folders"][0][1]
    text = _flat(_text(folder / "report.pdf"))
    # cover, sources, characteristics, results, fairness (ranking and spread), heterogeneity, LOSO
    assert text.count(HOSTILE) >= 7
    assert 'St. Mary\'s & "Ünïcødé"' in text and "&amp;" not in text and "&lt;" not in text
