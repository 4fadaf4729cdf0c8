"""DICOM elements both demos write the same way: file meta, patient and study values, pixel data.

The 2-D and the CT demo build their datasets from a per-scanner set of constant elements (built once,
never mutated) plus per-instance values; what those per-instance values have in common lives here.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import PYDICOM_IMPLEMENTATION_UID, UID, ExplicitVRLittleEndian

__all__ = ["PatientStudyValues", "new_instance", "set_patient_study", "set_pixels"]


class PatientStudyValues(Protocol):
    """The synthetic patient and study values of one instance (both demos' ``StudyHeader``)."""

    @property
    def patient_id(self) -> str: ...
    @property
    def patient_name(self) -> str: ...
    @property
    def birth_date(self) -> str: ...
    @property
    def sex(self) -> str: ...
    @property
    def age(self) -> str: ...
    @property
    def study_date(self) -> str: ...
    @property
    def study_time(self) -> str: ...
    @property
    def accession(self) -> str: ...
    @property
    def study_uid(self) -> str: ...
    @property
    def study_id(self) -> str: ...


def new_instance(constants: Dataset, *, sop_class_uid: str, sop_uid: str) -> Dataset:
    """A dataset holding ``constants``' elements, with explicit VR little endian file meta.

    The constant elements are shared, not copied: every per-instance element set afterwards is new to
    the returned dataset, so ``constants`` is never mutated (this halves the cost of building thousands).
    """
    ds = Dataset({elem.tag: elem for elem in constants})
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = UID(sop_class_uid)
    meta.MediaStorageSOPInstanceUID = UID(sop_uid)
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    meta.ImplementationClassUID = PYDICOM_IMPLEMENTATION_UID
    meta.ImplementationVersionName = "SITECAL_DEMO"
    ds.file_meta = meta
    ds.SOPInstanceUID = sop_uid
    return ds


def set_patient_study(ds: Dataset, header: PatientStudyValues) -> None:
    """Set the patient and study elements, and SeriesDate and ContentDate (the study's date)."""
    ds.StudyDate = header.study_date
    ds.SeriesDate = header.study_date
    ds.ContentDate = header.study_date
    ds.StudyTime = header.study_time
    ds.AccessionNumber = header.accession
    ds.PatientName = header.patient_name
    ds.PatientID = header.patient_id
    ds.PatientBirthDate = header.birth_date
    ds.PatientSex = header.sex
    ds.PatientAge = header.age
    ds.StudyInstanceUID = header.study_uid
    ds.StudyID = header.study_id


def set_pixels(ds: Dataset, stored: NDArray[np.uint16]) -> None:
    """Set Pixel Data: ``stored`` (Rows, Columns) as little-endian 16-bit words."""
    ds.PixelData = np.ascontiguousarray(stored, dtype="<u2").tobytes()
