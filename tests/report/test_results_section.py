"""How the Results and Methods describe the smooth ECE and label its interval (read from the document)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sitecal.report._context import Context
from sitecal.report._inputs import ReportInputs
from sitecal.report._methods import _DEFINITIONS, _bootstrap_text
from sitecal.report._results import SMOOTH_ECE_COVERAGE, guide_text
from sitecal.report._styles import make_styles, register_fonts

BOOTSTRAP = {"method": "percentile", "n_resamples": 1000, "seed": 7, "refit": False, "cluster": "patient"}


def _context(tmp_path: Path, metrics: list[str]) -> Context:
    evaluation: dict[str, Any] = {"metrics": metrics, "bootstrap": {**BOOTSTRAP, "level": 0.95}}
    inputs = ReportInputs(evaluation, {}, {}, {"name": "t"})
    return Context(inputs=inputs, styles=make_styles(register_fonts()), width=400.0, figures_dir=tmp_path)


def test_the_results_guide_says_what_the_smooth_ece_is_and_labels_its_interval(tmp_path: Path) -> None:
    text = guide_text(_context(tmp_path, ["ece", "ece_debiased", "smooth_ece", "nll"]))
    assert (
        "Smooth ECE (Błasiok &amp; Nakkiran 2023) needs no bins and is a consistent calibration measure"
        in text
    )
    assert "the fixed point where it equals the error it measures" in text
    assert "still a plug-in estimate of a non-negative quantity, biased upward in small groups" in text
    # the measured coverage, from benchmarks/coverage_smooth_ece.md
    assert f"its percentile interval, built around that biased estimate, {SMOOTH_ECE_COVERAGE}." in text
    assert SMOOTH_ECE_COVERAGE.startswith("never contained a calibrated group's true value of 0")
    assert "0% coverage" in SMOOTH_ECE_COVERAGE and "95–98%" in SMOOTH_ECE_COVERAGE


def test_the_methods_define_it_and_say_how_its_interval_is_computed(tmp_path: Path) -> None:
    definition = _DEFINITIONS["smooth_ece"]
    assert definition.startswith("Smooth ECE: top-label smooth calibration error without bins (Błasiok")
    assert "fixed point" in definition and "biased upward in small groups" in definition
    text = _bootstrap_text(_context(tmp_path, ["ece", "smooth_ece"]))
    assert "its kernel width is found again in every resample" in text
    assert "does not cover a calibrated model's true value of 0 (benchmarks/coverage_smooth_ece.md)" in text
    assert "It is not compared between groups" in text


def test_nothing_is_said_of_a_metric_the_protocol_does_not_report(tmp_path: Path) -> None:
    ctx = _context(tmp_path, ["ece", "ece_debiased"])
    assert "Smooth ECE" not in guide_text(ctx) and "Smooth ECE" not in _bootstrap_text(ctx)
