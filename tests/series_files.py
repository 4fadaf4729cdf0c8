"""Write small CT series for tests: positions, orientation and InstanceNumbers as asked, pixels known."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pydicom
from pydicom.dataset import FileMetaDataset
from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

AXIAL = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)


def write_series(
    folder: Path,
    positions: Sequence[float],
    *,
    study_uid: str,
    series_uid: str | None = None,
    instance_numbers: Sequence[int] | None = None,
    orientation: Sequence[float] = AXIAL,
    rows: int = 8,
    columns: int = 6,
    description: str = "Thorax 3.0 B31f",
    modality: str = "CT",
    body_part: str = "CHEST",
    series_number: int = 2,
    file_order: Sequence[int] | None = None,
    extra: dict[str, object] | None = None,
) -> list[Path]:
    """One file per slice; slice ``k`` lies at ``positions[k]`` along the normal and has every stored
    pixel equal to ``100 + k`` (so HU = stored - 1024 names the slice).

    Files are named ``IM<j>.dcm`` with ``j`` running in ``file_order`` (default: slice order), so that file
    order and slice order can differ. Returns the paths in slice order.
    """
    folder.mkdir(parents=True, exist_ok=True)
    series_uid = series_uid or generate_uid(entropy_srcs=[study_uid, description, str(series_number)])
    row, column = np.array(orientation[:3]), np.array(orientation[3:])
    normal = np.cross(row, column)
    order = list(file_order) if file_order is not None else list(range(len(positions)))
    paths = []
    for k, depth in enumerate(positions):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = CTImageStorage
        sop_uid = generate_uid(entropy_srcs=[series_uid, str(k)])
        meta.MediaStorageSOPInstanceUID = sop_uid
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = pydicom.Dataset()
        ds.file_meta = meta
        ds.SOPClassUID = CTImageStorage
        ds.SOPInstanceUID = sop_uid
        ds.StudyInstanceUID = study_uid
        ds.SeriesInstanceUID = series_uid
        ds.PatientID = "P-" + study_uid[-6:]
        ds.Modality = modality
        ds.SeriesDescription = description
        ds.BodyPartExamined = body_part
        ds.SeriesNumber = series_number
        ds.InstanceNumber = instance_numbers[k] if instance_numbers is not None else k + 1
        origin = np.array([-20.0, -30.0, 0.0]) + depth * normal
        ds.ImagePositionPatient = [f"{v:.4f}" for v in origin]
        ds.ImageOrientationPatient = [f"{v:.6f}" for v in orientation]
        ds.PixelSpacing = ["0.7", "0.8"]
        ds.SliceThickness = "2.5"
        ds.Rows, ds.Columns = rows, columns
        ds.SamplesPerPixel = 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
        ds.RescaleSlope, ds.RescaleIntercept = "1", "-1024"
        for keyword, value in (extra or {}).items():
            setattr(ds, keyword, value)
        ds.PixelData = np.full((rows, columns), 100 + k, dtype=np.uint16).tobytes()
        path = folder / f"IM{order[k]:04d}.dcm"
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths
