"""One file's DICOM header as the scan keeps it: the wanted values as text, or why the file is unusable."""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pydicom
from pydicom.multival import MultiValue
from pydicom.sequence import Sequence as DicomSequence

from sitecal._dicomfile import (
    CorruptHeader,
    NotDicom,
    NotRegularFile,
    decode_cost,
    open_dicom,
    over_budget,
    quiet_pydicom,
)

#: Header fields every instance must have to enter the cohort.
REQUIRED_KEYWORDS = ("SOPInstanceUID", "StudyInstanceUID")
#: Rows x Columns x NumberOfFrames x SamplesPerPixel above which an image is excluded: 2**28 values are
#: 1 GiB as float32, what one decoded image may take on a 16 GB workstation with the model beside it. The
#: same limit buys :data:`~sitecal._dicomfile.BYTES_PER_PIXEL_VALUE` bytes a value of decoding memory
#: (1.5 GiB), and an image whose decoding would hold more (:func:`~sitecal._dicomfile.decode_cost`: a
#: 32-bit or YBR colour image near the pixel limit) is excluded too.
DEFAULT_MAX_PIXELS_PER_IMAGE = 2**28


@dataclass(frozen=True)
class Unusable:
    """Why a file cannot be used, and its StudyInstanceUID when the header could be read."""

    reason: str
    study_instance_uid: str | None = None


def read_header(
    path: Path,
    keywords: Sequence[str],
    *,
    max_pixels_per_image: int = DEFAULT_MAX_PIXELS_PER_IMAGE,
    transform_multiple: float = 1.0,
) -> dict[str, str] | Unusable:
    """Read one file's header; return the wanted values as text, or why it cannot be used.

    Pixel data is not read: large values are deferred. The file is opened by
    :func:`sitecal._dicomfile.open_dicom` (regular files only; also without preamble or File Meta
    Information; a file that ends inside an element is truncated). An image declaring more than
    ``max_pixels_per_image`` values (Rows x Columns x NumberOfFrames x SamplesPerPixel) is unusable, and
    so is one whose decoding would hold more than ``max_pixels_per_image`` x
    :data:`~sitecal._dicomfile.BYTES_PER_PIXEL_VALUE` bytes (:func:`~sitecal._dicomfile.decode_cost`), or
    whose transforms would (``transform_multiple`` times its float32 values:
    :func:`sitecal.inference.transforms.loaded_size_multiple`), as the reader would refuse it.
    Multi-valued values are written as DICOM writes them, joined by a backslash. pydicom's warnings are
    captured, never shown.
    """
    with quiet_pydicom():
        return read_values(path, keywords, max_pixels_per_image, transform_multiple)


def read_values(
    path: Path, keywords: Sequence[str], max_pixels_per_image: int, transform_multiple: float = 1.0
) -> dict[str, str] | Unusable:
    try:
        ds = open_dicom(path, defer_size=1024)
    except NotDicom:
        return Unusable("not a DICOM file")
    except NotRegularFile as exc:
        return Unusable(str(exc))
    except CorruptHeader as exc:
        return Unusable(f"corrupt DICOM header ({exc})")
    except (EOFError, struct.error):  # struct.error: fewer bytes left than an element header needs
        return Unusable("truncated file", _study_of_truncated(path))
    except OSError as exc:
        if exc.errno is None:  # raised by pydicom's parser, not by the file system
            return Unusable("corrupt DICOM header (no data element where one was expected)")
        return Unusable(f"unreadable file ({exc.strerror or type(exc).__name__})")
    except Exception as exc:  # pydicom raises many types on corrupt input; each becomes a reason
        return Unusable(f"corrupt DICOM header ({type(exc).__name__})")
    if path.name.upper() == "DICOMDIR" or "DirectoryRecordSequence" in ds:
        return Unusable("DICOMDIR media directory, not an image")
    if not any(tag in ds for tag in (0x7FE00010, 0x7FE00008, 0x7FE00009)):
        if "Rows" in ds and "Columns" in ds:  # an image module without its pixels: cut short, or header-only
            return Unusable(
                "no pixel data although Rows and Columns are present (truncated file or header-only export)",
                _text(ds, "StudyInstanceUID"),
            )
        return Unusable("no pixel data (not an image)", _text(ds, "StudyInstanceUID"))
    bad = (
        _image_module_problem(ds)
        or _too_large(ds, max_pixels_per_image)
        or _too_costly(ds, path, max_pixels_per_image, transform_multiple)
    )
    if bad:
        return Unusable(bad, _text(ds, "StudyInstanceUID"))
    values: dict[str, str] = {}
    for keyword in keywords:
        try:
            value = ds.get(keyword)
        except Exception:  # a malformed value of one tag
            return Unusable(f"malformed value in tag {keyword}", _text(ds, "StudyInstanceUID"))
        text = "" if value is None else render_value(value).strip()
        if text:
            values[keyword] = text
    missing = [k for k in REQUIRED_KEYWORDS if k not in values]
    if missing:
        return Unusable(f"missing required tag {missing[0]}")
    return values


