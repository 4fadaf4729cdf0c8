"""report.dcm: the PDF as a DICOM Encapsulated PDF instance that dciodvfy accepts and that names nobody."""

from __future__ import annotations

import shutil
import subprocess
from io import BytesIO
from pathlib import Path

import pydicom
import pytest
from reportlab.pdfgen.canvas import Canvas

from sitecal.report.dicom_pdf import ENCAPSULATED_PDF_STORAGE, REPORT_PATIENT_ID, write_report_dicom

TITLE = '<b>St. Mary\'s & "Ünïcødé" <font color=red> calibration validation'


def _pdf(path: Path, pages: int) -> bytes:
    buffer = BytesIO()
    canvas = Canvas(buffer)
    for page in range(pages):
        canvas.drawString(72, 720, f"page {page + 1}")
        canvas.showPage()
    canvas.save()
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def _dciodvfy(path: Path) -> str:
    tool = shutil.which("dciodvfy")
    assert tool, "dciodvfy (Debian package dicom3tools) is required: .ci/run installs it"
    done = subprocess.run([tool, str(path)], capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


@pytest.mark.parametrize("pages", [1, 2])  # PDFs of odd and even length
def test_report_dcm_passes_dciodvfy_and_holds_the_pdf_exactly(tmp_path: Path, pages: int) -> None:
    pdf = _pdf(tmp_path / "report.pdf", pages)
    out = tmp_path / "report.dcm"
    write_report_dicom(
        tmp_path / "report.pdf",
        out,
        document_id="SC-0123456789ab",
        title=TITLE,
        created_utc="2026-12-03T09:08:07Z",
    )
    report = _dciodvfy(out)
    assert "EncapsulatedPDF" in report
    problems = [line for line in report.splitlines() if line.startswith(("Error", "Warning"))]
    assert problems == []
    ds = pydicom.dcmread(out)
    assert ds.SOPClassUID == ENCAPSULATED_PDF_STORAGE and ds.Modality == "DOC"
    assert ds.EncapsulatedDocument[: ds.EncapsulatedDocumentLength] == pdf
    assert ds.DocumentTitle == TITLE[:64]
    assert (ds.ContentDate, ds.ContentTime) == ("20261203", "090807")


def test_the_instance_links_to_no_patient_and_is_reproducible(tmp_path: Path) -> None:
    _pdf(tmp_path / "report.pdf", 1)
    args = {"document_id": "SC-0123456789ab", "title": "t", "created_utc": "2026-12-03T09:08:07Z"}
    write_report_dicom(tmp_path / "report.pdf", tmp_path / "a.dcm", **args)
    write_report_dicom(tmp_path / "report.pdf", tmp_path / "b.dcm", **args)
    assert (tmp_path / "a.dcm").read_bytes() == (tmp_path / "b.dcm").read_bytes()
    write_report_dicom(tmp_path / "report.pdf", tmp_path / "c.dcm", **{**args, "document_id": "SC-other"})
    a, c = pydicom.dcmread(tmp_path / "a.dcm"), pydicom.dcmread(tmp_path / "c.dcm")
    assert a.StudyInstanceUID != c.StudyInstanceUID and a.SOPInstanceUID != c.SOPInstanceUID
    assert a.PatientID == REPORT_PATIENT_ID
    for keyword in ("PatientBirthDate", "PatientSex", "AccessionNumber", "ReferringPhysicianName"):
        assert a[keyword].value in ("", None), keyword
    for keyword in ("ReferencedStudySequence", "ReferencedSeriesSequence", "OtherPatientIDsSequence"):
        assert keyword not in a


@pytest.mark.timeout(30)
def test_a_different_pdf_is_a_different_instance_of_the_same_document(tmp_path: Path) -> None:
    # two renderings of one document (same document ID) whose bytes differ, e.g. a later `sitecal report`
    args = {"document_id": "SC-0123456789ab", "title": "t", "created_utc": "2026-12-03T09:08:07Z"}
    _pdf(tmp_path / "one.pdf", 1)
    _pdf(tmp_path / "two.pdf", 2)
    write_report_dicom(tmp_path / "one.pdf", tmp_path / "one.dcm", **args)
    write_report_dicom(tmp_path / "two.pdf", tmp_path / "two.dcm", **args)
    one, two = pydicom.dcmread(tmp_path / "one.dcm"), pydicom.dcmread(tmp_path / "two.dcm")
    assert one.SOPInstanceUID != two.SOPInstanceUID
    assert one.file_meta.MediaStorageSOPInstanceUID == one.SOPInstanceUID
    assert one.SeriesInstanceUID != two.SeriesInstanceUID
    assert one.StudyInstanceUID == two.StudyInstanceUID
    for uid in (one.SOPInstanceUID, one.SeriesInstanceUID, one.StudyInstanceUID):
        assert uid.startswith("2.25.") and len(uid) <= 64 and uid.is_valid


def test_a_file_that_is_not_a_pdf_is_refused(tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(b"<html>")
    with pytest.raises(ValueError, match="not a PDF"):
        write_report_dicom(
            tmp_path / "report.pdf",
            tmp_path / "x.dcm",
            document_id="d",
            title="t",
            created_utc="2026-12-03T09:08:07Z",
        )
