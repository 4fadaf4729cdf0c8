"""``sitecal demo`` from an empty folder, small: read the report, the JSON and the tables back.

The run is the packaged demo protocol as users get it (1,000 resamples with refit, its group sizes) on 400
studies, the fewest at which one scanner has enough fit studies for a temperature of its own. The one
demo-size run of the radiograph route is in ``test_demo_claims.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pydicom
import pytest
from pydicom.errors import InvalidDicomError
from pypdf import PdfReader
from tests.conftest import (
    DEMO_PROTOCOL,
    TEST_PSEUDONYM_KEY,
    VERDICT_EXIT,
    assert_exit_is_the_verdicts,
    write_demo_protocol,
)

from sitecal.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("e2e")
    # The site secret sitecal would create on first use, fixed: the patient split and every number
    # downstream are then the same on every machine and every run.
    key_file = root / "reports" / ".sitecal-pseudonym-key"
    key_file.parent.mkdir()
    key_file.write_text(TEST_PSEUDONYM_KEY + "\n")
    key_file.chmod(0o600)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        code = main(["demo", "--studies", "400", "--no-progress", "--workers", "2"])
    (folder,) = (root / "reports").glob("demo-*")
    cohort = root / "sitecal-demo" / "radiographs"
    manifest = json.loads((cohort / "manifest.json").read_text())
    return {
        "code": code,
        "folder": folder,
        # what generate_demo returned, from its manifest.json (the studies aside), with the two paths
        "manifest": SimpleNamespace(
            **{**manifest, "dicom_dir": cohort / "dicom", "labels_csv": cohort / "labels.csv"}
        ),
        "protocol": root / "sitecal-demo" / "demo.yaml",
    }


def _pdf_text(path: Path) -> str:
    return "\n".join(page.extract_text() or "" for page in PdfReader(path).pages)


def test_run_writes_every_artifact(demo_run: dict) -> None:
    assert_exit_is_the_verdicts(demo_run["code"], demo_run["folder"])
    assert demo_run["protocol"].read_text() == DEMO_PROTOCOL.read_text()  # the packaged one, as it is
    folder = demo_run["folder"]
    for name in (
        "report.pdf",
        "report.dcm",
        "evaluation.json",
        "calibration.json",
        "cohort.csv",
        "exclusions.csv",
        "provenance.json",
        "predictions.csv",
        "protocol.yaml",
        "run.log",
    ):
        assert (folder / name).is_file(), name
    evaluation = json.loads((folder / "evaluation.json").read_text())
    assert demo_run["code"] == VERDICT_EXIT[evaluation["verdict"]]
    provenance = json.loads((folder / "provenance.json").read_text())
    assert set(provenance["sha256"]) >= {"model", "protocol", "labels", "instances", "dataset_manifest"}
    assert (
        provenance["sha256"]["predictions"]
        == hashlib.sha256((folder / "predictions.csv").read_bytes()).hexdigest()
    )
    assert provenance["model"]["version"] == "1.0.0"
    assert provenance["seeds"] == {"split": 20261202, "bootstrap": 7}


def test_flow_counts_every_planted_problem(demo_run: dict) -> None:
    manifest = demo_run["manifest"]
    evaluation = json.loads((demo_run["folder"] / "evaluation.json").read_text())
    flow = evaluation["cohort_flow"]
    assert flow["files_found"] == manifest.n_files
    reasons = {(e["stage"], e["reason"]): e["count"] for e in flow["exclusions"]}
    assert reasons[("scan", "not a DICOM file")] == len(manifest.non_dicom_files)
    assert reasons[("scan", "truncated file")] == len(manifest.truncated_files)
    assert reasons[("labels", "study has no label")] == len(manifest.unlabelled_studies)
    assert reasons[("labels", "label matches no study")] == len(manifest.orphan_labels)
    assert flow["analysed"] == manifest.n_studies - len(manifest.unlabelled_studies)
    # the demo cross-fits: every analysed study fits the other folds' temperatures and is evaluated once
    assert evaluation["split"]["method"] == "crossfit"
    assert flow["fit"] == flow["evaluation"] == flow["analysed"]


def test_report_text_shows_every_scanner_with_numbers(demo_run: dict) -> None:
    from sitecal.report import format_interval

    folder = demo_run["folder"]
    text = _pdf_text(folder / "report.pdf")
    flat = re.sub(r"\s+", " ", text)
    evaluation = json.loads((folder / "evaluation.json").read_text())
    scanners = evaluation["subgroups"]["scanner"]
    assert {g["group"] for g in scanners} == set(demo_run["manifest"].scanners)
    for group in scanners:
        assert group["group"] in flat
        ece = group["metrics"]["ece"]
        for stage in ("before", "after"):
            assert format_interval(ece[stage]["estimate"], ece[stage]["low"], ece[stage]["high"]) in flat, (
                group["group"],
                stage,
                format_interval(ece[stage]["estimate"], ece[stage]["low"], ece[stage]["high"]),
            )


def test_temperatures_are_applied_per_scanner(demo_run: dict) -> None:
    evaluation = json.loads((demo_run["folder"] / "evaluation.json").read_text())
    calibration = json.loads((demo_run["folder"] / "calibration.json").read_text())
    for g in evaluation["subgroups"]["scanner"]:
        assert g["temperature"] == calibration["groups"][g["group"]]["temperature"]
    assert any(c["source"] == "own" for c in calibration["groups"].values())


def test_no_identifier_in_clear_in_the_run_folder(demo_run: dict) -> None:
    manifest = demo_run["manifest"]
    needles: set[str] = set()
    for path in sorted(p for p in manifest.dicom_dir.rglob("*") if p.is_file()):
        try:  # every DICOM file, the truncated one included (its header is intact)
            ds = pydicom.dcmread(path, stop_before_pixels=True)
        except InvalidDicomError:
            continue
        needles.update(
            {
                str(ds.PatientID),
                str(ds.PatientName),
                str(ds.StudyInstanceUID),
                str(ds.SOPInstanceUID),
                str(ds.SeriesInstanceUID),
                str(ds.AccessionNumber),
            }
        )
        needles.update(str(ds.PatientName).split("^"))
        if ds.get("PatientBirthDate"):
            needles.add(str(ds.PatientBirthDate))
    needles.update(manifest.orphan_labels)
    needles = {n for n in needles if len(n) >= 6}
    assert len(needles) > 5 * manifest.n_studies  # the check below would prove little without them
    # Digit-only values (birth dates) can occur inside long numbers by chance: they are matched as whole
    # runs of digits and dots. Every other value is matched anywhere, but searched for only in the runs of
    # characters of its own alphabet (letters, digits, '^', '.'), gathered once per file: a value cannot
    # span a character outside its alphabet, so this finds exactly what a search of the whole text would,
    # in a fraction of the time.
    digits = {n for n in needles if n.isdigit()}
    others = needles - digits
    assert all(re.fullmatch(r"[A-Za-z0-9^.]+", n) for n in others)
    folder = demo_run["folder"]
    texts = {
        p.name: p.read_text(errors="replace")
        for p in folder.rglob("*")
        if p.is_file() and p.suffix != ".pdf" and p.suffix != ".png"
    }
    texts["report.pdf (text)"] = _pdf_text(folder / "report.pdf")
    texts["report.pdf (bytes)"] = (folder / "report.pdf").read_bytes().decode("latin-1")
    for name, text in texts.items():
        whole_runs = set(re.findall(r"[0-9.]+", text))
        runs = "\n".join(set(re.findall(r"[A-Za-z0-9^.]{6,}", text)))
        found = sorted(digits & whole_runs) + [n for n in others if n in runs]
        assert not found, f"{name} contains identifiers {found[:3]}"


def test_report_dcm_of_a_run_passes_dciodvfy_and_carries_the_document_id(demo_run: dict) -> None:
    import shutil

    folder = demo_run["folder"]
    tool = shutil.which("dciodvfy")
    assert tool, "dciodvfy (Debian package dicom3tools) is required: .ci/run installs it"
    done = subprocess.run([tool, str(folder / "report.dcm")], capture_output=True, text=True, check=False)
    assert [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("Error")] == []
    ds = pydicom.dcmread(folder / "report.dcm")
    provenance = json.loads((folder / "provenance.json").read_text())
    assert ds.StudyID == provenance["document_id"]
    assert ds.EncapsulatedDocument[: ds.EncapsulatedDocumentLength] == (folder / "report.pdf").read_bytes()


def test_misspelt_key_exits_2_naming_file_line_field(tmp_path: Path) -> None:
    text = DEMO_PROTOCOL.read_text().replace("  min_group_size: 50", "  min_grup_size: 50")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "min_grup_size" in t)
    result = subprocess.run(
        [sys.executable, "-m", "sitecal.cli", "check", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert (
        f"{path}:{line}: calibration.min_grup_size: unknown field. Did you mean 'min_group_size'?"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_disparities_between_scanners_have_their_own_interval(demo_run: dict) -> None:
    evaluation = json.loads((demo_run["folder"] / "evaluation.json").read_text())
    gap = evaluation["disparities"]["scanner"]["ece"]["after"]
    judged = [g for g in evaluation["subgroups"]["scanner"] if not g["small"]]
    values = {g["group"]: g["metrics"]["ece"]["after"]["estimate"] for g in judged}
    assert set(gap["groups"]) == set(values)
    assert gap["range"]["estimate"] == pytest.approx(max(values.values()) - min(values.values()), abs=1e-12)
    assert gap["range"]["low"] <= gap["range"]["high"]
    assert gap["highest"] == max(values, key=values.get)


def test_one_global_temperature_runs_to_a_report(demo_run: dict, tmp_path: Path) -> None:
    import yaml

    path = write_demo_protocol(tmp_path, demo_run["manifest"], n_resamples=50, calibration={"per": None})
    protocol = yaml.safe_load(path.read_text())
    protocol["acceptance"] = [c for c in protocol["acceptance"] if c["scope"] == "overall"]
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    code = main(["run", str(path), "--no-progress"])
    (folder,) = (tmp_path / "reports").glob("demo-*")
    assert_exit_is_the_verdicts(code, folder)
    assert json.loads((folder / "calibration.json").read_text())["per"] is None
    assert (folder / "report.pdf").is_file() and (folder / "report.dcm").is_file()
