from __future__ import annotations

import csv
import datetime as dt
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.errors import InvalidDicomError
from pydicom.uid import UID, ExplicitVRLittleEndian

from sitecal.demo import CLASS_NAMES, DemoManifest, generate_demo, presentation_values
from sitecal.demo._scanners import CR_SOP_CLASS_UID, DX_SOP_CLASS_UID, SCANNERS, SITES
from sitecal.demo.generate import DEMO_UID_ROOT, _plan
from sitecal.errors import DataError, DicomError, OutputError

REQUIRED = [
    "SOPClassUID",
    "SOPInstanceUID",
    "StudyInstanceUID",
    "SeriesInstanceUID",
    "PatientID",
    "PatientName",
    "PatientBirthDate",
    "PatientSex",
    "PatientAge",
    "StudyDate",
    "StudyTime",
    "AccessionNumber",
    "Modality",
    "InstitutionName",
    "Manufacturer",
    "ManufacturerModelName",
    "StationName",
    "BodyPartExamined",
    "Rows",
    "Columns",
    "SamplesPerPixel",
    "PhotometricInterpretation",
    "BitsAllocated",
    "BitsStored",
    "HighBit",
    "PixelRepresentation",
    "RescaleSlope",
    "RescaleIntercept",
    "WindowCenter",
    "WindowWidth",
    "InstanceNumber",
    "SeriesNumber",
]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _intact(manifest: DemoManifest) -> list[pydicom.Dataset]:
    return [pydicom.dcmread(manifest.dicom_dir / s.relative_path) for s in manifest.studies if s.intact]


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    a = generate_demo(tmp_path / "a", n_studies=12, seed=5)
    b = generate_demo(tmp_path / "b", n_studies=12, seed=5)
    c = generate_demo(tmp_path / "c", n_studies=12, seed=6)
    files_a, files_b, files_c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert files_a == files_b
    assert a.summary() | {"dicom_dir": None} == b.summary() | {"dicom_dir": None}
    assert files_a["labels.csv"] != files_c["labels.csv"]
    first = a.studies[0].relative_path
    assert files_a[f"dicom/{first}"] != files_c.get(f"dicom/{c.studies[0].relative_path}")
    assert {s.study_uid for s in a.studies}.isdisjoint({s.study_uid for s in c.studies})


def test_files_are_part10_explicit_little_endian_with_required_tags(demo_cohort: DemoManifest) -> None:
    for study in demo_cohort.studies:
        if not study.intact:
            continue
        path = demo_cohort.dicom_dir / study.relative_path
        raw = path.read_bytes()
        assert raw[128:132] == b"DICM"  # 128-byte preamble, then the prefix
        ds = pydicom.dcmread(path)  # no force=True: a conformant Part-10 file
        assert ds.file_meta.TransferSyntaxUID == ExplicitVRLittleEndian
        assert ds.file_meta.MediaStorageSOPInstanceUID == ds.SOPInstanceUID
        missing = [k for k in REQUIRED if k not in ds or ds.data_element(k).value in (None, "")]
        assert missing == [], f"{study.relative_path} lacks {missing}"
        assert ds.SOPClassUID in (DX_SOP_CLASS_UID, CR_SOP_CLASS_UID)
        assert (ds.Modality == "CR") == (ds.SOPClassUID == CR_SOP_CLASS_UID)
        assert ds.BodyPartExamined == "CHEST"
        assert (ds.Rows, ds.Columns, ds.SamplesPerPixel, ds.BitsAllocated) == (128, 128, 1, 16)
        assert ds.BitsStored in (12, 16) and ds.HighBit == ds.BitsStored - 1 and ds.PixelRepresentation == 0
        assert int(ds.pixel_array.max()) < 2**ds.BitsStored
        assert ds.PatientSex in ("M", "F")
        assert re.fullmatch(r"DEMO\^P\d{6}", str(ds.PatientName))
        for uid in (ds.SOPInstanceUID, ds.StudyInstanceUID, ds.SeriesInstanceUID):
            assert UID(uid).is_valid and uid.startswith(DEMO_UID_ROOT)
        assert ds.StudyInstanceUID == study.study_uid and ds.PatientID == study.patient_id


def test_patient_age_is_dicom_as_and_agrees_with_birth_and_study_dates(demo_cohort: DemoManifest) -> None:
    for ds in _intact(demo_cohort):
        assert re.fullmatch(r"\d{3}Y", ds.PatientAge)
        birth = dt.datetime.strptime(ds.PatientBirthDate, "%Y%m%d").date()
        day = dt.datetime.strptime(ds.StudyDate, "%Y%m%d").date()
        years = day.year - birth.year - ((day.month, day.day) < (birth.month, birth.day))
        assert int(ds.PatientAge[:3]) == years
        assert 20 <= years <= 90
        assert re.fullmatch(r"\d{6}", ds.StudyTime)


def test_uids_are_unique(demo_cohort: DemoManifest) -> None:
    datasets = _intact(demo_cohort)
    for keyword in ("StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID", "AccessionNumber"):
        values = [str(ds.data_element(keyword).value) for ds in datasets]
        assert len(set(values)) == len(values), keyword


def test_sites_scanners_and_one_monochrome1_scanner(demo_cohort: DemoManifest) -> None:
    datasets = _intact(demo_cohort)
    institutions = {ds.InstitutionName for ds in datasets}
    models = {ds.ManufacturerModelName for ds in datasets}
    assert len(institutions) >= 3 and len(models) >= 4
    assert set(demo_cohort.sites) == institutions and set(demo_cohort.scanners) == models
    photometric = {ds.ManufacturerModelName: ds.PhotometricInterpretation for ds in datasets}
    assert sorted(photometric.values()).count("MONOCHROME1") == 1
    assert {float(ds.RescaleSlope) for ds in datasets} != {1.0}  # some scanners rescale
    assert {float(ds.RescaleIntercept) for ds in datasets} != {0.0}
    assert {ds.BitsStored for ds in datasets} == {12, 16}
    manufacturers = {ds.Manufacturer for ds in datasets}
    assert {"SIEMENS", "GE MEDICAL SYSTEMS", "Philips", "FUJIFILM Corporation"} <= manufacturers
    assert demo_cohort.reference_scanner == "Ysio Demo"


