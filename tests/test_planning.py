"""Sample-size planning: the simulated chance to pass, against a normal approximation, and the command."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import norm
from tests.conftest import DEMO_PROTOCOL

from sitecal.cli import main
from sitecal.errors import DataError
from sitecal.planning import TARGET_POWER, assumed_model, fitted_model, plan_criteria
from sitecal.protocol import Protocol

CLASSES = ("normal", "nodule", "effusion")


def _protocol(acceptance: list[dict]) -> Protocol:
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["acceptance"] = acceptance
    return Protocol.model_validate(raw)


def test_the_assumed_model_is_calibrated_with_the_assumed_accuracy() -> None:
    probs, labels = assumed_model([0.5, 0.3, 0.2], 0.8).draw(50_000, np.random.default_rng(0))
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    assert correct.mean() == pytest.approx(0.8, abs=0.01)
    for low in (0.4, 0.6, 0.8):  # calibrated: accuracy equals mean confidence in each band
        band = (confidence > low) & (confidence <= low + 0.2)
        assert correct[band].mean() == pytest.approx(confidence[band].mean(), abs=0.02)
    assert np.bincount(labels, minlength=3) / labels.shape[0] == pytest.approx([0.5, 0.3, 0.2], abs=0.06)


def test_the_pass_rate_of_an_accuracy_criterion_matches_the_normal_approximation() -> None:
    # accuracy A = 0.75 against 'above 0.70': the lower 97.5 % bound clears 0.70 with chance about
    # Phi((A - 0.70) / se - 1.96), se = sqrt(A (1 - A) / n)
    protocol = _protocol([{"id": "acc", "metric": "accuracy", "above": 0.7}])
    plans = plan_criteria(
        protocol, {"a": assumed_model([0.6, 0.25, 0.15], 0.75)}, sizes=(200, 600), n_simulations=300
    )
    (plan,) = plans
    for n, rate in zip(plan.sizes, plan.pass_rate, strict=True):
        se = math.sqrt(0.75 * 0.25 / n)
        expected = float(norm.cdf(0.05 / se - norm.ppf(0.975)))
        assert rate == pytest.approx(expected, abs=0.08), (n, rate, expected)
    assert plan.pass_rate[1] > plan.pass_rate[0]
    assert plan.needed == 600  # expected 0.30 at 200 and 0.85 at 600
    assert TARGET_POWER == 0.8


def test_the_smallest_size_reaching_the_target_is_named() -> None:
    protocol = _protocol([{"id": "acc", "metric": "accuracy", "above": 0.6}])
    (plan,) = plan_criteria(
        protocol, {"a": assumed_model([0.6, 0.25, 0.15], 0.8)}, sizes=(20, 400), n_simulations=40
    )
    assert plan.pass_rate[1] == 1.0 and plan.needed == 400


def test_bad_assumptions_are_refused() -> None:
    with pytest.raises(DataError, match="one share per class"):
        assumed_model([0.7, 0.7], 0.8)
    with pytest.raises(DataError, match="between the largest prevalence"):
        assumed_model([0.6, 0.4], 0.55)


def test_a_run_folder_gives_one_model_per_calibration_group(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    with open(tmp_path / "cohort.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["study_key", "patient_key", "label", "scanner", "split"])
        for i in range(40):
            w.writerow(
                [f"S-{i}", f"P-{i}", "normal", "A" if i % 2 else "B", "evaluation" if i < 30 else "fit"]
            )
    with open(tmp_path / "predictions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["study_key", "patient_key", "split_rank", *(f"logit:{c}" for c in CLASSES)])
        for i in range(40):
            w.writerow([f"S-{i}", f"P-{i}", i, *rng.normal(size=3).round(4)])
    calibration = {
        "per": "scanner",
        "global_fit": {"temperature": 1.5},
        "groups": {"A": {"temperature": 2.0}},
    }
    (tmp_path / "calibration.json").write_text(json.dumps(calibration))
    models = fitted_model(tmp_path)
    assert set(models) == {"all studies", "A", "B"}
    assert "15 evaluation studies" in models["A"].description  # 30 evaluation rows, half on A
    probs, labels = models["A"].draw(100, np.random.default_rng(1))
    assert probs.shape == (100, 3) and labels.max() < 3
    (tmp_path / "calibration.json").unlink()
    with pytest.raises(DataError, match=r"calibration\.json: not found"):
        fitted_model(tmp_path)


def test_the_command_prints_a_table_per_criterion_and_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", str(DEMO_PROTOCOL), "--no-progress", "--simulations", "20", "--sizes", "300,100"]
    assert main(args) == 2
    assert "give --prevalence" in capsys.readouterr().err
    assert main([*args, "--prevalence", "0.6,0.4", "--accuracy", "0.8"]) == 2
    assert "2 shares for 3 classes" in capsys.readouterr().err
    assert main([*args, "--prevalence", "0.6,0.25,0.15", "--accuracy", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "calibration-per-scanner (ece_debiased after calibration, below):" in out
    assert "accuracy-overall (accuracy after calibration, above):" in out
    assert "needed for 80%" in out and out.count("assumed model") >= 3
    assert "group            100    300" in out  # the sizes asked for, sorted
    assert main([*args[:-2], "--sizes", "5,x", "--prevalence", "0.6,0.25,0.15", "--accuracy", "0.8"]) == 2
    assert "--sizes '5,x': give whole numbers" in capsys.readouterr().err


def test_slope_and_o_e_criteria_are_planned_with_the_recalibration_intervals() -> None:
    # the slope's Wald interval at n = 400 is about +-0.2 around 1 for this model: [0.5, 2] is cleared,
    # [0.95, 1.05] never; O:E within [0.8, 1.25] is cleared (O:E's interval is about +-0.06)
    protocol = _protocol(
        [
            {"id": "wide", "metric": "slope", "within": [0.5, 2.0]},
            {"id": "narrow", "metric": "slope", "within": [0.95, 1.05]},
            {"id": "oe", "metric": "oe_ratio", "within": [0.8, 1.25]},
        ]
    )
    plans = plan_criteria(
        protocol, {"all studies": assumed_model([0.6, 0.25, 0.15], 0.75)}, sizes=(400,), n_simulations=40
    )
    rates = {p.criterion: p.pass_rate[0] for p in plans}
    assert rates["wide"] >= 0.9 and rates["narrow"] == 0.0 and rates["oe"] >= 0.9
    assert {p.group for p in plans} == {"all studies"}
