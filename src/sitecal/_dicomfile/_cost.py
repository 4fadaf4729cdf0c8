"""What decoding one image holds in memory, counted from its header before anything is decoded."""

from __future__ import annotations

from dataclasses import dataclass

import pydicom
from pydicom.datadict import tag_for_keyword
from pydicom.tag import BaseTag
from pydicom.uid import UID

__all__ = ["BYTES_PER_PIXEL_VALUE", "DecodeCost", "decode_cost", "decoding_budget", "over_budget"]


#: Bytes of decoding memory each pixel value of the protocol's ``inputs.max_pixels_per_image`` buys: a
#: 16-bit greyscale image costs 2 bytes a value decoded and 4 as float32, so the default limit of 2**28
#: values is a budget of 1.5 GiB per image (:func:`decode_cost`).
BYTES_PER_PIXEL_VALUE = 6
#: pydicom's YBR_FULL to RGB conversion makes a float32 copy and a float32 temporary of the matrix product.
_YBR_BYTES_PER_VALUE = 8
_YBR = ("YBR_FULL", "YBR_FULL_422")


@dataclass(frozen=True)
class DecodeCost:
    """The memory the reader holds, at its peak, to turn one file's Pixel Data into float32 values.

    The path from file to array, copy by copy (pydicom 3, its pylibjpeg plugins, :mod:`sitecal.inference`):
    the Pixel Data value is read into memory (``encoded``: the compressed fragments, the native bytes, or
    for a deflated file its inflated bytes); pydicom decodes into a new array of the stored width
    (``decoded``), filling it frame by frame from a decoded frame buffer (``transient``: one frame, for
    compressed data) and, for YBR_FULL colour, converting it to RGB through float32 copies (``transient``:
    8 bytes a value); the presentation values are then written, block by block from that array, into one
    float32 array (``output``; 3 values a pixel for PALETTE COLOR), which MONAI's ``LoadImage`` takes as
    its tensor without copying. The transients and the output are not alive together. Once the reader
    returns, the value read and the decoded array are gone, and the protocol's transforms that run on the
    image at its loaded size hold it and their copies of it (``transforms``: see
    :func:`sitecal.inference.transforms.loaded_size_multiple`).

    Examples
    --------
    A 16384 x 16384 16-bit RLE image of 8 MiB: 8 MiB read, 512 MiB decoded, a 512 MiB frame buffer, then
    1 GiB of float32:

    >>> cost = DecodeCost(encoded=8 << 20, decoded=512 << 20, transient=512 << 20, output=1 << 30)
    >>> cost.total >> 20
    1544
    """

    encoded: int
    decoded: int
    transient: int
    output: int
    transforms: int = 0

    @property
    def total(self) -> int:
        """Bytes held at the peak: ``max(encoded + decoded + max(transient, output), transforms)``."""
        return max(self.encoded + self.decoded + max(self.transient, self.output), self.transforms)

    def describe(self) -> str:
        """The parts in MiB, for a reason: ``"8 MiB read, 512 MiB decoded, 1,024 MiB as float32"``."""
        if self.transforms > self.encoded + self.decoded + max(self.transient, self.output):
            return f"{_mib(self.output)} as float32, {_mib(self.transforms)} in the protocol's transforms"
        parts = [f"{_mib(self.encoded)} read", f"{_mib(self.decoded)} decoded"]
        if self.transient > self.output:
            parts.append(f"{_mib(self.transient)} while decoding")
        else:
            parts.append(f"{_mib(self.output)} as float32")
        return ", ".join(parts)


def decoding_budget(max_pixels_per_image: int) -> int:
    """Bytes one image may cost to decode under the protocol's pixel limit (:data:`BYTES_PER_PIXEL_VALUE`)."""
    return max_pixels_per_image * BYTES_PER_PIXEL_VALUE


def over_budget(cost: DecodeCost | None, max_pixels_per_image: int) -> str | None:
    """Why ``cost`` is above what ``max_pixels_per_image`` buys, as a clause of a reason; ``None`` within it.

    >>> print(over_budget(DecodeCost(8 << 20, 1 << 30, 1 << 30, 1 << 30), 2**28))  # doctest: +ELLIPSIS
    it would hold 2,056 MiB (8 MiB read, 1,024 MiB decoded, 1,024 MiB as float32), above the 1,536 MiB ...
    """
    budget = decoding_budget(max_pixels_per_image)
    if cost is None or cost.total <= budget:
        return None
    return (
        f"it would hold {_mib(cost.total)} ({cost.describe()}), above the {_mib(budget)} that the limit of "
        f"{max_pixels_per_image} pixel values allows ({BYTES_PER_PIXEL_VALUE} bytes a value)"
    )


def decode_cost(ds: pydicom.Dataset, file_bytes: int) -> DecodeCost | None:
    """What decoding ``ds``'s pixel data will hold in memory, from its header alone (see :class:`DecodeCost`).

    ``file_bytes`` bounds the encoded value when the header read deferred it without a length (compressed
    fragments); a value already read counts its own length. ``None`` when a count the cost depends on is
    malformed, or the dataset has no pixel data (what is wrong is named by the caller's other checks).
    """
    keyword = next((k for k in ("PixelData", "FloatPixelData", "DoubleFloatPixelData") if k in ds), None)
    if keyword is None:
        return None
    try:
        rows, columns, frames, samples = (
            max(1, int(ds.get(k) or 1)) for k in ("Rows", "Columns", "NumberOfFrames", "SamplesPerPixel")
        )
        bits = {"FloatPixelData": 32, "DoubleFloatPixelData": 64}.get(keyword) or int(
            ds.get("BitsAllocated") or 8
        )
        photometric = str(ds.get("PhotometricInterpretation", "")).strip().upper()
        syntax = UID(str(ds.file_meta.get("TransferSyntaxUID", "")))
    except Exception:  # a malformed value: the image module checks name it
        return None
    width = next(w for w in (1, 2, 4, 8, bits // 8 + 1) if 8 * w >= bits)  # numpy's itemsize for the bits
    values = rows * columns * frames * samples
    decoded = values * width
    encapsulated = syntax.is_valid and syntax.is_encapsulated
    frame = decoded // frames if encapsulated else 0
    colour = values * _YBR_BYTES_PER_VALUE if photometric in _YBR and samples > 1 else 0
    output = 4 * values * (3 if photometric == "PALETTE COLOR" else 1)
    return DecodeCost(_encoded_bytes(ds, keyword, file_bytes), decoded, max(frame, colour), output)


def _encoded_bytes(ds: pydicom.Dataset, keyword: str, file_bytes: int) -> int:
    """The length of the Pixel Data value as read: its own, its element's, or at most the file's."""
    element = ds._dict.get(BaseTag(tag_for_keyword(keyword) or 0))  # never reads a value
    value = getattr(element, "value", None)
    if isinstance(value, bytes | bytearray):
        return len(value)
    length = getattr(element, "length", 0xFFFFFFFF)
    return file_bytes if length in (None, 0xFFFFFFFF) else int(length)


def _mib(size: int) -> str:
    return f"{-(-size // (1 << 20)):,} MiB"
