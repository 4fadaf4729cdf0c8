"""The PDF report wrapped as a DICOM Encapsulated PDF instance (``report.dcm``) for archiving in PACS.

The instance belongs to a study of its own and names no patient: its patient is the fixed placeholder
:data:`REPORT_PATIENT_ID` (so that PACS which require a Patient ID file every report under one
non-person entry), the other Patient and Study attributes that could carry an identifier are present and
empty (Type 2), and its UIDs are derived from the report's document ID: the same run gives the same file,
and nothing in it links to the studies analysed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pydicom
from pydicom.dataset import FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import PYDICOM_IMPLEMENTATION_UID, ExplicitVRLittleEndian

from sitecal import __version__
from sitecal._io import write_bytes_atomic

__all__ = ["ENCAPSULATED_PDF_STORAGE", "REPORT_PATIENT_ID", "encapsulated_pdf", "write_report_dicom"]

#: Patient ID and Name of every report instance: a placeholder, not a person.
REPORT_PATIENT_ID = "SITECAL-VALIDATION"

#: SOP Class UID of Encapsulated PDF Storage (PS3.4 B.5).
ENCAPSULATED_PDF_STORAGE = "1.2.840.10008.5.1.4.1.1.104.1"
#: UID root for sitecal documents: UUID-derived "2.25" (PS3.5 B.2) of a hash of the document ID.
_UID_ROOT = "2.25."


def _uid(document_id: str, role: str) -> str:
    digest = hashlib.sha256(f"sitecal\0{document_id}\0{role}".encode()).digest()
    return _UID_ROOT + str(int.from_bytes(digest[:16], "big"))  # 128 bits, as a UUID-derived UID


def encapsulated_pdf(pdf: bytes, *, document_id: str, title: str, created_utc: str) -> pydicom.Dataset:
    """An Encapsulated PDF instance holding ``pdf``.

    Parameters
    ----------
    pdf : bytes
        The report.
    document_id : str
        The report's document ID; the UIDs are derived from it and it is the StudyID.
    title : str
        DocumentTitle (0042,0010); shortened to the 64 characters of its VR (LO).
    created_utc : str
        ``YYYY-MM-DDTHH:MM:SSZ``, the run's time: Content, Study and Series date and time (UTC, offset
        +0000 stated).
    """
    if not pdf.startswith(b"%PDF-"):
        raise ValueError("encapsulated_pdf: the document is not a PDF (it must start with '%PDF-').")
    date = created_utc[0:4] + created_utc[5:7] + created_utc[8:10]
    time = created_utc[11:13] + created_utc[14:16] + created_utc[17:19]
    sop_uid = _uid(document_id, "instance")
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = ENCAPSULATED_PDF_STORAGE
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    meta.ImplementationClassUID = PYDICOM_IMPLEMENTATION_UID
    meta.ImplementationVersionName = f"SITECAL_{__version__}"[:16]
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SpecificCharacterSet = "ISO_IR 192"
    ds.SOPClassUID = ENCAPSULATED_PDF_STORAGE
    ds.SOPInstanceUID = sop_uid
    ds.InstanceCreationDate, ds.InstanceCreationTime = date, time
    ds.TimezoneOffsetFromUTC = "+0000"
    # Patient and General Study modules: a placeholder patient; the rest Type 2, present and empty
    ds.PatientName = "SITECAL^VALIDATION REPORT"
    ds.PatientID = REPORT_PATIENT_ID
    ds.PatientBirthDate = ""
    ds.PatientSex = ""
    ds.StudyInstanceUID = _uid(document_id, "study")
    ds.StudyDate, ds.StudyTime = date, time
    ds.ReferringPhysicianName = ""
    ds.StudyID = document_id[:16]
    ds.AccessionNumber = ""
    ds.StudyDescription = "sitecal calibration validation report"
    # Encapsulated Document Series, General Equipment, SC Equipment
    ds.Modality = "DOC"
    ds.SeriesInstanceUID = _uid(document_id, "series")
    ds.SeriesNumber = 1
    ds.SeriesDate, ds.SeriesTime = date, time
    ds.SeriesDescription = "Validation report"
    ds.Manufacturer = "sitecal"
    ds.SoftwareVersions = __version__
    ds.ConversionType = "WSD"
    # Encapsulated Document module
    ds.InstanceNumber = 1
    ds.ContentDate, ds.ContentTime = date, time
    ds.AcquisitionDateTime = date + time
    ds.BurnedInAnnotation = "NO"
    ds.RecognizableVisualFeatures = "NO"
    ds.DocumentTitle = title[:64]
    ds.ConceptNameCodeSequence = Sequence()
    ds.MIMETypeOfEncapsulatedDocument = "application/pdf"
    ds.EncapsulatedDocumentLength = len(pdf)
    ds.EncapsulatedDocument = pdf + (b"\0" if len(pdf) % 2 else b"")  # OB values have even length
    return ds


def write_report_dicom(
    pdf_path: Path, out_path: Path, *, document_id: str, title: str, created_utc: str
) -> None:
    """Write ``pdf_path`` as an Encapsulated PDF instance at ``out_path`` (atomically)."""
    from io import BytesIO

    ds = encapsulated_pdf(
        pdf_path.read_bytes(), document_id=document_id, title=title, created_utc=created_utc
    )
    buffer = BytesIO()
    ds.save_as(buffer, enforce_file_format=True)
    write_bytes_atomic(out_path, buffer.getvalue())
