"""A pydicom-based MONAI ``ImageReader`` that returns presentation-ready pixel values.

MONAI's own ``PydicomReader`` converts every header to JSON (slow), leaves MONOCHROME1 uninverted and
stacks every series of a folder into one volume. This reader is given explicit files, reads each once, and
returns ``(Rows, Columns)`` float32 arrays (no transposition) in the convention of
:func:`presentation_values`, which the bundled model was trained with.

Every value it returns is finite: a header whose rescale gives NaN or infinity, and an image that declares
more values than the reader's limit, or whose decoding would hold more memory than the limit buys, are
refused with a :class:`~sitecal.errors.DicomError` whose message is the study's exclusion reason.

Memory: the decoded array is not kept on the dataset, the presentation values are written block by block
into one float32 array (float64 only for a block), and a series is filled slice by slice into its volume,
so an image's peak is what :class:`~sitecal._dicomfile.DecodeCost` states (:data:`DEFAULT_MAX_VALUES`).
Protocol transforms that run on the full-size image before it is resized (``ScaleIntensity`` first, say)
make their own float32 copies, 4 bytes a value each, on top of it.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator, Sequence
from os import PathLike
from typing import Any, NoReturn

import numpy as np
import pydicom
from monai.data.image_reader import ImageReader
from monai.utils.misc import ensure_tuple
from pydicom.pixels.processing import apply_color_lut, apply_voi

from sitecal._dicomfile import (
    CorruptHeader,
    DecodeCost,
    NotRegularFile,
    decode_cost,
    decoded_pixels,
    open_dicom,
    over_budget,
    quiet_pydicom,
)
from sitecal.errors import DicomError
from sitecal.inference._slices import order_slices

__all__ = ["DEFAULT_MAX_VALUES", "DicomImageReader", "apply_presentation", "presentation_values", "window"]

#: Pixel values one image (or one series) may declare before the reader refuses to decode it: 2**28
#: float32 values are 1 GiB. The same limit is a memory budget of
#: :data:`~sitecal._dicomfile.BYTES_PER_PIXEL_VALUE` (6) bytes a value, 1.5 GiB: an image whose decoding
#: would hold more (:class:`~sitecal._dicomfile.DecodeCost`: the value read, the decoded array, then the
#: larger of the decoder's frame buffer and the float32 values) is refused before it is decoded. Measured
#: (peak RSS a child process adds reading one file through ``LoadImage`` and the demo protocol's
#: transforms, tests/security/test_image_memory.py's ``_CHAIN``): a 4 MiB RLE file declaring 16384 x 16384
#: 8-bit pixels, exactly the pixel limit, adds 1,288 MiB (its stated cost: 1,284 MiB); it added 5,381 MiB
#: before the chain converted block by block. Its 16-bit twin added 5,641 MiB; it is now refused before
#: decoding (it would hold 1,545 MiB, above the 1,536 MiB budget), having read its 8 MiB.
DEFAULT_MAX_VALUES = 2**28
#: The protocol setting that raises the limit, named in the refusal.
_LIMIT_SETTING = "inputs.max_pixels_per_image"


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


class DicomImageReader(ImageReader):
    """Read DICOM files named explicitly, for ``monai.transforms.LoadImage(reader=DicomImageReader())``.

    One file gives one image; several files are a series, stacked along a new first axis in slice order
    (ImagePositionPatient along the orientation normal, not InstanceNumber or the order given). Files
    without preamble or File Meta Information are read too (:func:`sitecal._dicomfile.open_dicom`).

    Before anything is decoded, the values the headers declare (Rows x Columns x frames x samples, summed
    over the files of a series) are checked against ``max_values``: a small compressed file can declare
    an image of many gigabytes.

    Parameters
    ----------
    voi : {"none", "window"}
        Passed to :func:`presentation_values` (the protocol's ``inputs.voi``).
    max_values : int, default 2**28
        The most pixel values one image or series may declare (:data:`DEFAULT_MAX_VALUES`, 1 GiB as
        float32), and the decoding memory it may hold: ``max_values`` x 6 bytes (1.5 GiB).
    transform_multiple : float, default 1
        What the transforms after the reader hold at their peak while the image has its loaded size, as a
        multiple of the float32 image (1: the image alone;
        :func:`sitecal.inference.transforms.loaded_size_multiple`): counted in the same budget.

    Examples
    --------
    >>> DicomImageReader(max_values=2**20).max_values
    1048576
    """

    def __init__(
        self, voi: str = "none", *, max_values: int = DEFAULT_MAX_VALUES, transform_multiple: float = 1.0
    ) -> None:
        super().__init__()
        if voi not in ("none", "window"):
            raise ValueError(f"voi must be 'none' or 'window'. Got {voi!r}.")
        if isinstance(max_values, bool) or not isinstance(max_values, int) or max_values < 1:
            raise ValueError(f"max_values must be an int >= 1. Got {max_values!r}.")
        if isinstance(transform_multiple, bool) or not (
            isinstance(transform_multiple, int | float) and 1 <= transform_multiple <= 1024
        ):
            raise ValueError(
                f"transform_multiple must be a number from 1 to 1024. Got {transform_multiple!r}."
            )
        self.voi = voi
        self.max_values = max_values
        self.transform_multiple = float(transform_multiple)

    def verify_suffix(self, filename: Sequence[PathLike[str] | str] | PathLike[str] | str) -> bool:
        """Accept any name: DICOM files often have no suffix, and sitecal passes only scanned DICOM files."""
        return True

    def read(
        self, data: Sequence[PathLike[str] | str] | PathLike[str] | str, **kwargs: Any
    ) -> list[pydicom.Dataset]:
        """Read the files with pixel data (``kwargs`` go to ``pydicom.dcmread``)."""
        datasets = []
        for path in ensure_tuple(data):
            try:
                datasets.append(open_dicom(str(path), **kwargs))
            except NotRegularFile as exc:
                raise DicomError(
                    f"file can no longer be read: {exc} (it was a regular file at the scan)"
                ) from exc
            except EOFError as exc:
                raise DicomError("truncated file (it changed after the scan)") from exc
            except CorruptHeader as exc:  # a deflated data set inflating past its limit, or not deflate
                raise DicomError(f"corrupt DICOM file ({exc})") from exc
            except Exception as exc:  # the scan admitted the file; it changed or is unreadable now
                raise DicomError(f"file can no longer be read as DICOM ({type(exc).__name__})") from exc
        return datasets

    def get_data(self, img: Any) -> tuple[np.ndarray, dict[str, Any]]:
        """Return the presentation-value array and minimal metadata.

        Several files are a series: its slices are ordered along the orientation normal
        (:func:`sitecal.inference._slices.order_slices`) and stacked to ``(slices, Rows, Columns)``, with
        the patient-space affine of that index order. pydicom checks a value when it is first read, here,
        and its warnings quote the value: they are caught (:func:`sitecal._dicomfile.quiet_pydicom`).
        """
        with quiet_pydicom():
            return self._data(ensure_tuple(img))

    def _data(self, datasets: tuple[pydicom.Dataset, ...]) -> tuple[np.ndarray, dict[str, Any]]:
        _check_size(datasets, self.max_values, self.transform_multiple)
        if len(datasets) == 1:
            array = presentation_values(datasets[0], voi=self.voi)
            affine = np.eye(array.ndim + (0 if _is_colour(datasets[0]) else 1))
        else:
            if any(_is_colour(ds) or int(ds.get("NumberOfFrames", 1) or 1) > 1 for ds in datasets):
                raise DicomError(
                    "a series of colour or multi-frame images cannot be stacked into one volume."
                )
            order, geometry = order_slices(datasets)
            array = _stack_into([datasets[i] for i in order], self.voi)
            affine = geometry.affine
        colour = _is_colour(datasets[0])
        meta: dict[str, Any] = {
            "spatial_shape": np.asarray(array.shape[:-1] if colour else array.shape),
            "original_channel_dim": -1 if colour else "no_channel",
            "affine": affine,
            "original_affine": affine.copy(),
            # what the image is, so that a transform that cannot take it can be explained by predict
            "samples_per_pixel": int(array.shape[-1]) if colour else 1,
            "number_of_frames": _declared(datasets[0], "NumberOfFrames") if len(datasets) == 1 else 1,
            "slices": len(datasets),
        }
        return array, meta


def _stack_into(datasets: Sequence[pydicom.Dataset], voi: str) -> np.ndarray:
    """The slices' presentation values in one ``(slices, Rows, Columns)`` array, filled slice by slice.

    ``np.stack`` of the slices would hold every slice and the volume together: twice the volume.
    """
    first = presentation_values(datasets[0], voi=voi)
    volume = np.empty((len(datasets), *first.shape), dtype=np.float32)
    volume[0] = first
    del first
    for k, ds in enumerate(datasets[1:], start=1):
        volume[k] = presentation_values(ds, voi=voi)
    return volume


def _declared(ds: pydicom.Dataset, keyword: str, default: int = 1) -> int:
    """A count the header declares (Rows, NumberOfFrames, ...), ``default`` when absent or empty."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pydicom repeats the raw value in its warning
        value = ds.get(keyword, default)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DicomError(
            f"{keyword} is not a whole number: the image's size cannot be known; exclude the file."
        ) from None
    if number < 0:
        raise DicomError(f"{keyword} is negative: the image's size cannot be known; exclude the file.")
    return number


def _check_size(datasets: Sequence[pydicom.Dataset], limit: int, multiple: float = 1.0) -> None:
    """Refuse, before decoding, an image or series that declares more than ``limit`` pixel values.

    Then refuse one whose decoding, or the transforms after it (``multiple`` times the float32 image),
    would hold more memory than the limit buys (:func:`_check_cost`).
    """
    sizes = []
    for ds in datasets:
        samples = 3 if str(ds.get("PhotometricInterpretation", "")).strip() == "PALETTE COLOR" else 1
        sizes.append(
            (
                _declared(ds, "Rows", 0),
                _declared(ds, "Columns", 0),
                _declared(ds, "NumberOfFrames"),
                max(samples, _declared(ds, "SamplesPerPixel")),
            )
        )
    total = sum(math.prod(size) for size in sizes)
    if total <= limit:
        _check_cost(datasets, limit, multiple)
        return
    rows, columns, frames, samples = sizes[0]
    what = (
        f"image declares {rows} x {columns} pixels x {frames} frame(s) x {samples} sample(s) = "
        f"{total:,} values"
        if len(sizes) == 1
        else f"series of {len(sizes)} images declares {total:,} values in all"
    )
    raise DicomError(
        f"{what}, more than the limit of {limit:,} per image; it was not decoded. "
        f"Raise {_LIMIT_SETTING} in the protocol if such images are expected."
    )


def _check_cost(datasets: Sequence[pydicom.Dataset], limit: int, multiple: float) -> None:
    """Refuse, before decoding, an image or series whose decoding would hold more than ``limit`` values buy.

    Every value was read whole, so each counts its own length (:func:`sitecal._dicomfile.decode_cost`). A
    series holds every slice's encoded value and the float32 volume, and decodes one slice at a time. The
    transforms then hold ``multiple`` times the float32 image, once the decoding memory is freed.
    """
    costs = [decode_cost(ds, 0) for ds in datasets]
    if any(cost is None for cost in costs):
        return  # a malformed count: decoding names it
    parts = [cost for cost in costs if cost is not None]
    image = sum(c.output for c in parts)  # the float32 image, or volume, the transforms receive
    if len(parts) == 1:
        cost, what = parts[0], "image"
    else:
        cost = DecodeCost(
            encoded=sum(c.encoded for c in parts),
            decoded=max(c.decoded for c in parts),
            transient=image + max(c.transient for c in parts),
            output=image + max(c.output for c in parts),
        )
        what = f"series of {len(parts)} images"
    if multiple > 1:
        cost = dataclasses.replace(cost, transforms=math.ceil(multiple * image))
    why = over_budget(cost, limit)
    if why is not None:
        raise DicomError(
            f"{what} too large to decode: {why}; it was not decoded. "
            f"Raise {_LIMIT_SETTING} in the protocol if such images are expected."
        )


def _is_colour(ds: pydicom.Dataset) -> bool:
    return (
        int(ds.get("SamplesPerPixel", 1)) > 1
        or str(ds.get("PhotometricInterpretation", "")) == "PALETTE COLOR"
    )