def test_planted_bad_files_are_what_the_manifest_says(demo_cohort: DemoManifest) -> None:
    root = demo_cohort.dicom_dir
    all_files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert demo_cohort.n_files == len(all_files) == demo_cohort.n_studies + 3
    (truncated,) = demo_cohort.truncated_files
    header = pydicom.dcmread(root / truncated, stop_before_pixels=True)  # the header survives
    assert header.StudyInstanceUID == next(s.study_uid for s in demo_cohort.studies if not s.intact)
    with pytest.raises(DicomError, match="Pixel Data"):
        presentation_values(pydicom.dcmread(root / truncated))
    assert len(demo_cohort.non_dicom_files) == 2
    with_ext, without_ext = demo_cohort.non_dicom_files
    assert with_ext.endswith(".dcm") and Path(without_ext).suffix == ""
    for name in demo_cohort.non_dicom_files:
        with pytest.raises(InvalidDicomError):
            pydicom.dcmread(root / name)
    intact = {s.relative_path for s in demo_cohort.studies if s.intact}
    assert set(all_files) == intact | {truncated, *demo_cohort.non_dicom_files}


def test_labels_csv_matches_studies_except_planted_mismatches(demo_cohort: DemoManifest) -> None:
    with demo_cohort.labels_csv.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["StudyInstanceUID", "label"]
        rows = list(reader)
    assert len(rows) == demo_cohort.n_labels
    labels = {r["StudyInstanceUID"]: r["label"] for r in rows}
    assert len(labels) == len(rows) and set(labels.values()) <= set(CLASS_NAMES)
    on_disk = {
        str(
            pydicom.dcmread(demo_cohort.dicom_dir / s.relative_path, stop_before_pixels=True).StudyInstanceUID
        )
        for s in demo_cohort.studies
    }
    (unlabelled,) = demo_cohort.unlabelled_studies
    (orphan,) = demo_cohort.orphan_labels
    assert unlabelled in on_disk and unlabelled not in labels
    assert orphan in labels and orphan not in on_disk
    assert set(labels) - {orphan} == on_disk - {unlabelled}
    for s in demo_cohort.studies:
        if s.labelled:
            assert labels[s.study_uid] == s.label


def test_no_identifier_in_file_or_folder_names(demo_cohort: DemoManifest) -> None:
    root = demo_cohort.dicom_dir
    paths = [p.relative_to(root).as_posix() for p in root.rglob("*")]
    for p in paths:
        assert re.fullmatch(r"site-\d(/s\d{6}(/IM\d{5}(\.dcm)?)?)?", p), p
    for study in demo_cohort.studies:
        ds = pydicom.dcmread(root / study.relative_path, stop_before_pixels=True)
        identifiers = [
            ds.PatientID,
            str(ds.PatientName),
            *str(ds.PatientName).split("^"),
            ds.AccessionNumber,
            ds.StudyInstanceUID,
            ds.SeriesInstanceUID,
            ds.SOPInstanceUID,
            ds.PatientBirthDate,
        ]
        for p in paths:
            for ident in identifiers:
                assert str(ident) not in p


def test_cohort_plan_has_repeat_patients_prevalence_and_ages() -> None:
    plan = _plan(np.random.default_rng([0, 0x91A4]), 2000)
    per_patient = Counter(plan.patient.tolist())
    repeat = sum(1 for n in per_patient.values() if n >= 2) / len(per_patient)
    assert 0.18 <= repeat <= 0.32 and max(per_patient.values()) == 3
    prevalence = np.bincount(plan.label, minlength=3) / 2000
    np.testing.assert_allclose(prevalence, [0.5, 0.3, 0.2], atol=0.04)
    assert 20 <= plan.age.min() and plan.age.max() <= 90
    assert set(plan.patient_sex.tolist()) == {"M", "F"}
    # every study is on a scanner of its patient's site, and every site and scanner is used
    for i in range(2000):
        assert SCANNERS[plan.scanner[i]].site == SITES[plan.site[i]].key
    assert set(plan.scanner.tolist()) == set(range(len(SCANNERS)))
    # some patients were seen on two scanners of their site
    scanners_of = {}
    for p, s in zip(plan.patient.tolist(), plan.scanner.tolist(), strict=True):
        scanners_of.setdefault(p, set()).add(s)
    assert any(len(v) > 1 for v in scanners_of.values())


def test_progress_bar_and_manifest_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = generate_demo(tmp_path, n_studies=10, seed=0, progress=True)
    assert "demo studies" in capsys.readouterr().err
    assert (tmp_path / "manifest.json").is_file()
    assert manifest.n_studies == 10 and len(manifest.studies) == 11


def test_invalid_arguments_and_existing_output(tmp_path: Path) -> None:
    with pytest.raises(
        DataError, match=r"The 'n_studies' parameter of generate_demo must be an int >= 10\. Got 5\."
    ):
        generate_demo(tmp_path / "x", n_studies=5)
    with pytest.raises(DataError, match="'seed'"):
        generate_demo(tmp_path / "x", seed=-1)
    generate_demo(tmp_path / "y", n_studies=10)
    with pytest.raises(OutputError, match="already exists"):
        generate_demo(tmp_path / "y", n_studies=10)
