"""DICOM side of the demo: the image convention (:func:`presentation_values`) and the datasets written.

The image convention is the pipeline reader's, :func:`sitecal.inference.reader.presentation_values`
(re-exported here): one definition for training, the demo and the validation run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from pydicom.dataset import Dataset

from ..inference.reader import apply_presentation, presentation_values
from ._part10 import new_instance, set_patient_study, set_pixels
from ._scanners import ScannerProfile, Site

__all__ = ["StudyHeader", "apply_presentation", "build_dataset", "presentation_values", "window_of"]


@dataclass(frozen=True)
class StudyHeader:
    """Per-study header values of one demo image (all synthetic)."""

    patient_id: str
    patient_name: str
    birth_date: str
    sex: str
    age: str
    study_date: str
    study_time: str
    accession: str
    study_uid: str
    series_uid: str
    sop_uid: str
    study_id: str
    series_number: int
    instance_number: int


def window_of(
    stored: NDArray[np.uint16], scanner: ScannerProfile
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """WindowCenter and WindowWidth of a batch (..., Rows, Columns), from the 1st and 99th percentiles.

    The VOI window applies to the modality LUT output (``stored * slope + intercept``), before any
    MONOCHROME1 inversion, so it is computed on that. Rounded to 0.1, the width at least 1.
    """
    values = stored.astype(np.float64) * scanner.slope + scanner.intercept
    lo, hi = np.percentile(values, [1.0, 99.0], axis=(-2, -1))
    return np.round((lo + hi) / 2.0, 1), np.round(np.maximum(hi - lo, 1.0), 1)


@lru_cache(maxsize=32)
def _constant_elements(scanner: ScannerProfile, site: Site, rows: int, columns: int) -> Dataset:
    """Elements that are the same for every image of one scanner (never mutated once built)."""
    ds = Dataset()
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.ImageType = ["ORIGINAL", "PRIMARY"]
    ds.SOPClassUID = scanner.sop_class_uid
    ds.Modality = scanner.modality
    if scanner.modality == "DX":
        ds.PresentationIntentType = "FOR PRESENTATION"
    ds.Manufacturer = scanner.manufacturer
    ds.InstitutionName = site.institution_name
    ds.ReferringPhysicianName = ""
    ds.StationName = scanner.station_name
    ds.StudyDescription = "CHEST PA"
    ds.SeriesDescription = "PA"
    ds.ManufacturerModelName = scanner.model_name
    ds.BodyPartExamined = "CHEST"
    ds.ViewPosition = "PA"
    ds.PatientOrientation = ["L", "F"]
    ds.ImagerPixelSpacing = [2.8, 2.8]
    ds.BurnedInAnnotation = "NO"
    ds.LossyImageCompression = "00"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = scanner.photometric
    ds.Rows = rows
    ds.Columns = columns
    ds.BitsAllocated = 16
    ds.BitsStored = scanner.bits_stored
    ds.HighBit = scanner.bits_stored - 1
    ds.PixelRepresentation = 0
    ds.RescaleIntercept = scanner.intercept
    ds.RescaleSlope = scanner.slope
    ds.RescaleType = "US"
    return ds


def build_dataset(
    header: StudyHeader,
    stored: NDArray[np.uint16],
    scanner: ScannerProfile,
    site: Site,
    *,
    window: tuple[float, float] | None = None,
) -> Dataset:
    """Build the Part-10-ready dataset of one demo image (explicit VR little endian, file meta included).

    Parameters
    ----------
    header : StudyHeader
        Patient, study and UID values.
    stored : ndarray of uint16, shape (Rows, Columns)
        Stored pixel values, already inverted for MONOCHROME1 scanners.
    scanner : ScannerProfile
        Equipment and pixel-module values.
    site : Site
        Supplies InstitutionName.
    window : tuple of float, optional
        (WindowCenter, WindowWidth); computed with :func:`window_of` when omitted.

    Returns
    -------
    pydicom.Dataset
        Write it with ``pydicom.dcmwrite(path, ds, enforce_file_format=True)``.
    """
    rows, columns = stored.shape
    constants = _constant_elements(scanner, site, rows, columns)
    ds = new_instance(constants, sop_class_uid=scanner.sop_class_uid, sop_uid=header.sop_uid)
    set_patient_study(ds, header)
    ds.SeriesTime = header.study_time
    ds.ContentTime = header.study_time
    ds.SeriesInstanceUID = header.series_uid
    ds.SeriesNumber = header.series_number
    ds.InstanceNumber = header.instance_number
    if window is None:
        center_arr, width_arr = window_of(stored, scanner)
        window = float(center_arr), float(width_arr)
    ds.WindowCenter = window[0]
    ds.WindowWidth = window[1]
    set_pixels(ds, stored)
    return ds
