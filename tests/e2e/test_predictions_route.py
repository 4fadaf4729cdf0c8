"""The predictions-file route end to end: predict → evaluate equals run; vendor files with and without DICOM.

One small generated cohort (300 studies) serves every test; the model is run once (``sitecal run``) and its
logits, mapped back to the studies with the test's pseudonym key, make the vendor files.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import numpy as np
import pydicom
import pytest
import yaml
from tests.conftest import TEST_PSEUDONYM_KEY, VERDICT_EXIT, write_demo_protocol

from sitecal._pseudonym import Pseudonymizer
from sitecal.cli import main
from sitecal.demo import generate_demo

EPOCH = "1767225600"  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("route")
    manifest = generate_demo(root / "data", n_studies=300, seed=3)
    # few resamples and no refit: these tests compare routes, not intervals
    protocol = write_demo_protocol(
        root,
        manifest,
        inputs={"num_workers": 0},
        evaluation={"bootstrap": {"n_resamples": 50, "seed": 7, "refit": False}},
    )
    mp = pytest.MonkeyPatch()
    mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
    mp.chdir(root)
    try:
        run = _run(["run", str(protocol), "--no-progress"], root / "reports")
        assert main(["predict", str(protocol), "--output", str(root / "preds.csv"), "--no-progress"]) == 0
        evaluated = _run(
            ["evaluate", str(protocol), "--predictions", str(root / "preds.csv"), "--no-progress"],
            root / "reports",
        )
    finally:
        mp.undo()
    assert evaluated != run
    headers = {}
    for path in sorted(manifest.dicom_dir.rglob("*")):
        if path.is_file():
            try:
                ds = pydicom.dcmread(path, stop_before_pixels=True)
            except Exception:  # the planted non-DICOM and truncated files
                continue
            headers[str(ds.StudyInstanceUID)] = ds
    return {
        "root": root,
        "manifest": manifest,
        "protocol": protocol,
        "run": run,
        "evaluated": evaluated,
        "headers": headers,
    }


def _run(args: list[str], reports: Path) -> Path:
    """Run the CLI; the exit code must be the verdict's. Returns the newest run folder."""
    code = main(args)
    folder = max(
        (p for p in reports.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime_ns,
    )
    assert code == VERDICT_EXIT[_json(folder / "evaluation.json")["verdict"]]
    return folder


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _pdf_text(path: Path) -> str:
    return subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def _logits_by_uid(cohort: dict) -> dict[str, np.ndarray]:
    """The run's logits per StudyInstanceUID (its predictions.csv is keyed by pseudonyms)."""
    pseudonym = Pseudonymizer(TEST_PSEUDONYM_KEY.encode())
    uid_of = {pseudonym("study", uid): uid for uid in cohort["headers"]}
    with (cohort["run"] / "predictions.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    names = cohort["manifest"].class_names
    return {uid_of[r["study_key"]]: np.array([float(r[f"logit:{c}"]) for c in names]) for r in rows}


def _labels_by_uid(cohort: dict) -> dict[str, str]:
    with cohort["manifest"].labels_csv.open(encoding="utf-8") as fh:
        return {r["StudyInstanceUID"]: r["label"] for r in csv.DictReader(fh)}


def _vendor_protocol(cohort: dict, name: str, data: dict, **sections: object) -> Path:
    protocol = yaml.safe_load(cohort["protocol"].read_text())
    protocol["model"] = {
        "name": "vendor model",
        "version": "4.2",
        "class_names": protocol["model"]["class_names"],
    }
    protocol["data"] = data
    protocol.pop("inputs", None)
    protocol.update(sections)
    path = cohort["root"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    return path


def test_predict_then_evaluate_gives_the_run_s_evaluation(cohort: dict) -> None:
    run, evaluated = cohort["run"], cohort["evaluated"]
    assert (run / "evaluation.json").read_bytes() == (evaluated / "evaluation.json").read_bytes()
    provenance = _json(evaluated / "provenance.json")
    assert provenance["predictions_file"]["model_run_here"] is False
    assert provenance["predictions_file"]["key"] == "sitecal study pseudonym"
    assert len(provenance["sha256"]["predictions_file"]) == 64
    assert "predictions_file" not in _json(run / "provenance.json")
    # the model named by the protocol was not run, but its file is hashed and binds the temperatures
    assert (
        _json(evaluated / "calibration.json")["model_sha256"]
        == _json(run / "calibration.json")["model_sha256"]
    )
    assert "not run" in " ".join(_pdf_text(evaluated / "report.pdf").split())


def test_report_renders_a_stored_run_again_byte_for_byte(
    cohort: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = cohort["run"]
    before = {name: (run / name).read_bytes() for name in ("report.pdf", "report.dcm")}
    evaluation = (run / "evaluation.json").read_bytes()
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)  # the PDF is dated by the run's own time
    assert main(["report", str(run)]) == 0
    assert {name: (run / name).read_bytes() for name in before} == before
    assert (run / "evaluation.json").read_bytes() == evaluation
    # a sealed report file that went missing is refused, never quietly rendered again
    (run / "report.pdf").unlink()
    assert main(["report", str(run)]) == 2
    (run / "report.pdf").write_bytes(before["report.pdf"])
    assert main(["report", str(run)]) == 0


def test_report_of_a_folder_that_is_not_a_run_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / 'seal.json'}: not found. {tmp_path} is not a sealed sitecal run folder" in (
        capsys.readouterr().err
    )


def test_vendor_probabilities_by_accession_number_with_dicom_subgroups(cohort: dict) -> None:
    names = cohort["manifest"].class_names
    logits = _logits_by_uid(cohort)
    labels = _labels_by_uid(cohort)
    path = cohort["root"] / "vendor-accession.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["AccessionNumber", *[f"prob:{c}" for c in names], "finding"])
        for uid, z in sorted(logits.items()):
            p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            out.writerow([cohort["headers"][uid].AccessionNumber, *[repr(float(v)) for v in p], labels[uid]])
        out.writerow(["ACC-NOT-IN-DICOM", 0.2, 0.3, 0.5, "normal"])  # matches no study
        out.writerow(["ACC-BAD", 1.4, 0.0, 0.0, "normal"])  # a probability outside [0, 1]
    protocol = _vendor_protocol(
        cohort,
        "vendor-accession",
        {
            "dicom_dir": str(cohort["manifest"].dicom_dir),
            "predictions": path.name,
            "key": "AccessionNumber",
            "label_column": "finding",
        },
    )
    assert main(["check", str(protocol)]) == 0
    folder = _run(["run", str(protocol), "--no-progress"], cohort["root"] / "reports")
    evaluation = _json(folder / "evaluation.json")
    reference = _json(cohort["run"] / "evaluation.json")
    # the same studies in the same groups, and (scores given as probabilities) the same numbers
    assert evaluation["split"] == reference["split"]
    for attribute, groups in reference["subgroups"].items():
        got = evaluation["subgroups"][attribute]
        assert [(g["group"], g["n"]) for g in got] == [(g["group"], g["n"]) for g in groups]
        for g, r in zip(got, groups, strict=True):
            for metric, stages in r["metrics"].items():
                for stage in ("before", "after"):
                    assert g["metrics"][metric][stage]["estimate"] == pytest.approx(
                        stages[stage]["estimate"], abs=1e-9
                    )
    reasons = {(r["stage"], r["reason"], r["unit"]) for r in evaluation["cohort_flow"]["exclusions"]}
    assert ("predictions", "prediction row matches no study", "prediction") in reasons
    assert (
        "predictions",
        "unusable prediction row: probability outside [0, 1] in column prob:normal",
        "prediction",
    ) in reasons
    provenance = _json(folder / "provenance.json")
    assert provenance["predictions_file"]["scores"] == "probabilities"
    assert provenance["predictions_file"]["patients"] == "DICOM PatientID"
    assert "model" not in provenance["sha256"]  # no model file was named
    written = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.suffix != ".png")
    for uid in list(cohort["headers"])[:20]:
        assert cohort["headers"][uid].AccessionNumber.encode() not in written
    assert b"ACC-NOT-IN-DICOM" not in written and b"ACC-BAD" not in written