#: Image Pixel module attributes (PS3.3 C.7.6.3) that decoding depends on; Rows and Columns are required.
_IMAGE_MODULE = (
    "Rows",
    "Columns",
    "SamplesPerPixel",
    "BitsAllocated",
    "BitsStored",
    "PixelRepresentation",
    "NumberOfFrames",
)


def _image_module_problem(ds: pydicom.Dataset) -> str | None:
    """Why the image's pixel description cannot be used, or ``None``."""
    if "PixelData" not in ds:  # float pixel data has no Rows/Columns constraints worth checking here
        return None
    for keyword in _IMAGE_MODULE:
        try:
            value = ds.get(keyword)
            number = None if value in (None, "") else int(value)
        except (TypeError, ValueError):
            return f"malformed value in tag {keyword} (not an integer)"
        except Exception:  # a value pydicom cannot even parse
            return f"malformed value in tag {keyword}"
        if number is None and keyword in ("Rows", "Columns"):
            return f"missing required tag {keyword} of an image"
        if number is not None and number < (1 if keyword != "PixelRepresentation" else 0):
            return f"implausible value in tag {keyword} ({number})"
    return None


def declared_values(values: Mapping[str, str]) -> int:
    """Pixel values one instance declares: Rows x Columns x NumberOfFrames x SamplesPerPixel.

    ``values`` are its header values as the scan keeps them; an absent or malformed count is taken as 1.
    """
    product = 1
    for keyword in ("Rows", "Columns", "NumberOfFrames", "SamplesPerPixel"):
        try:
            product *= max(1, int(values.get(keyword) or 1))
        except ValueError:
            continue
    return product


def _too_large(ds: pydicom.Dataset, limit: int) -> str | None:
    """Why an image declares more values than ``limit`` (checked before anything decodes it), or ``None``."""
    sizes = []
    for keyword in ("Rows", "Columns", "NumberOfFrames", "SamplesPerPixel"):
        try:
            sizes.append(max(1, int(ds.get(keyword) or 1)))
        except Exception:  # malformed: _image_module_problem names it for PixelData; float data has no limit
            return None
    rows, columns, frames, samples = sizes
    if str(ds.get("PhotometricInterpretation", "")).strip() == "PALETTE COLOR":
        samples = max(samples, 3)  # each index becomes an RGB triple, as the reader counts it
    declared = rows * columns * frames * samples
    if declared <= limit:
        return None
    shape = f"{rows} x {columns}" + (f" x {frames} frames" if frames > 1 else "")
    shape += f" x {samples} samples" if samples > 1 else ""
    return (
        f"image too large: declares {shape} = {declared} pixel values, above the limit of {limit} per image; "
        "raise inputs.max_pixels_per_image in the protocol to read it"
    )


def _too_costly(ds: pydicom.Dataset, path: Path, limit: int, transform_multiple: float) -> str | None:
    """Why decoding the image, or transforming it, would hold more memory than ``limit`` values buy."""
    try:
        file_bytes = path.stat().st_size
    except OSError:  # gone since it was read: the reader will say so
        return None
    cost = decode_cost(ds, file_bytes)
    if cost is not None and transform_multiple > 1:
        cost = dataclasses.replace(cost, transforms=math.ceil(transform_multiple * cost.output))
    why = over_budget(cost, limit)
    if why is None:
        return None
    return f"image too large to decode: {why}; raise inputs.max_pixels_per_image in the protocol to read it"


def render_value(value: object) -> str:
    r"""A header value as text: multi-valued ones joined by a backslash, as DICOM writes them.

    Bytes (OB, UN) are shown as their text when they are printable ASCII, otherwise as hexadecimal.

    >>> from pydicom.multival import MultiValue
    >>> render_value(MultiValue(str, ["ORIGINAL", "PRIMARY"]))
    'ORIGINAL\\PRIMARY'
    >>> render_value(b"AB\x00")
    'AB'
    """
    if isinstance(value, bytes | bytearray):
        text = bytes(value).rstrip(b"\x00 ")
        return text.decode("ascii") if text.isascii() and text.decode("ascii").isprintable() else text.hex()
    if isinstance(value, MultiValue | list | tuple) and not isinstance(value, DicomSequence):
        return "\\".join(render_value(item) for item in value)
    return str(value)


def _study_of_truncated(path: Path) -> str | None:
    """The StudyInstanceUID of a file cut short, when its header before the pixel data is whole.

    It lets the study's label be accounted for by this exclusion rather than counted as matching no study.
    """
    try:
        ds = open_dicom(path, stop_before_pixels=True, specific_tags=["StudyInstanceUID"])
    except Exception:  # cut inside the header too: the study cannot be named
        return None
    return _text(ds, "StudyInstanceUID")


def _text(ds: pydicom.Dataset, keyword: str) -> str | None:
    try:
        value = str(ds.get(keyword, "")).strip()
    except Exception:  # a malformed value
        return None
    return value or None
