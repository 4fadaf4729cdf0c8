"""The DICOM datasets of the CT demo: CT Image Storage instances, explicit VR little endian."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from pydicom.dataset import Dataset

from .._part10 import new_instance, set_patient_study, set_pixels
from ._scanners import CT_SOP_CLASS_UID, CtScanner, Site
from ._synthesis import INTERCEPT

__all__ = ["SeriesHeader", "StudyHeader", "build_slice", "ds_number"]


@dataclass(frozen=True)
class StudyHeader:
    """Patient and study values shared by every instance of one study (all synthetic)."""

    patient_id: str
    patient_name: str
    birth_date: str
    sex: str
    age: str
    study_date: str
    study_time: str
    accession: str
    study_uid: str
    study_id: str


@dataclass(frozen=True)
class SeriesHeader:
    """Values shared by every instance of one series."""

    series_uid: str
    series_number: int
    description: str
    kernel: str
    localizer: bool
    orientation: tuple[float, ...]
    pixel_spacing: float
    thickness: float
    series_time: str


def ds_number(value: float) -> str:
    """A DS string of at most 16 characters: up to 6 decimals, trailing zeros dropped."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


@lru_cache(maxsize=16)
def _constant_elements(scanner: CtScanner, site: Site) -> Dataset:
    """Elements equal for every CT slice of one scanner (never mutated once built)."""
    ds = Dataset()
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.SOPClassUID = CT_SOP_CLASS_UID
    ds.Modality = "CT"
    ds.Manufacturer = scanner.manufacturer
    ds.InstitutionName = site.institution_name
    ds.ReferringPhysicianName = ""
    ds.StationName = scanner.station_name
    ds.StudyDescription = "CT THORAX"
    ds.ManufacturerModelName = scanner.model_name
    ds.BodyPartExamined = "CHEST"
    ds.KVP = "120"
    ds.PatientPosition = "HFS"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated = 16
    ds.BitsStored = 12
    ds.HighBit = 11
    ds.PixelRepresentation = 0
    ds.RescaleIntercept = ds_number(INTERCEPT)
    ds.RescaleSlope = "1"
    ds.RescaleType = "HU"
    ds.BurnedInAnnotation = "NO"
    ds.LossyImageCompression = "00"
    return ds


def build_slice(
    study: StudyHeader,
    series: SeriesHeader,
    *,
    scanner: CtScanner,
    site: Site,
    frame_of_reference_uid: str,
    sop_uid: str,
    instance_number: int,
    position: NDArray[np.float64],
    stored: NDArray[np.uint16],
) -> Dataset:
    """The Part-10-ready dataset of one CT slice.

    Parameters
    ----------
    study, series : StudyHeader, SeriesHeader
        Shared values.
    scanner, site : CtScanner, Site
        Equipment and institution.
    frame_of_reference_uid, sop_uid : str
        FrameOfReferenceUID (one per study) and SOPInstanceUID.
    instance_number : int
        InstanceNumber as the scanner writes it (not necessarily the slice order).
    position : ndarray, shape (3,)
        ImagePositionPatient.
    stored : ndarray of uint16, shape (Rows, Columns)
        Stored values (HU = stored - 1024).

    Returns
    -------
    pydicom.Dataset
        Write it with ``pydicom.dcmwrite(path, ds, enforce_file_format=True)``.
    """
    rows, columns = stored.shape
    constants = _constant_elements(scanner, site)
    ds = new_instance(constants, sop_class_uid=CT_SOP_CLASS_UID, sop_uid=sop_uid)
    set_patient_study(ds, study)
    ds.ImageType = ["ORIGINAL", "PRIMARY", "LOCALIZER" if series.localizer else "AXIAL"]
    ds.SeriesTime = series.series_time
    ds.ContentTime = series.series_time
    ds.SeriesDescription = series.description
    ds.SliceThickness = ds_number(series.thickness)
    if series.kernel:
        ds.ConvolutionKernel = series.kernel
    ds.SeriesInstanceUID = series.series_uid
    ds.SeriesNumber = series.series_number
    ds.InstanceNumber = instance_number
    ds.ImagePositionPatient = [ds_number(float(v)) for v in position]
    ds.ImageOrientationPatient = [ds_number(v) for v in series.orientation]
    ds.FrameOfReferenceUID = frame_of_reference_uid
    ds.PositionReferenceIndicator = ""
    normal = np.cross(np.asarray(series.orientation[:3]), np.asarray(series.orientation[3:]))
    ds.SliceLocation = ds_number(round(float(np.dot(position, normal)), 4))
    ds.Rows = rows
    ds.Columns = columns
    ds.PixelSpacing = [ds_number(series.pixel_spacing)] * 2
    center, width = (200.0, 1600.0) if series.localizer else (40.0, 400.0)  # a mediastinal window
    ds.WindowCenter = ds_number(center)
    ds.WindowWidth = ds_number(width)
    set_pixels(ds, stored)
    return ds
