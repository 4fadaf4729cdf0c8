"""Identifiers planted in every tag, path part, label cell and library warning reach no output channel.

One end-to-end run of the CLI on a small demo cohort whose files were rewritten the way a careless
export looks: folders named after the patient (name, birth date, MRN), files after the accession
number, person names in every person tag, a station and an institution typed with a person's name and
phone number on a single study, a label cell holding a name, a UID that pydicom warns about. Every file
of the run folder (PDF text and metadata, SVG figures, report.dcm, CSV, JSON, run.log), the names of the
files, stdout and stderr are searched for each planted string and for every UID, patient ID and accession
number of the input.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import pydicom
import pytest
import yaml
from pydicom import config as pydicom_config
from tests.conftest import DEMO_PROTOCOL, VERDICT_EXIT

from sitecal.cli import main
from sitecal.demo import generate_demo

SURNAME, GIVEN, BIRTH, MRN, ACC = "QUIXOTE", "DULCINEA", "19650304", "MRN7777777", "ACC99999999"
PERSON = "SMITH JOHN 55512345"
PLANTED = [
    SURNAME,
    GIVEN,
    BIRTH,
    "1965-03-04",
    MRN,
    ACC,
    "SMITH",
    "55512345",
    "SANCHO",
    "PANZA",
    "ller_report",
]
PERSON_TAGS = (
    "PatientName",
    "OtherPatientNames",
    "PatientBirthName",
    "PatientMotherBirthName",
    "OperatorsName",
    "PerformingPhysicianName",
    "ReferringPhysicianName",
)


def _plant(dicom_dir: Path, out_dir: Path, person_study: str) -> list[str]:
    """Rewrite the demo files with planted identifiers under identifying folder names; return the needles."""
    needles: set[str] = set()
    files = sorted(p for p in dicom_dir.rglob("*") if p.is_file())
    for i, path in enumerate(files):
        try:
            ds = pydicom.dcmread(path)
        except Exception:  # the demo's planted non-DICOM and truncated files: keep them as they are
            target = out_dir / f"{SURNAME}^{GIVEN}_{BIRTH}" / f"{MRN}" / f"{ACC}_{i}_{path.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
            continue
        for keyword in PERSON_TAGS:
            setattr(ds, keyword, f"{SURNAME}^{GIVEN}")
        ds.PatientBirthDate, ds.PatientComments = BIRTH, f"{GIVEN} {SURNAME} {MRN} called back"
        ds.AccessionNumber = f"{ACC}{i:03d}"[:16]
        if path.relative_to(dicom_dir).as_posix() == person_study:  # an analysed study
            ds.StationName = PERSON[:16]
            ds.InstitutionName = f"{PERSON} CLINIC"
        if i == 5:  # a UID pydicom warns about when it reads it (letters in a UI value)
            with pydicom_config.disable_value_validation():
                ds.SeriesInstanceUID = "1.2.826.0.1.3680043.8.498.5.SANCHO.PANZA"
        for keyword in (
            "StudyInstanceUID",
            "SeriesInstanceUID",
            "SOPInstanceUID",
            "PatientID",
            "AccessionNumber",
        ):
            needles.add(str(ds.get(keyword, "")))
        folder = out_dir / f"{SURNAME}^{GIVEN}_{BIRTH}" / f"{MRN}{ds.PatientID}"
        folder.mkdir(parents=True, exist_ok=True)
        # one file named in Latin-1 bytes that are not UTF-8, as old exports write "Müller"
        name = os.fsdecode(b"M\xfcller_report.dcm") if i == 7 else f"{ds.AccessionNumber}_report.dcm"
        with pydicom_config.disable_value_validation():
            ds.save_as(folder / name)
    return sorted(n for n in needles if len(n) >= 6) + PLANTED


def _texts(folder: Path) -> dict[str, str]:
    """Every output as searchable text: files as bytes decoded leniently, the PDF also through poppler."""
    texts = {}
    for path in sorted(folder.rglob("*")):
        texts[f"name of {path.relative_to(folder)}"] = str(path.relative_to(folder))
        if path.is_file():
            texts[str(path.relative_to(folder))] = path.read_bytes().decode("latin-1")
    pdf = folder / "report.pdf"
    texts["report.pdf (pdftotext)"] = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    texts["report.pdf (pdfinfo)"] = subprocess.run(
        ["pdfinfo", str(pdf)], capture_output=True, text=True, check=True
    ).stdout
    return texts


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_planted_identifiers_reach_no_output(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    manifest = generate_demo(tmp_path / "demo", n_studies=60, seed=11)
    dicom = tmp_path / "site-export"
    analysed = next(s.relative_path for s in manifest.studies if s.labelled and s.intact)
    needles = _plant(manifest.dicom_dir, dicom, analysed)
    labels = manifest.labels_csv.read_text().splitlines()
    labels.append(f"1.2.3.4.5.6.7,{SURNAME}^{GIVEN} {MRN} nodule")  # a label cell holding a name
    labels.append(f"{MRN}-{ACC},normal")  # a label for no study, its key an identifier
    (tmp_path / "labels.csv").write_text("\n".join(labels) + "\n")
    (tmp_path / "stations.csv").write_text("value,group\nNGH-DR1,Northgate DR 1\n")
    protocol = yaml.safe_load(DEMO_PROTOCOL.read_text())
    protocol["data"].update(dicom_dir="site-export", labels="labels.csv")
    protocol["subgroups"]["station"] = {"tag": "StationName", "mapping": "stations.csv", "label": "Station"}
    protocol["evaluation"]["bootstrap"]["n_resamples"] = 50
    protocol["report"]["output_dir"] = "reports"
    protocol["privacy"] = {"key_file": "key"}
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))

    code = main(["run", str(path), "--no-progress", "--workers", "2"])
    out, err = capfd.readouterr()
    (folder,) = (tmp_path / "reports").glob("demo-*")
    evaluation = json.loads((folder / "evaluation.json").read_text())
    assert code == VERDICT_EXIT[evaluation["verdict"]]

    channels = {"stdout": out, "stderr": err, **_texts(folder)}
    leaks = [(needle, where) for needle in needles for where, text in channels.items() if needle in text]
    assert not leaks, leaks[:10]
    # the rare institution is shown pooled, never by value; the unmapped station as 'unmapped'
    with (folder / "cohort.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    sites = {row["site"] for row in rows}
    assert "other (n < 5)" in sites and not any("CLINIC" in site for site in sites)
    sources = {row["value"] for row in evaluation["cohort_flow"]["sources"]["sites"]}
    assert sources == sites
    stations = {row["station"] for row in rows}
    assert stations <= {"Northgate DR 1", "unmapped", "other (n < 5)", "unknown"} and "unmapped" in stations
