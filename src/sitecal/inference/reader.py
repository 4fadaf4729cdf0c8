"""A pydicom-based MONAI ``ImageReader`` that returns presentation-ready pixel values.

MONAI's own ``PydicomReader`` converts every header to JSON (slow), leaves MONOCHROME1 uninverted and
stacks every series of a folder into one volume. This reader is given explicit files, reads each once, and
returns ``(Rows, Columns)`` float32 arrays (no transposition) in the convention of
:func:`presentation_values`, which the bundled model was trained with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pydicom
from monai.data.image_reader import ImageReader
from monai.utils import ensure_tuple

__all__ = ["DicomImageReader", "presentation_values"]


def presentation_values(ds: pydicom.Dataset) -> np.ndarray:
    """Pixel values of a grayscale image, with MONOCHROME1 inverted and the modality rescale applied.

    ``stored`` is the decoded pixel array. For MONOCHROME1 it is first replaced by
    ``(2**BitsStored - 1) - stored`` (unsigned) or ``-1 - stored`` (signed), so higher always means
    brighter; then ``value = stored * RescaleSlope + RescaleIntercept`` (slope 1, intercept 0 when absent).

    Parameters
    ----------
    ds : pydicom.Dataset
        A dataset with pixel data.

    Returns
    -------
    numpy.ndarray
        float32, shape ``(Rows, Columns)`` (or ``(frames, Rows, Columns)``, or ``(..., 3)`` for colour).
    """
    stored = ds.pixel_array.astype(np.float64)
    if str(ds.get("PhotometricInterpretation", "")).strip() == "MONOCHROME1":
        bits = int(ds.get("BitsStored", ds.get("BitsAllocated", 16)))
        signed = int(ds.get("PixelRepresentation", 0)) == 1
        stored = (-1.0 - stored) if signed else (float(2**bits - 1) - stored)
    slope = float(ds.get("RescaleSlope", 1.0) or 1.0)
    intercept = float(ds.get("RescaleIntercept", 0.0) or 0.0)
    return (stored * slope + intercept).astype(np.float32)


class DicomImageReader(ImageReader):
    """Read DICOM files named explicitly, for ``monai.transforms.LoadImage(reader=DicomImageReader())``.

    One file gives one image; several files are stacked along a new first axis in the order given.
    """

    def verify_suffix(self, filename: Sequence[str | Path] | str | Path) -> bool:
        """Accept any name: DICOM files often have no suffix, and sitecal passes only scanned DICOM files."""
        return True

    def read(self, data: Sequence[str | Path] | str | Path, **kwargs: Any) -> list[pydicom.Dataset]:
        """Read the files with pixel data (``kwargs`` go to ``pydicom.dcmread``)."""
        return [pydicom.dcmread(str(path), **kwargs) for path in ensure_tuple(data)]

    def get_data(self, img: Any) -> tuple[np.ndarray, dict[str, Any]]:
        """Return the presentation-value array and minimal metadata."""
        datasets = ensure_tuple(img)
        arrays = [presentation_values(ds) for ds in datasets]
        array = arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=0)
        colour = int(datasets[0].get("SamplesPerPixel", 1)) > 1
        meta: dict[str, Any] = {
            "spatial_shape": np.asarray(array.shape[:-1] if colour else array.shape),
            "original_channel_dim": -1 if colour else "no_channel",
            "affine": np.eye(array.ndim + (0 if colour else 1)),
            "original_affine": np.eye(array.ndim + (0 if colour else 1)),
        }
        return array, meta
