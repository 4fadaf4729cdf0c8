"""Sample-size planning: the simulated chance to pass, against a normal approximation, and the command."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import norm
from tests.conftest import DEMO_PROTOCOL, VERDICT_EXIT

from sitecal.cli import main
from sitecal.errors import DataError
from sitecal.metrics import softmax
from sitecal.protocol import Protocol
from sitecal.run.planning import (
    TARGET_POWER,
    assumed_model,
    evaluated_probabilities,
    fitted_model,
    plan_criteria,
    read_run,
)

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


SPLIT_MESSAGE = (
    "split is none of fit, evaluation or fold 1 to K, or the column mixes a one split's parts with folds"
)


def _calibration_json(per: str | None, **fields: object) -> dict:
    """The fields of calibration.json that --from-run reads (what `sitecal run` writes)."""
    return {
        "method": "temperature",
        "per": per,
        "class_names": list(CLASSES),
        "min_group_size": 10,
        "fallback": "global",
        **fields,
    }


def test_a_run_folder_gives_one_model_per_calibration_group(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    with open(tmp_path / "cohort.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["study_key", "patient_key", "label", "scanner", "split"])
        for i in range(40):
            w.writerow(
                [f"S-{i}", f"P-{i}", CLASSES[i % 3], "A" if i % 2 else "B", "evaluation" if i < 30 else "fit"]
            )
    with open(tmp_path / "predictions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["study_key", "patient_key", "split_rank", *(f"logit:{c}" for c in CLASSES)])
        for i in range(40):
            w.writerow([f"S-{i}", f"P-{i}", i, *rng.normal(size=3).round(4)])
    (tmp_path / "calibration.json").write_text(json.dumps(_calibration_json("scanner")))
    models = fitted_model(tmp_path)
    assert set(models) == {"all studies", "A", "B"}
    assert "15 evaluation studies" in models["A"].description  # 30 evaluation rows, half on A
    probs, labels = models["A"].draw(100, np.random.default_rng(1))
    assert probs.shape == (100, 3) and labels.max() < 3
    (tmp_path / "calibration.json").unlink()
    with pytest.raises(DataError, match=r"calibration\.json: not found"):
        fitted_model(tmp_path)


def vendor_run(
    root: Path,
    *,
    n: int = 240,
    nan_rows: tuple[int, ...] = (3, 10),
    scanner_c: int = 0,
    refit: bool = False,
    n_resamples: int = 50,
) -> dict:
    """A cross-fitted `sitecal run` of a small vendor predictions file (no DICOM, no model run here).

    Scanners A and B alternate (one study per patient; A overconfident, so the temperatures differ), the
    first ``scanner_c`` studies are on scanner C, and the rows ``nan_rows`` have a NaN logit (excluded).
    Three folds, ``n_resamples`` resamples (``refit``: the temperatures refitted in each), no study-size
    simulation: the run folder --from-run reads, made in seconds. Returns the protocol, the run folder,
    the key file and the exit code, which must be the verdict's.
    """
    rng = np.random.default_rng(5)
    with open(root / "scores.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["StudyInstanceUID", "patient", "scanner", "label", *(f"logit:{c}" for c in CLASSES)])
        for i in range(n):
            y = int(rng.integers(3))
            z = rng.normal(size=3)
            z[y] += 1.5
            z *= 2.0 if i % 2 else 1.2
            cells = [repr(float(v)) for v in z]
            if i in nan_rows:
                cells[1] = "nan"
            scanner = "C" if i < scanner_c else "AB"[i % 2]
            w.writerow([f"1.2.826.0.1.{i}", f"PT{i}", scanner, CLASSES[y], *cells])
    key = root / "key"
    key.write_text("0123456789abcdef" * 4 + "\n")
    key.chmod(0o600)
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw.pop("inputs")
    raw["model"] = {"name": "vendor model", "version": "1", "class_names": list(CLASSES)}
    raw["data"] = {"predictions": "scores.csv", "key": "StudyInstanceUID", "patient_column": "patient"}
    raw["data"]["label_column"] = "label"
    raw["subgroups"] = {"scanner": {"column": "scanner", "label": "Scanner"}}
    raw["calibration"].update({"min_group_size": 30, "split": {"by": "crossfit", "folds": 3, "seed": 1}})
    bootstrap = {"n_resamples": n_resamples, "level": 0.95, "method": "percentile", "seed": 7, "refit": refit}
    raw["evaluation"].update(
        {"bootstrap": bootstrap, "planning": {"simulations": 0}, "disparity_metrics": ["nll"]}
    )
    raw["report"]["output_dir"] = str(root / "reports")
    raw["privacy"] = {"key_file": str(key)}
    protocol = root / "protocol.yaml"
    protocol.write_text(yaml.safe_dump(raw, sort_keys=False))
    code = main(["run", str(protocol), "--no-progress"])
    (folder,) = (p for p in (root / "reports").iterdir() if p.is_dir() and not p.name.startswith("."))
    if (folder / "evaluation.json").is_file():
        assert code == VERDICT_EXIT[json.loads((folder / "evaluation.json").read_text())["verdict"]]
    return {"protocol": protocol, "folder": folder, "key": key, "code": code}


@pytest.fixture(scope="module")
def crossfit_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return vendor_run(tmp_path_factory.mktemp("crossfit"))


def test_a_cross_fitted_run_is_planned_from_its_out_of_fold_probabilities(crossfit_run: dict) -> None:
    folder = crossfit_run["folder"]
    run = read_run(folder)
    assert run.split.method == "crossfit" and run.split.folds == 3
    probs, groups = evaluated_probabilities(run)
    assert probs.shape == (238, 3)  # every analysed study is evaluated: 240 less the 2 NaN rows
    assert sorted(set(groups.tolist())) == ["A", "B"]
    # the run's own after-calibration NLL is the mean over these probabilities: each study calibrated by
    # its fold's temperatures, fitted on the other folds
    labels = run.labels[run.split.held]
    nll = float(-np.log(probs[np.arange(labels.shape[0]), labels]).mean())
    evaluation = json.loads((folder / "evaluation.json").read_text())
    assert nll == pytest.approx(evaluation["overall"]["metrics"]["nll"]["after"]["estimate"], rel=1e-12)
    # ... and not the deployed temperatures of calibration.json (fitted on every study, seen ones)
    deployed = json.loads((folder / "calibration.json").read_text())["groups"]
    t = np.array([deployed[g]["temperature"] for g in groups])
    seen = softmax(run.logits[run.split.held], temperature=t)
    assert abs(float(-np.log(seen[np.arange(labels.shape[0]), labels]).mean()) - nll) > 1e-4


def test_plan_from_a_cross_fitted_run(crossfit_run: dict, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", str(crossfit_run["protocol"]), "--from-run", str(crossfit_run["folder"])]
    assert main([*args, "--simulations", "20", "--sizes", "100,200", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "  all studies: drawn from the run's 238 evaluation studies of all studies, calibrated" in out
    assert "  A: drawn from the run's 119 evaluation studies of A, calibrated" in out
    assert "  B: drawn from the run's 119 evaluation studies of B, calibrated" in out
    assert "calibration-per-scanner (ece_debiased after calibration, below):" in out


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        (
            "cohort.csv",
            lambda text: text.replace(",fold 2\n", ",fold two\n", 1),
            SPLIT_MESSAGE,
        ),
        (
            "cohort.csv",
            lambda text: text.replace(",fold 2\n", ",evaluation\n", 1),
            SPLIT_MESSAGE,
        ),
        ("cohort.csv", lambda text: text.replace("scanner", "site", 1), "cohort.csv: no column scanner."),
        (
            "predictions.csv",
            lambda text: text.replace("logit:nodule", "logit:Nodule", 1),
            "predictions.csv: no column logit:nodule.",
        ),
        (
            "calibration.json",
            lambda text: text.replace('"method": "temperature"', '"method": "platt"'),
            "calibration.json: method: expected one of temperature, vector, matrix, dirichlet, histogram, "
            "isotonic, beta.",
        ),
        (
            "calibration.json",
            lambda text: text.replace('"min_group_size": 30', '"min_group_size": true'),
            "calibration.json: min_group_size: expected a whole number >= 1.",
        ),
    ],
)
def test_a_run_folder_that_is_not_the_run_s_is_named(
    crossfit_run: dict, tmp_path: Path, name: str, edit: object, message: str
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(crossfit_run["folder"], folder)
    path = folder / name
    path.write_text(edit(path.read_text()))  # type: ignore[operator]
    with pytest.raises(DataError) as caught:
        read_run(folder)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and text.endswith(
        "Point --from-run at the unedited folder of a finished run."
    )
    assert message in text


def test_a_nan_logit_in_predictions_csv_is_named_by_its_line(crossfit_run: dict, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(crossfit_run["folder"], folder)
    lines = (folder / "predictions.csv").read_text().split("\n")
    cells = lines[5].split(",")
    cells[-1] = "nan"
    lines[5] = ",".join(cells)
    (folder / "predictions.csv").write_text("\n".join(lines))
    with pytest.raises(
        DataError, match=re.escape("predictions.csv: line 6: a logit is not a finite number.")
    ):
        read_run(folder)


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