def test_subgroup_columns_without_dicom_give_the_dicom_run_s_numbers(cohort: dict) -> None:
    names = cohort["manifest"].class_names
    logits = _logits_by_uid(cohort)
    labels = _labels_by_uid(cohort)
    path = cohort["root"] / "vendor-columns.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, delimiter=";")
        out.writerow(
            ["StudyInstanceUID", "PatientID", "scanner", "hospital", "label", *[f"logit:{c}" for c in names]]
        )
        for uid, z in sorted(logits.items()):
            ds = cohort["headers"][uid]
            out.writerow(
                [
                    uid,
                    ds.PatientID,
                    ds.ManufacturerModelName,
                    ds.InstitutionName,
                    labels[uid],
                    *[repr(float(v)) for v in z],
                ]
            )
    base = yaml.safe_load(cohort["protocol"].read_text())
    subgroups = {
        "scanner": {"tag": "ManufacturerModelName", "label": "Scanner"},
        "site": {"tag": "InstitutionName", "label": "Site"},
    }
    columns = {
        "scanner": {"column": "scanner", "label": "Scanner"},
        "site": {"column": "hospital", "label": "Site"},
    }
    dicom = cohort["root"] / "dicom-two-subgroups.yaml"
    base["subgroups"] = subgroups
    dicom.write_text(yaml.safe_dump(base, sort_keys=False))
    table = _vendor_protocol(
        cohort,
        "vendor-columns",
        {"predictions": path.name, "key": "StudyInstanceUID", "patient_column": "PatientID"},
        subgroups=columns,
    )
    assert main(["check", str(table)]) == 0
    by_dicom = _run(["run", str(dicom), "--no-progress"], cohort["root"] / "reports")
    by_table = _run(["run", str(table), "--no-progress"], cohort["root"] / "reports")
    a, b = _json(by_dicom / "evaluation.json"), _json(by_table / "evaluation.json")
    for section in (
        "split",
        "overall",
        "subgroups",
        "disparities",
        "acceptance",
        "verdict",
        "global_temperature_interval",
    ):
        assert a[section] == b[section], section
    assert b["cohort_flow"]["source"] == "predictions_file"
    assert _json(by_table / "provenance.json")["predictions_file"]["patients"] == "column"
    written = b"".join(p.read_bytes() for p in by_table.rglob("*") if p.is_file() and p.suffix != ".png")
    for uid in list(cohort["headers"])[:20]:
        assert uid.encode() not in written
        assert str(cohort["headers"][uid].PatientID).encode() not in written


