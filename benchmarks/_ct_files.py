"""Generated CT-like DICOM files for the benchmarks: 512x512 int16, rescale, explicit VR little endian."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

__all__ = ["write_ct_files"]


def write_ct_files(
    folder: Path, n: int, *, size: int = 512, seed: int = 0, header_elements: int = 0
) -> list[Path]:
    """Write ``n`` single-slice CT files (one study of one series each) under ``folder``; return paths.

    ``header_elements`` > 0 adds a header of clinical size: that many private LO elements (as vendors
    write acquisition details) and a Referenced Image Sequence of ``header_elements // 10`` items.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = rng.integers(-1000, 1500, size=(size, size), dtype=np.int16)
    paths = []
    for i in range(n):
        ds = Dataset()
        ds.file_meta = FileMetaDataset()
        ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds.file_meta.MediaStorageSOPClassUID = CTImageStorage
        ds.SOPClassUID = CTImageStorage
        ds.StudyInstanceUID = generate_uid(entropy_srcs=[f"bench-study-{seed}-{i}"])
        ds.SeriesInstanceUID = generate_uid(entropy_srcs=[f"bench-series-{seed}-{i}"])
        ds.PatientID = f"BENCH{i:06d}"
        ds.Modality = "CT"
        ds.Manufacturer = "SIEMENS"
        ds.InstanceNumber = 1
        ds.ImagePositionPatient = [0.0, 0.0, float(i)]
        ds.ImageOrientationPatient = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
        ds.PixelSpacing = [0.7, 0.7]
        ds.set_pixel_data((np.roll(base, i, axis=0) + 1024).astype(np.uint16), "MONOCHROME2", 12)
        ds.SOPInstanceUID = generate_uid(entropy_srcs=[f"bench-instance-{seed}-{i}"])
        ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
        ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
        if header_elements:
            block = ds.private_block(0x0019, "SITECAL BENCH", create=True)
            for k in range(min(header_elements, 255)):
                block.add_new(k, "LO", f"acquisition parameter {k}")
            items = []
            for k in range(header_elements // 10):
                item = Dataset()
                item.ReferencedSOPClassUID = CTImageStorage
                item.ReferencedSOPInstanceUID = generate_uid(entropy_srcs=[f"ref-{i}-{k}"])
                items.append(item)
            ds.ReferencedImageSequence = items
        path = folder / f"ct{i:05d}.dcm"
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths
