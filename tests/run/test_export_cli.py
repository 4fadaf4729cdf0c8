"""``sitecal export RUN_DIR``: a small demo run exported, checked on its own evaluation studies read again;
bad input exits 2 naming the file and the next step."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from tests.conftest import TEST_PSEUDONYM_KEY

from sitecal._seal import COMPLETE, write_seal
from sitecal.cli import main
from sitecal.run.export import N_CHECK, export_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_folder(small_run: dict) -> Path:
    """A run of the demo protocol on 160 studies (patient split: an `evaluation` part), few resamples."""
    return Path(small_run["folder"])


def _copy(folder: Path, tmp_path: Path) -> Path:
    """A copy of the run folder to spoil (its protocol's paths are absolute, so the copy finds them too)."""
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def _reseal(folder: Path) -> None:
    """Seal the folder again under the test key, as a run that wrote what it now holds would have."""
    write_seal(folder, TEST_PSEUDONYM_KEY.encode(), state=COMPLETE)


def _evaluation_keys(folder: Path) -> list[str]:
    with open(folder / "cohort.csv", newline="", encoding="utf-8") as f:
        return [r["study_key"] for r in csv.DictReader(f) if r["split"] == "evaluation"]


@pytest.mark.parametrize("fmt", ["onnx", "monai-bundle"])
def test_export_writes_a_file_that_gives_sitecals_probabilities_on_the_runs_studies(
    run_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    folder = _copy(run_folder, tmp_path)
    assert main(["export", str(folder), "--format", fmt, "--no-progress"]) == 0
    out, err = capsys.readouterr()
    target = folder / "export" / ("calibrated.onnx" if fmt == "onnx" else "calibrated-bundle")
    assert target.exists()
    n = min(N_CHECK, len(_evaluation_keys(folder)))
    assert f"Exported: {target} ({fmt})" in out
    found = re.search(
        r"Checked:  (\d+) evaluation studies of (\d+) groups: largest difference from sitecal's calibrated "
        r"probabilities (\S+) \(the eager model: (\S+); tolerance (\S+)\)",
        out,
    )
    assert found, out
    checked, groups, gap, eager, tolerance = found.groups()
    assert int(checked) == n and int(groups) >= 2
    assert float(gap) <= float(tolerance) == (1e-5 if fmt == "onnx" else 1e-6) and float(eager) == 0.0
    calibration = json.loads((folder / "calibration.json").read_text())
    table_file = target.with_name(target.name + ".groups.json") if fmt == "onnx" else None
    if table_file is not None:
        table = json.loads(table_file.read_text())
    else:
        table = json.loads((target / "configs" / "metadata.json").read_text())["sitecal_calibration"]
    assert table["per"] == "scanner" and table["groups"] == {
        g: i for i, g in enumerate(sorted(calibration["groups"]))
    }
    assert table["temperatures"][-1] == calibration["global_fit"]["temperature"]
    assert table["model_sha256"] == calibration["model_sha256"]
    assert f"exported as {fmt} to {target}; checked on {checked} evaluation studies" in (
        (folder / "run.log").read_text()
    )
    # nothing the command wrote or said names a study, a patient or a UID
    written = out + err + json.dumps(table)
    assert not any(key in written for key in _evaluation_keys(folder))
    assert not re.search(r"\b\d+(\.\d+){4,}\b", written), "a UID-like string in the output"


def test_the_api_reports_the_check(run_folder: Path, tmp_path: Path) -> None:
    folder = _copy(run_folder, tmp_path)
    done = export_run(folder, "torchscript", output=tmp_path / "m.ts", n_check=5, progress=False)
    assert done.path == tmp_path / "m.ts" and done.groups_file == tmp_path / "m.ts.groups.json"
    assert (
        done.n_checked == 5 and done.n_left_out == 0 and done.n_groups >= 2
    )  # taken from each group in turn
    assert done.max_difference <= 1e-6 and done.tolerance == 1e-6


def test_logits_that_the_model_no_longer_gives_stop_the_export(run_folder: Path, tmp_path: Path) -> None:
    """The check has teeth: one evaluation study's stored logits moved, and nothing is exported."""
    folder = _copy(run_folder, tmp_path)
    first = _evaluation_keys(folder)[0]
    path = folder / "predictions.csv"
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    for row in rows[1:]:
        if row[0] == first:
            row[3] = repr(float(row[3]) + 0.5)
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(Exception, match=r"predictions\.csv: edited after the run sealed it"):
        export_run(folder, "torchscript", progress=False)
    _reseal(folder)  # as if the run itself had stored those logits: the check against the model stops it
    with pytest.raises(Exception, match="no longer gives the run's logits") as caught:
        export_run(folder, "torchscript", progress=False)
    assert type(caught.value).__name__ == "DataError"
    assert not (folder / "export").exists() or not any((folder / "export").iterdir())


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


def test_bad_input_exits_2_naming_the_file_and_the_next_step(
    run_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(run_folder, tmp_path)
    assert main(["export", str(folder), "--format", "onx"]) == 2
    assert (
        "--format 'onx': give one of torchscript, torch-export, onnx, monai-bundle. Did you mean 'onnx'?"
        in (_error(capsys))
    )
    with pytest.raises(SystemExit) as usage:
        main(["export", str(folder)])
    assert usage.value.code == 2
    capsys.readouterr()

    calibration = json.loads((folder / "calibration.json").read_text())
    # the predictions-file route: no model was run, so there is none to export
    (folder / "calibration.json").write_text(json.dumps({**calibration, "model_sha256": None}))
    assert main(["export", str(folder), "--format", "torchscript", "--no-progress"]) == 2
    # an edited file is refused before anything is read from it ...
    assert f"{folder / 'calibration.json'}: edited after the run sealed it" in _error(capsys)
    _reseal(folder)  # ... so the checks below stand for a run that wrote such a document itself
    assert main(["export", str(folder), "--format", "torchscript", "--no-progress"]) == 2
    assert "model_sha256 is null: the run read the model's outputs from a file" in (err := _error(capsys))
    assert f"`sitecal apply {folder / 'calibration.json'} SCORES.csv`" in err

    # a model other than the one the run calibrated
    (folder / "calibration.json").write_text(json.dumps({**calibration, "model_sha256": "0" * 64}))
    _reseal(folder)
    assert main(["export", str(folder), "--format", "torchscript", "--no-progress"]) == 2
    assert "is not the model the run calibrated (000000000000..., calibration.json model_sha256)" in _error(
        capsys
    )

    (folder / "calibration.json").unlink()
    assert main(["export", str(folder), "--format", "torchscript"]) == 2
    assert f"{folder / 'calibration.json'}: missing (it is in the run's seal)" in _error(capsys)
    assert not (folder / "export").exists()


def test_an_existing_output_is_never_overwritten(
    run_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(run_folder, tmp_path)
    target = tmp_path / "deployed.pt2"
    target.write_bytes(b"the model in production")
    assert main(["export", str(folder), "--format", "torch-export", "--output", str(target)]) == 2
    assert f"--output {target}: exists" in _error(capsys)
    assert target.read_bytes() == b"the model in production"
