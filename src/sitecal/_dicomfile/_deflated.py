"""Deflated files (Deflated Explicit VR Little Endian) inflated as they are parsed, within a limit.

pydicom inflates a deflated data set whole, in memory, before parsing it: a few kilobytes of deflate can
inflate to any size, and a header read would inflate the pixel data too. Here the data set is a file object
that inflates as pydicom reads it, so a header read stops at the pixel data.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import IO, Any, BinaryIO

import pydicom
from pydicom.dataelem import RawDataElement
from pydicom.filereader import read_dataset, read_preamble
from pydicom.tag import BaseTag, Tag
from pydicom.uid import DeflatedExplicitVRLittleEndian

from sitecal._dicomfile._errors import CorruptHeader

__all__ = [
    "MAX_DEFLATED_HEADER_BYTES",
    "MAX_INFLATED_BYTES",
    "cut_inside",
    "deflated_data_start",
    "read_deflated",
]


#: What a deflated file may inflate to when it is read whole: pydicom would inflate the whole data set in
#: memory first, so a small file could otherwise take all memory. 1 GiB holds 2**28 16-bit pixel values and
#: a header twice over; the image's own decoding budget (:func:`sitecal._dicomfile.decode_cost`) is
#: checked after the read.
MAX_INFLATED_BYTES = 1 << 30
#: What the data set of a deflated file may inflate to before its pixel data when only its header is read:
#: headers are kilobytes (an enhanced multi-frame's functional groups a few megabytes), and pydicom parses
#: about a megabyte of element headers a second, so a bomb made of valid elements costs seconds at most.
MAX_DEFLATED_HEADER_BYTES = 16 << 20
#: Inflated bytes kept behind the read position, for pydicom's look-backs (8 to 12 bytes at an element,
#: the start of an undefined-length value when its delimiter is missing).
_KEEP_BEHIND = 16 << 20
#: Inflated bytes produced per step: what one call may allocate however small its input.
_INFLATE_STEP = 1 << 20
_DEFLATED_UID = DeflatedExplicitVRLittleEndian.encode()
_PIXEL_TAGS = frozenset({0x7FE00010, 0x7FE00008, 0x7FE00009})


def deflated_data_start(fh: IO[bytes]) -> int | None:
    """Where the deflate stream of a Deflated Explicit VR Little Endian file starts, or ``None``.

    Files of any other transfer syntax (and files without File Meta Information, which cannot declare
    deflate) answer ``None`` after reading at most 64 KiB of their meta information.

    Raises
    ------
    CorruptHeader
        If the meta information names the deflated transfer syntax but does not start with its group
        length, which alone says where the deflated data begins.
    """
    head = fh.read(132 + 12)
    if len(head) < 132 + 8 or head[128:132] != b"DICM" or head[132:134] != b"\x02\x00":
        return None
    meta = head[132:] + fh.read(1 << 16)
    if _DEFLATED_UID not in meta:
        return None
    if head[132:138] != b"\x02\x00\x00\x00UL" or len(head) < 144:
        raise CorruptHeader("deflated file without File Meta Information Group Length (0002,0000)")
    return 144 + int.from_bytes(head[140:144], "little")


class _Inflating:
    """The inflated data set of a deflated file as a read-only file object, inflated as it is read.

    Only what is read (and ``_KEEP_BEHIND`` bytes behind it) is held, so a header read stops at the pixel
    data having inflated the header alone. Reading past ``limit`` inflated bytes raises
    :class:`CorruptHeader`, its text ending with ``beyond``; a seek further back than what is kept raises
    ``OSError``.
    """

    def __init__(self, raw: IO[bytes], limit: int, beyond: str) -> None:
        self._raw, self._limit, self._beyond = raw, limit, beyond
        self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        self._pending = b""  # raw bytes read but not yet inflated
        self._kept = bytearray()  # inflated bytes from offset self._base on
        self._base = 0
        self._pos = 0
        self.truncated = False  # the file ended inside the deflate stream
        self.closed = False

    def tell(self) -> int:
        """The read position in the inflated data set."""
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move the read position (``whence`` 0: from the start, 1: from the current position)."""
        target = offset if whence == 0 else self._pos + offset
        if whence not in (0, 1) or target < self._base:
            raise OSError("cannot seek back this far in a deflated data set")
        self._pos = target
        return target

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` inflated bytes (to the end of the data set, within the limit, when negative)."""
        want = self._limit + 1 - self._pos if size is None or size < 0 else size
        if want > _KEEP_BEHIND:  # a large value: assembled once, not held twice
            return self._read_large(want)
        self._inflate_to(self._pos + want)
        start = self._pos - self._base
        data = bytes(self._kept[start : start + want])
        self._pos += len(data)
        self._forget()
        return data

    def close(self) -> None:
        """Drop what is held; later reads find nothing."""
        self._kept, self._pending, self.closed = bytearray(), b"", True

    def _read_large(self, size: int) -> bytes:
        # written piece by piece into one buffer whose bytes become the value: never a second whole copy
        out = io.BytesIO()
        self._inflate_to(self._pos)
        start = self._pos - self._base
        out.write(self._kept[start : start + size])
        self._kept, self._base = bytearray(), self._pos + out.tell()
        while out.tell() < size and self._step():
            piece = self._kept[: size - out.tell()]
            out.write(piece)
            del self._kept[: len(piece)]
            self._base += len(piece)
        data = out.getvalue()
        self._pos += len(data)
        return data

    def _inflate_to(self, end: int) -> None:
        while self._base + len(self._kept) < end and self._step():
            self._forget()

    def _forget(self) -> None:
        """Drop inflated bytes more than ``_KEEP_BEHIND`` behind the read position."""
        drop = min(self._pos - self._base - _KEEP_BEHIND, len(self._kept))
        if drop > 0:
            del self._kept[:drop]
            self._base += drop

    def _step(self) -> bool:
        """Inflate up to ``_INFLATE_STEP`` more bytes into ``_kept``; ``False`` at the end of the data."""
        if self._inflater.eof or self.closed:
            return False
        if not self._pending:
            self._pending = self._raw.read(_INFLATE_STEP)
            if not self._pending:
                self.truncated = True
                return False
        try:
            data = self._inflater.decompress(self._pending, _INFLATE_STEP)
        except zlib.error as exc:
            raise CorruptHeader("the deflated data set is not a valid deflate stream") from exc
        self._pending = self._inflater.unconsumed_tail  # input kept back once the step's output is full
        if self._base + len(self._kept) + len(data) > self._limit:
            raise CorruptHeader(
                f"deflated data set inflates to more than {self._limit >> 20} MiB{self._beyond}"
            )
        self._kept += data
        return True


def read_deflated(fh: BinaryIO, data_start: int, kwargs: dict[str, Any]) -> pydicom.FileDataset:
    """Read a deflated file, inflating only what is parsed.

    pydicom inflates the whole data set in memory before parsing it. Here a header read
    (``stop_before_pixels`` or ``defer_size`` given) inflates up to the pixel data and no further, within
    :data:`MAX_DEFLATED_HEADER_BYTES`; with ``defer_size`` the pixel data element is then recorded, as a
    deferred value, from its element header (it cannot be loaded later, nor can elements after it be
    read). A whole read inflates the data set within :data:`MAX_INFLATED_BYTES`, holding each value once.
    Values before the pixel data are read whatever ``defer_size`` says: they are in memory already.
    """
    header_only = bool(kwargs.get("stop_before_pixels")) or kwargs.get("defer_size") is not None
    preamble = read_preamble(fh, False)
    meta = read_dataset(fh, is_implicit_VR=False, is_little_endian=True, bytelength=data_start - fh.tell())
    file_meta = pydicom.dataset.FileMetaDataset(meta)
    fh.seek(data_start)
    if header_only:
        beyond = " before its pixel data: a decompression bomb, or a header far larger than any image's"
        stream = _Inflating(fh, MAX_DEFLATED_HEADER_BYTES, beyond)
    else:
        beyond = ": a decompression bomb, or an image far above any limit"
        stream = _Inflating(fh, MAX_INFLATED_BYTES, beyond)
    try:
        first = stream.read(6)
        if len(first) == 6 and not (first[4:6].isalpha() and first[4:6].isupper()):
            raise CorruptHeader("the deflated data set does not start with an explicit-VR data element")
        stream.seek(0)
        dataset = read_dataset(
            stream,  # type: ignore[arg-type]  # read, seek and tell are all pydicom uses
            is_implicit_VR=False,
            is_little_endian=True,
            stop_when=(lambda tag, vr, length: tag in _PIXEL_TAGS) if header_only else None,
            specific_tags=[Tag(t) for t in kwargs["specific_tags"]] if kwargs.get("specific_tags") else None,
        )
        if header_only and not kwargs.get("stop_before_pixels"):
            _add_deferred_pixels(dataset, stream)
        elif not header_only and cut_inside(dataset, stream.tell()):
            raise EOFError("the deflated data set ends inside a data element")
        if stream.truncated:
            raise EOFError("the deflated data set ends inside its deflate stream")
    finally:
        stream.close()
    ds = pydicom.FileDataset(
        stream, dataset, preamble, file_meta, is_implicit_VR=False, is_little_endian=True
    )
    ds.set_original_encoding(False, True, dataset._character_set)
    return ds


#: Explicit VRs whose element header has a 4-byte length after two reserved bytes (PS3.5 7.1.2).
_LONG_VRS = frozenset({"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV"})


def _add_deferred_pixels(dataset: pydicom.Dataset, stream: _Inflating) -> None:
    """Record the pixel data element a header read stopped at, from its element header, without its value."""
    where = stream.tell()
    header = stream.read(12)
    if len(header) < 8:
        return
    group, element = struct.unpack("<HH", header[:4])
    tag = BaseTag(group << 16 | element)
    vr = header[4:6].decode("latin-1")
    if tag not in _PIXEL_TAGS:
        return
    if vr in _LONG_VRS:
        if len(header) < 12:
            return
        (length,) = struct.unpack("<I", header[8:12])
        value_tell = where + 12
    else:
        (length,) = struct.unpack("<H", header[6:8])
        value_tell = where + 8
    dataset._dict[tag] = RawDataElement(tag, vr, length, None, value_tell, False, True)


def cut_inside(ds: pydicom.Dataset, size: int) -> bool:
    """Whether a top-level element of ``ds`` ends past ``size``, or less than an element header before it."""
    end = 0
    for element in ds._dict.values():
        if not isinstance(element, RawDataElement) or element.length == 0xFFFFFFFF:
            end = -1  # an undefined length: its end is not known from here
            continue
        if element.value_tell is not None:
            end = element.value_tell + element.length
            if end > size:
                return True
    return 0 < size - end < 8 if end > 0 else False
