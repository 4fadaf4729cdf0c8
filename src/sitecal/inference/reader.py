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
from collections.abc import Sequence
from os import PathLike
from typing import Any

import numpy as np
import pydicom
from monai.data.image_reader import ImageReader
from monai.utils.misc import ensure_tuple

from sitecal._dicomfile import (
    CorruptHeader,
    DecodeCost,
    NotRegularFile,
    decode_cost,
    open_dicom,
    over_budget,
    quiet_pydicom,
)
from sitecal._text import plural
from sitecal.errors import DicomError
from sitecal.inference._presentation import apply_presentation, presentation_values, window
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
        f"image declares {rows} x {columns} pixels x {frames} {plural(frames, 'frame')} x {samples} "
        f"{plural(samples, 'sample')} = "
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