def test_a_model_not_run_here_needs_a_predictions_file(
    cohort: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    protocol = _vendor_protocol(cohort, "schema", {"dicom_dir": "d", "labels": "l.csv"})
    assert main(["check", str(protocol)]) == 2
    assert "model.format: required to run the model here; or give data.predictions" in capsys.readouterr().err


def test_a_tag_subgroup_needs_dicom_and_a_column_needs_a_predictions_file(
    cohort: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    protocol = _vendor_protocol(
        cohort,
        "tag-no-dicom",
        {"predictions": "p.csv"},
        subgroups={"scanner": {"tag": "ManufacturerModelName"}},
    )
    assert main(["check", str(protocol)]) == 2
    assert "subgroups.scanner.tag: tags are read from DICOM headers" in capsys.readouterr().err
    base = yaml.safe_load(cohort["protocol"].read_text())
    base["subgroups"] = {"scanner": {"column": "scanner"}}
    path = cohort["root"] / "column-no-predictions.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    assert main(["check", str(path)]) == 2
    assert "subgroups.scanner.column: a column subgroup reads data.predictions" in capsys.readouterr().err


def test_evaluate_without_predictions_is_refused(cohort: dict, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", str(cohort["protocol"])]) == 2
    assert "pass --predictions FILE" in capsys.readouterr().err


def test_check_reads_the_predictions_file_evaluate_would_read(
    cohort: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    protocol = str(cohort["protocol"])
    assert main(["check", protocol, "--predictions", str(cohort["root"] / "preds.csv")]) == 0
    assert "predictions file (the model is not run)" in capsys.readouterr().out
    bad = cohort["root"] / "bad-preds.csv"
    bad.write_text("study_key,patient_key,logit:normal,logit:nodule\nS-1,P-1,0.1,0.2\n", encoding="utf-8")
    assert main(["check", protocol, "--predictions", str(bad)]) == 2
    assert "no column logit:effusion" in capsys.readouterr().err


def test_predict_refuses_an_output_outside_the_allowed_folders(
    cohort: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(cohort["root"])
    outside = tmp_path / "elsewhere" / "preds.csv"
    assert main(["predict", str(cohort["protocol"]), "--output", str(outside)]) == 2
    assert "--output:" in capsys.readouterr().err
    assert not outside.exists()


def test_a_new_pseudonym_key_changes_no_number(cohort: dict, tmp_path: Path) -> None:
    """A fresh install (a new site key) draws the same split and resamples: the same evaluation.json.

    Only the pseudonyms of the listed studies differ (they are the key's by design).
    """
    protocol = yaml.safe_load(cohort["protocol"].read_text(encoding="utf-8"))
    protocol["privacy"] = {"key_file": str(tmp_path / "fresh" / "key")}  # sitecal creates a new key there
    protocol["report"]["output_dir"] = str(tmp_path / "reports")
    for part in ("dicom_dir", "labels"):
        protocol["data"][part] = str((cohort["protocol"].parent / protocol["data"][part]).resolve())
    path = tmp_path / "fresh.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False), encoding="utf-8")  # subgroups keep their order
    fresh = _run(["run", str(path), "--no-progress"], tmp_path / "reports")
    assert (tmp_path / "fresh" / "key").read_text() != (
        cohort["protocol"].parent / "test-pseudonym-key"
    ).read_text()
    a, b = _json(cohort["run"] / "evaluation.json"), _json(fresh / "evaluation.json")
    keys_a = [e.pop("study_key") for e in a["highest_confidence_errors"]["studies"]]
    keys_b = [e.pop("study_key") for e in b["highest_confidence_errors"]["studies"]]
    assert keys_a != keys_b  # the pseudonyms are the key's ...
    # ... the protocol names another key file
    assert a.pop("protocol")["sha256"] != b.pop("protocol")["sha256"]
    assert a == b  # ... and nothing else is
