"""The PDF report wrapped as a DICOM Encapsulated PDF instance (``report.dcm``) for archiving in PACS.

The instance belongs to a study of its own and names no patient: its patient is the fixed placeholder
:data:`REPORT_PATIENT_ID` (so that PACS which require a Patient ID file every report under one
non-person entry), the other Patient and Study attributes that could carry an identifier are present and
empty (Type 2), and nothing in it links to the studies analysed.

Its UIDs are derived from content, so that a PACS never receives two different objects under one UID:
the SOP Instance and Series Instance UIDs from the sha256 of the PDF bytes together with every other value
the instance holds (document ID, title, time, sitecal version), so the same report gives the same file
and a different PDF a different instance; the Study Instance UID from the document ID, so that every
rendering of one document (``sitecal report`` run again) files under one study. The document ID changes
with the run time (:func:`sitecal.provenance.document_id`), so two runs are two studies.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pydicom
from pydicom.dataset import FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import PYDICOM_IMPLEMENTATION_UID, UID, ExplicitVRLittleEndian

from sitecal import __version__
from sitecal._io import write_bytes_atomic

__all__ = ["ENCAPSULATED_PDF_STORAGE", "REPORT_PATIENT_ID", "encapsulated_pdf", "write_report_dicom"]

#: Patient ID and Name of every report instance: a placeholder, not a person.
REPORT_PATIENT_ID = "SITECAL-VALIDATION"

#: SOP Class UID of Encapsulated PDF Storage (PS3.4 B.5).
ENCAPSULATED_PDF_STORAGE = UID("1.2.840.10008.5.1.4.1.1.104.1")
#: UID root for sitecal documents: UUID-derived "2.25" (PS3.5 B.2) of a hash of the document ID.
_UID_ROOT = "2.25."


def _uid(name: str, role: str) -> UID:
    digest = hashlib.sha256(f"sitecal\0{name}\0{role}".encode()).digest()
    return UID(_UID_ROOT + str(int.from_bytes(digest[:16], "big")))  # 128 bits, as a UUID-derived UID


def _content_name(pdf: bytes, *, document_id: str, title: str, created_utc: str) -> str:
    """What names the instance: the PDF's sha256 and every other value written into it."""
    parts = (hashlib.sha256(pdf).hexdigest(), document_id, title, created_utc, __version__)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def encapsulated_pdf(pdf: bytes, *, document_id: str, title: str, created_utc: str) -> pydicom.Dataset:
    """An Encapsulated PDF instance holding ``pdf``.

    Parameters
    ----------
    pdf : bytes
        The report.
    document_id : str
        The report's document ID: the StudyID, and what the StudyInstanceUID is derived from. The SOP
        Instance and Series Instance UIDs are derived from the PDF's sha256 and the other parameters.
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
    content = _content_name(pdf, document_id=document_id, title=title, created_utc=created_utc)
    sop_uid = _uid(content, "instance")
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
    ds.SeriesInstanceUID = _uid(content, "series")
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
