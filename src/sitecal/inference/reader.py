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

from sitecal.errors import DicomError

__all__ = ["DicomImageReader", "apply_presentation", "presentation_values"]


def apply_presentation(
    stored: np.ndarray,
    *,
    photometric: str,
    bits_stored: int,
    slope: float,
    intercept: float,
    signed: bool = False,
) -> np.ndarray:
    """Presentation values from stored values and the header values that define them.

    Parameters
    ----------
    stored : ndarray of int, shape (..., Rows, Columns)
        Stored pixel values.
    photometric : str
        PhotometricInterpretation (0028,0004); only MONOCHROME1 changes anything.
    bits_stored : int
        BitsStored (0028,0101).
    slope, intercept : float
        RescaleSlope (0028,1053) and RescaleIntercept (0028,1052).
    signed : bool
        PixelRepresentation (0028,0103) is 1.

    Returns
    -------
    ndarray of float32, same shape as ``stored``
        ``s * slope + intercept`` with, for MONOCHROME1, ``s = (2**bits_stored - 1) - stored`` (unsigned) or
        ``s = -1 - stored`` (signed, the bitwise complement), and ``s = stored`` otherwise; computed in
        float64, exact for stored values below 2**24 and dyadic slopes.
    """
    values = np.asarray(stored).astype(np.float64)
    if photometric == "MONOCHROME1":
        values = (-1.0 - values) if signed else (float(2**bits_stored - 1) - values)
    return (values * slope + intercept).astype(np.float32)


def presentation_values(ds: pydicom.Dataset) -> np.ndarray:
    """Pixel values of an image as the pipeline sees it before the protocol's transforms.

    The one image convention of sitecal (the bundled model was trained with it): ``stored`` is the decoded
    Pixel Data, not transposed; for MONOCHROME1 it is first inverted (:func:`apply_presentation`), so
    higher always means brighter; then ``value = stored * RescaleSlope + RescaleIntercept`` (slope 1 and
    intercept 0 when absent). Colour images (SamplesPerPixel > 1) are returned as decoded, as float32.

    Parameters
    ----------
    ds : pydicom.Dataset
        A dataset with pixel data.

    Returns
    -------
    numpy.ndarray
        float32, shape ``(Rows, Columns)``, ``(frames, Rows, Columns)`` or ``(..., 3)`` for colour.

    Raises
    ------
    DicomError
        If Pixel Data is missing or cannot be decoded (truncated, unsupported transfer syntax).

    Examples
    --------
    >>> import numpy as np
    >>> from pydicom.dataset import Dataset
    >>> ds = Dataset()
    >>> ds.Rows, ds.Columns, ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, 2, 1, "MONOCHROME1"
    >>> ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    >>> ds.set_pixel_data(np.array([[0, 4095]], dtype=np.uint16), "MONOCHROME1", 12)
    >>> presentation_values(ds).tolist()
    [[4095.0, 0.0]]
    """
    if "PixelData" not in ds and "FloatPixelData" not in ds and "DoubleFloatPixelData" not in ds:
        raise DicomError(
            "The dataset has no Pixel Data (7FE0,0010). Read the file without stop_before_pixels."
        )
    try:
        stored = ds.pixel_array
    except Exception as exc:  # pydicom raises several types for truncated or undecodable pixel data
        raise DicomError(f"Pixel Data (7FE0,0010) cannot be decoded ({type(exc).__name__}).") from exc
    if int(ds.get("SamplesPerPixel", 1)) > 1:
        return np.asarray(stored, dtype=np.float32)
    photometric = str(ds.get("PhotometricInterpretation", "")).strip()
    if photometric not in ("MONOCHROME1", "MONOCHROME2"):
        raise DicomError(
            "PhotometricInterpretation (0028,0004) of a single-sample image must be MONOCHROME1 or "
            f"MONOCHROME2. Got {photometric!r} (palette images are not supported yet)."
        )
    slope = ds.get("RescaleSlope", 1.0)
    intercept = ds.get("RescaleIntercept", 0.0)
    return apply_presentation(
        stored,
        photometric=photometric,
        bits_stored=int(ds.get("BitsStored", ds.get("BitsAllocated", 16))),
        slope=1.0 if slope in (None, "") else float(slope),
        intercept=0.0 if intercept in (None, "") else float(intercept),
        signed=int(ds.get("PixelRepresentation", 0)) == 1,
    )


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
