"""The Methods and Fitted temperatures sections say what the empirical-Bayes policy did, and why."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pypdf
import pytest
from reportlab.lib.pagesizes import A4
from reportlab.platypus import Flowable, SimpleDocTemplate
from tests.results import synthetic

from sitecal.report._context import Context
from sitecal.report._fitted import fitted_temperatures
from sitecal.report._inputs import ReportInputs
from sitecal.report._methods import methods
from sitecal.report._styles import make_styles, register_fonts


@pytest.fixture(scope="module")
def inputs() -> ReportInputs:
    outcome = synthetic.document("empirical-bayes-refit")
    calibration = {"method": "temperature", "per": "scanner", **outcome.temperatures.to_dict()}
    return ReportInputs(outcome.document, calibration, {}, {"name": "t"})


def _render(folder: Path, builder: Callable[[Context], list[Flowable]], inputs: ReportInputs) -> str:
    pdf = folder / "section.pdf"
    doc = SimpleDocTemplate(str(pdf), pagesize=(A4[0], 4 * A4[1]), leftMargin=50, rightMargin=50)
    ctx = Context(inputs=inputs, styles=make_styles(register_fonts()), width=doc.width, figures_dir=folder)
    doc.build(builder(ctx))
    text = "\n".join(page.extract_text() for page in pypdf.PdfReader(pdf).pages)
    return re.sub(r"\s+", " ", text)


def test_methods_word_the_reml_estimate_the_weight_and_the_repeated_shrinkage(
    tmp_path: Path, inputs: ReportInputs
) -> None:
    text = _render(tmp_path, methods, inputs)
    cal: Any = inputs.calibration
    assert "Empirical Bayes (Efron & Morris, 1975)" in text
    assert "restricted maximum likelihood (REML)" in text
    assert "τ² / (τ² + v" in text and "minimum group size is not used" in text
    assert f"exp(μ) = {math.exp(cal['mean_log_temperature']):.3g}"[:12] in text
    assert "repeat the whole shrinkage in every resample" in text
    assert "pair the b-th shrunk temperature with the b-th resample" in text
    assert "smaller group uses" not in text  # the threshold rule of the other policies


def test_the_temperature_table_shows_the_weights_and_intervals(tmp_path: Path, inputs: ReportInputs) -> None:
    text = _render(tmp_path, fitted_temperatures, inputs)
    assert text.count("empirical Bayes, w = ") == 3
    rows = {r["group"]: r for r in inputs.evaluation["subgroups"]["scanner"]}
    for name, row in rows.items():
        weight = inputs.calibration["groups"][name]["weight"]
        assert f"empirical Bayes, w = {weight:.2f}" in text
        assert row["temperature_interval"]["low"] > 0
    assert "its interval repeats the whole shrinkage" in text
    assert "—" not in text.split("Global")[0]  # every group has an interval
