"""Fixtures of the report tests: the JSON fixtures, one full report per session, text extraction."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pypdf
import pytest

from sitecal.report import ReportArtifacts, ReportInputs, render_report

FIXTURES = Path(__file__).parent / "fixtures"

Parts = dict[str, dict[str, Any]]


def _inputs(parts: Parts) -> ReportInputs:
    return ReportInputs(parts["evaluation"], parts["calibration"], parts["provenance"], parts["protocol"])


def _pdf_text(pdf: Path) -> str:
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(pdf).pages)


@pytest.fixture(scope="session")
def raw() -> Parts:
    return {
        name: json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
        for name in ("evaluation", "calibration", "provenance", "protocol")
    }


@pytest.fixture
def parts(raw: Parts) -> Parts:
    """A fresh deep copy of the fixtures that a test may edit."""
    return copy.deepcopy(raw)


@pytest.fixture
def lean(parts: Parts) -> Parts:
    """The fixtures with the reliability curves removed except for one scanner: fewer figures, faster."""
    ev = parts["evaluation"]
    for group in [ev["overall"], *[g for gs in ev["subgroups"].values() for g in gs]]:
        if group is not ev["subgroups"]["scanner"][0]:
            group.pop("reliability", None)
    return parts


@pytest.fixture
def build(tmp_path: Path) -> Callable[..., ReportArtifacts]:
    """Render edited fixtures into a fresh folder: ``build(parts, page_size="A4")``."""
    counter = iter(range(1000))

    def run(parts: Parts, **kwargs: Any) -> ReportArtifacts:
        return render_report(_inputs(parts), tmp_path / f"run{next(counter)}", **kwargs)

    return run


@pytest.fixture
def inputs() -> Callable[[Parts], ReportInputs]:
    return _inputs


@pytest.fixture(scope="session")
def pdf_text() -> Callable[[Path], str]:
    """Text of a PDF as pypdf extracts it (cells stay on one line)."""
    return _pdf_text


@pytest.fixture(scope="session")
def poppler_text() -> Callable[[Path], str]:
    """Text of a PDF as poppler's pdftotext extracts it (CI installs poppler-utils)."""

    def run(pdf: Path) -> str:
        if shutil.which("pdftotext") is None:
            pytest.fail("pdftotext (poppler-utils) is not installed: run .ci/run, which installs it")
        return subprocess.run(
            ["pdftotext", "-enc", "UTF-8", str(pdf), "-"], check=True, capture_output=True, encoding="utf-8"
        ).stdout

    return run


@pytest.fixture(scope="session")
def report(raw: Parts, tmp_path_factory: pytest.TempPathFactory) -> ReportArtifacts:
    """The full A4 report built from the fixtures, once per session."""
    return render_report(_inputs(copy.deepcopy(raw)), tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="session")
def text(report: ReportArtifacts) -> str:
    return _pdf_text(report.pdf)
