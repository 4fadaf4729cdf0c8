"""``sitecal apply``: a run's temperatures on scores made elsewhere, checked against scipy's softmax and
against the deployable PyTorch wrapper; bad input named, no input column copied."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import softmax as scipy_softmax
from tests.conftest import TEST_PSEUDONYM_KEY

from sitecal._seal import COMPLETE, write_seal
from sitecal.calibration import GroupTemperatures, fit_group_temperatures
from sitecal.cli import main
from sitecal.errors import DataError
from sitecal.inference import GroupTemperatureScaler
from sitecal.results import CalibrationDocument, write_document
from sitecal.run.apply import apply_calibration, apply_calibration_file
from sitecal.run.sealed import DEFAULT_KEY_NAME

CLASSES = ["normal", "nodule", "effusion"]


@pytest.fixture
def fitted(tmp_path: Path) -> tuple[GroupTemperatures, Path]:
    """Temperatures per scanner (two groups of their own, a small one on the global fallback)."""
    rng = np.random.default_rng(3)
    n = 600
    scanner = rng.choice(["Ysio Demo", "DRX Demo", "Tiny"], size=n, p=[0.5, 0.47, 0.03])
    logits = rng.normal(size=(n, 3)) * np.where(scanner == "Ysio Demo", 3.0, 1.2)[:, None]
    labels = np.array([rng.choice(3, p=p) for p in scipy_softmax(logits / 2.0, axis=1)])
    temps = fit_group_temperatures(logits, labels, scanner, min_group_size=50)
    document = CalibrationDocument.from_dict(
        {
            "schema_version": CalibrationDocument.SCHEMA_VERSION,
            "method": "temperature",
            "per": "scanner",
            "class_names": CLASSES,
            "model_sha256": None,
            **temps.to_dict(),
        },
        source="calibration.json",
    )
    path = tmp_path / "run" / "calibration.json"
    write_document(path, document)
    # sealed as a run seals its folder, under a site key kept where a run keeps it (beside the folder)
    key_file = tmp_path / DEFAULT_KEY_NAME
    key_file.write_text(TEST_PSEUDONYM_KEY + "\n")
    key_file.chmod(0o600)
    write_seal(path.parent, TEST_PSEUDONYM_KEY.encode(), state=COMPLETE)
    return temps, path


def _expected(temps: GroupTemperatures, logits: np.ndarray, groups: list[str]) -> np.ndarray:
    t = np.array([temps.temperature_for(g) for g in groups])
    return scipy_softmax(logits / t[:, None], axis=1)


def test_logits_are_divided_by_their_groups_temperature(fitted: tuple[GroupTemperatures, Path]) -> None:
    temps, _ = fitted
    assert temps.groups["Ysio Demo"].source == "own" and temps.groups["Tiny"].source == "global_fallback"
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 3.0, 0.0], [1.0, 1.0, 4.0], [0.0, 0.0, 0.0]])
    groups = ["Ysio Demo", "DRX Demo", "Tiny", "never seen"]
    got = apply_calibration(temps, logits, groups)
    np.testing.assert_allclose(got, _expected(temps, logits, groups), rtol=0, atol=1e-15)
    # the same as the deployable PyTorch wrapper's calibrated logits
    scaler = GroupTemperatureScaler(torch.nn.Identity(), temps)
    np.testing.assert_allclose(
        got, scipy_softmax(scaler.calibrate_logits(logits, groups), axis=1), rtol=0, atol=1e-15
    )
    # from calibration.json as loaded by json: the same numbers
    np.testing.assert_array_equal(apply_calibration(temps.to_dict(), logits, groups), got)


def test_probabilities_are_calibrated_as_their_logarithms(fitted: tuple[GroupTemperatures, Path]) -> None:
    temps, _ = fitted
    probs = np.array([[0.7, 0.2, 0.1], [0.05, 0.05, 0.9]])
    groups = ["Ysio Demo", "DRX Demo"]
    got = apply_calibration(temps, probs, groups, kind="prob")
    np.testing.assert_allclose(got, _expected(temps, np.log(probs), groups), rtol=0, atol=1e-14)
    assert not np.allclose(got, probs)  # a temperature other than 1 moves them


def test_a_scores_file_is_calibrated_row_by_row_without_copying_its_columns(
    fitted: tuple[GroupTemperatures, Path], tmp_path: Path
) -> None:
    temps, calibration = fitted
    scores = tmp_path / "vendor.csv"
    scores.write_text(
        "AccessionNumber,scanner,logit:normal,logit:nodule,logit:effusion\n"
        "ACC-0001,Ysio   Demo,2.0,0.5,-1.0\n"  # whitespace collapsed, as in the report's values
        "ACC-0002,DRX Demo,0.1,3.0,0.0\n"
        "ACC-0003,DRX Demo,not-a-number,3.0,0.0\n"
        "ACC-0004,,1.0,1.0,4.0\n"
        "ACC-0005,Unknown Vendor X,0.0,1.0,2.0\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.csv"
    done = apply_calibration_file(calibration, scores, out)
    assert (done.n_rows, done.n_calibrated, done.n_global) == (5, 4, 2)
    assert done.bad_rows == ((4, "not a number in column logit:normal"),)
    with out.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["line"] for r in rows] == ["2", "3", "5", "6"]
    assert [r["group"] for r in rows] == ["Ysio Demo", "DRX Demo", "", ""]
    assert [r["temperature_from"] for r in rows] == ["group", "group", "global: no group value", "global"]
    assert {r["calibration_check"] for r in rows} == {"sealed"} and done.verified
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 3.0, 0.0], [1.0, 1.0, 4.0], [0.0, 1.0, 2.0]])
    expected = _expected(temps, logits, ["Ysio Demo", "DRX Demo", "unknown", "Unknown Vendor X"])
    got = np.array([[float(r[f"prob:{c}"]) for c in CLASSES] for r in rows])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)  # written as exact float text
    text = out.read_text(encoding="utf-8")
    assert "ACC-" not in text and "Unknown Vendor X" not in text  # no key, no unseen value copied


def test_the_cli_names_a_missing_group_column_and_a_class_the_calibration_lacks(
    fitted: tuple[GroupTemperatures, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, calibration = fitted
    scores = tmp_path / "scores.csv"
    scores.write_text("site,prob:normal,prob:nodule,prob:effusion\nA,0.5,0.25,0.25\n", encoding="utf-8")
    assert main(["apply", str(calibration), str(scores)]) == 2
    said = capsys.readouterr().err
    assert "scanner" in said and "--group-column" in said
    assert main(["apply", str(calibration), str(scores), "--group-column", "site"]) == 0
    assert "Calibrated: 1 of 1 rows (1 with the global fit)" in capsys.readouterr().out
    assert (tmp_path / "scores-calibrated.csv").is_file()
    # an existing output is replaced only when told
    assert main(["apply", str(calibration), str(scores), "--group-column", "site"]) == 2
    assert "scores-calibrated.csv: exists. Name another --output, or pass --force" in capsys.readouterr().err
    scores.write_text("scanner,logit:normal,logit:cancer\nA,0.5,0.2\n", encoding="utf-8")
    assert main(["apply", str(calibration), str(scores), "--force"]) == 2
    assert "column 'logit:cancer' names a class the model does not have" in capsys.readouterr().err
    broken = tmp_path / "calibration-edited.json"
    broken.write_text(json.dumps({**json.loads(calibration.read_text()), "per": 7}), encoding="utf-8")
    assert main(["apply", str(broken), str(scores), "--force", "--unverified"]) == 2
    assert "calibration-edited.json" in capsys.readouterr().err


def test_bad_arrays_are_refused_with_the_parameter_named(fitted: tuple[GroupTemperatures, Path]) -> None:
    temps, _ = fitted
    with pytest.raises(DataError, match="'scores' parameter of apply_calibration"):
        apply_calibration(temps, [1.0, 2.0], ["A", "B"])
    with pytest.raises(DataError, match="'groups' parameter of apply_calibration"):
        apply_calibration(temps, [[1.0, 2.0, 0.0]], ["A", "B"])
    with pytest.raises(DataError, match="'kind' parameter"):
        apply_calibration(temps, [[1.0, 2.0, 0.0]], ["A"], kind="odds")
