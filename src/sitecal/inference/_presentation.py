"""Presentation values: decoded pixels to the float32 values the pipeline sees, block by block.

The one image convention of sitecal (the bundled model was trained with it), shared by the reader
(:mod:`sitecal.inference.reader`) and the demo. Values are computed in float64 a block at a time and
written into one float32 array, so an image costs its decoded array and its float32 values, not float64
copies of the whole image.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import NoReturn

import numpy as np
import pydicom
from pydicom.pixels.processing import apply_color_lut, apply_voi

from sitecal._dicomfile import decoded_pixels
from sitecal.errors import DicomError

__all__ = ["apply_presentation", "presentation_values", "window"]


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
    stored = np.asarray(stored)
    out = np.empty(stored.shape, dtype=np.float32)
    for block, target in _blocks(stored, out):
        values = block.astype(np.float64)
        if photometric == "MONOCHROME1":
            values = (-1.0 - values) if signed else (float(2**bits_stored - 1) - values)
        target[...] = values * slope + intercept
    return out


#: Values converted at a time: the float64 temporaries of a block stay a few MiB whatever the image's size.
_BLOCK_VALUES = 1 << 18


def _blocks(stored: np.ndarray, out: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Matching blocks of leading rows of ``stored`` and ``out`` (views, never copies), at least one.

    Converting block by block holds the float64 values of one block, not of the whole image: an image at
    the pixel limit would otherwise take 8 bytes a value two or three times over (a 16384 x 16384 image,
    6 GiB) on the way to its float32 array.
    """
    rows = stored.reshape(-1, stored.shape[-1]) if stored.ndim > 1 else stored.reshape(1, -1)
    targets = out.reshape(rows.shape + out.shape[stored.ndim :])  # PALETTE COLOR: a trailing RGB axis
    step = max(1, _BLOCK_VALUES // max(1, rows.shape[1]))
    for start in range(0, max(1, rows.shape[0]), step):
        yield rows[start : start + step], targets[start : start + step]


def window(values: np.ndarray, center: float, width: float, function: str = "LINEAR") -> np.ndarray:
    """The VOI window of PS3.3 C.11.2.1.2 on modality values, with output range [0, 1].

    ``function`` is the VOI LUT Function (0028,1056): ``LINEAR`` (the default), ``LINEAR_EXACT`` or
    ``SIGMOID``.
    """
    x = np.asarray(values, dtype=np.float64)
    function = function.upper() or "LINEAR"
    if function == "SIGMOID":
        return np.exp(-np.logaddexp(0.0, -4.0 * (x - center) / width))  # 1 / (1 + e^-z), no overflow
    if function == "LINEAR_EXACT":
        return np.clip((x - center) / width + 0.5, 0.0, 1.0)
    if function != "LINEAR":
        raise DicomError(f"VOILUTFunction (0028,1056) {function!r} is not LINEAR, LINEAR_EXACT or SIGMOID.")
    if width < 1:
        raise DicomError(f"WindowWidth (0028,1051) must be at least 1 for a LINEAR window. Got {width}.")
    if width == 1:  # a threshold at the centre
        return (x > center - 0.5).astype(np.float64)
    return np.clip((x - (center - 0.5)) / (width - 1) + 0.5, 0.0, 1.0)


_SINGLE_SAMPLE = ("MONOCHROME1", "MONOCHROME2", "PALETTE COLOR")


def presentation_values(ds: pydicom.Dataset, *, voi: str = "none") -> np.ndarray:
    """Pixel values of an image as the pipeline sees it before the protocol's transforms.

    The one image convention of sitecal (the bundled model was trained with it): ``stored`` is the decoded
    Pixel Data, not transposed; for MONOCHROME1 it is first inverted (:func:`apply_presentation`), so
    higher always means brighter; then ``value = stored * RescaleSlope + RescaleIntercept`` (slope 1 and
    intercept 0 when absent). Colour images are returned as RGB: YBR is converted by pydicom's decoders,
    PALETTE COLOR through its lookup tables.

    With ``voi="window"`` (the protocol's ``inputs.voi``), a greyscale image instead gets its first VOI
    transform: the VOI LUT Sequence if present, else the first Window Center/Width (:func:`window`), on
    the modality values, scaled to [0, 1] and, for MONOCHROME1, reversed (``1 - y``).

    Parameters
    ----------
    ds : pydicom.Dataset
        A dataset with pixel data.
    voi : {"none", "window"}
        Whether to apply the file's VOI transform.

    Returns
    -------
    numpy.ndarray
        float32, shape ``(Rows, Columns)``, ``(frames, Rows, Columns)`` or ``(..., 3)`` for colour.

    Raises
    ------
    DicomError
        If Pixel Data is missing or cannot be decoded (truncated, corrupt, unsupported transfer syntax),
        RescaleSlope or RescaleIntercept is not a finite number, a value is not finite after the rescale
        (NaN in Float Pixel Data, or an overflow past float32), or ``voi="window"`` and the image has no
        VOI transform; the message is the exclusion reason.

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
    photometric = _checked_photometric(ds)
    stored = decoded_pixels(ds)
    if photometric == "PALETTE COLOR":
        return _palette(stored, ds)
    if int(ds.get("SamplesPerPixel", 1)) > 1:
        return np.asarray(stored, dtype=np.float32)
    if np.issubdtype(stored.dtype, np.floating) and not _all_finite(stored):
        raise DicomError(
            "Float Pixel Data (7FE0,0008/0009) holds values that are not finite (NaN or infinity): "
            "exclude the image, or correct it at its source."
        )
    slope = _number(ds, "RescaleSlope", 1.0)
    intercept = _number(ds, "RescaleIntercept", 0.0)
    bits_stored = int(ds.get("BitsStored", ds.get("BitsAllocated", 16)))
    signed = int(ds.get("PixelRepresentation", 0)) == 1
    # an overflow is detected below, by value, and named with the header values that caused it
    with np.errstate(over="ignore", invalid="ignore"):
        if voi == "window":
            return _windowed(stored, ds, slope, intercept, photometric)
        values = apply_presentation(
            stored,
            photometric=photometric,
            bits_stored=bits_stored,
            slope=slope,
            intercept=intercept,
            signed=signed,
        )
    if not _all_finite(values):
        _not_finite(slope, intercept)
    return values


def _checked_photometric(ds: pydicom.Dataset) -> str:
    """The PhotometricInterpretation, once the dataset is known to have pixel data of a usable kind.

    DicomError when it has no pixel data, or a single-sample image is not MONOCHROME1, MONOCHROME2 or
    PALETTE COLOR.
    """
    if "PixelData" not in ds and "FloatPixelData" not in ds and "DoubleFloatPixelData" not in ds:
        raise DicomError(
            "The dataset has no Pixel Data (7FE0,0010). Read the file without stop_before_pixels."
        )
    photometric = str(ds.get("PhotometricInterpretation", "")).strip()
    if int(ds.get("SamplesPerPixel", 1)) == 1 and photometric not in _SINGLE_SAMPLE:
        raise DicomError(
            "PhotometricInterpretation (0028,0004) of a single-sample image must be MONOCHROME1, MONOCHROME2 "
            f"or PALETTE COLOR. Got {photometric!r}."
        )
    return photometric


def _palette(stored: np.ndarray, ds: pydicom.Dataset) -> np.ndarray:
    """PALETTE COLOR through its lookup tables, as float32 RGB, a block at a time."""
    out = np.empty((*stored.shape, 3), dtype=np.float32)
    try:
        for block, target in _blocks(stored, out):
            target[...] = apply_color_lut(block, ds)
    except Exception as exc:  # malformed or missing palette tables
        raise DicomError(
            f"PALETTE COLOR lookup tables (0028,1101-1203) are missing or malformed ({type(exc).__name__})."
        ) from exc
    return out


def _windowed(
    stored: np.ndarray, ds: pydicom.Dataset, slope: float, intercept: float, photometric: str
) -> np.ndarray:
    """The first VOI transform of the modality values, in [0, 1] (MONOCHROME1 reversed), block by block."""
    out = np.empty(stored.shape, dtype=np.float32)
    for block, target in _blocks(stored, out):
        modality = block.astype(np.float64) * slope + intercept
        if not np.isfinite(modality).all():
            _not_finite(slope, intercept)
        shown = _voi(modality, ds)
        target[...] = 1.0 - shown if photometric == "MONOCHROME1" else shown
    return out


def _all_finite(values: np.ndarray) -> bool:
    """Whether every value is finite, checked a block at a time (no whole-image boolean array)."""
    flat = values.reshape(-1)
    return all(np.isfinite(flat[i : i + _BLOCK_VALUES]).all() for i in range(0, flat.size, _BLOCK_VALUES))


#: Tags of the header numbers read with :func:`_number`, for messages.
_TAGS = {"RescaleSlope": "(0028,1053)", "RescaleIntercept": "(0028,1052)"}


def _number(ds: pydicom.Dataset, keyword: str, default: float) -> float:
    # pydicom warns (with the raw text) on a DS value such as 'NaN'; the checks below say it better
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        value = ds.get(keyword, default)
    if value in (None, ""):
        return default
    tag = _TAGS.get(keyword, "")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DicomError(
            f"{keyword} {tag} is not a number: correct the header, or exclude the image."
        ) from None
    if not math.isfinite(number):
        raise DicomError(
            f"{keyword} {tag} is not a finite number ({number:g}): correct the header, or exclude the image."
        )
    return number


def _not_finite(slope: float, intercept: float) -> NoReturn:
    raise DicomError(
        f"pixel values are not finite after rescale (RescaleSlope {slope:g}, RescaleIntercept "
        f"{intercept:g}): correct the header, or exclude the image."
    )


def _voi(modality: np.ndarray, ds: pydicom.Dataset) -> np.ndarray:
    """The first VOI transform of ``ds`` on its modality values, in [0, 1]."""
    if ds.get("VOILUTSequence"):
        item = ds.VOILUTSequence[0]
        bits = int(item.LUTDescriptor[2])
        return apply_voi(modality, ds, index=0).astype(np.float64) / float(2**bits - 1)
    if "WindowCenter" in ds and "WindowWidth" in ds:
        center, width = (_first(ds, keyword) for keyword in ("WindowCenter", "WindowWidth"))
        return window(modality, center, width, str(ds.get("VOILUTFunction", "LINEAR")))
    raise DicomError(
        "inputs.voi is 'window' but the image has neither a VOI LUT Sequence (0028,3010) nor Window Center "
        "and Width (0028,1050/1051). Set inputs.voi to 'none' or exclude such images."
    )


def _first(ds: pydicom.Dataset, keyword: str) -> float:
    element = ds[keyword]
    value = element.value[0] if element.VM > 1 else element.value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DicomError(
            f"{keyword} is not a number: correct the header, or set inputs.voi to 'none'."
        ) from None
