"""Opening DICOM files as sites send them, and naming why pixel data cannot be decoded.

Both the header scan (:mod:`sitecal.cohort.scan`) and the pixel reader (:mod:`sitecal.inference.reader`)
open files here, so a file the scan admits is one the reader can open, by the same rules: only regular
files are opened (a FIFO would block the read forever, a device would never end), and what pydicom says
while reading (warnings and log records, which quote header values such as UIDs) is captured and never
reaches stderr or a log in clear.
"""

from __future__ import annotations

import io
import logging
import os
import re
import stat
import struct
import threading
import warnings
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import numpy as np
import pydicom
from pydicom.datadict import dictionary_has_tag, tag_for_keyword
from pydicom.dataelem import RawDataElement
from pydicom.errors import InvalidDicomError
from pydicom.filereader import read_dataset, read_preamble
from pydicom.pixels.utils import pixel_array
from pydicom.tag import BaseTag, Tag
from pydicom.uid import (
    UID,
    DeflatedExplicitVRLittleEndian,
    ExplicitVRBigEndian,
    ExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
)

from sitecal.errors import DicomError

__all__ = [
    "BYTES_PER_PIXEL_VALUE",
    "CorruptHeader",
    "DecodeCost",
    "NotDicom",
    "NotRegularFile",
    "ReadNotes",
    "decode_cost",
    "decode_failure",
    "decoded_pixels",
    "decoding_budget",
    "file_kind",
    "has_identifying_elements",
    "kind_of",
    "open_dicom",
    "open_regular",
    "over_budget",
    "quiet_pydicom",
    "transfer_syntax_name",
]

logger = logging.getLogger(__name__)

#: Elements of which at least one must be in a file read without the 'DICM' prefix for it to count as
#: DICOM: a forced read of any other file parses into one or two garbage elements.
_IDENTIFYING_ELEMENTS = (0x00080016, 0x00080018, 0x0020000D, 0x7FE00010)
#: pydicom's loggers that may quote a value while a file is read or decoded.
_PYDICOM_LOGGERS = ("pydicom", "pydicom.pixels.decoders.base", "pydicom.pixels.utils")
#: What pydicom says when a file ends inside an element or before a sequence delimiter: it then returns
#: the elements read so far, which look like a file without pixel data rather than a truncated one.
_END_OF_FILE = re.compile(r"^end of file|unexpected end of file|end of file reached", re.IGNORECASE)
#: A message's leading words, up to the first character that may start a value (quote, colon, digit,
#: bracket, path separator): "Invalid value for VR UI: '1.2.840...'" is summarised as its first 23 chars.
_KIND = re.compile(r"""^[^:'"`(\[{<=/\\0-9]*""")


class NotDicom(Exception):
    """The file is not DICOM (no 'DICM' prefix and no recognisable dataset)."""


class CorruptHeader(ValueError):
    """The file starts as DICOM but what follows parses into noise (its text says what was wrong)."""


class NotRegularFile(OSError):
    """The path is a FIFO, socket, device or folder, which is never read (its text says which)."""


def file_kind(mode: int) -> str:
    """What an ``st_mode`` describes: ``"regular file"``, ``"FIFO"``, ``"socket"``, ``"character device"``...

    >>> file_kind(stat.S_IFIFO | 0o644)
    'FIFO'
    """
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "unknown file type"


@dataclass
class ReadNotes:
    """What pydicom said while files were read: kept in memory to classify a file, summarised without values.

    ``messages`` hold the full texts (they may quote UIDs, names or the file's path) and must never be
    written anywhere; :meth:`kinds` gives their value-free leading words for a log line.
    """

    messages: list[str] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        """Whether pydicom reached the end of the file inside an element or a sequence."""
        return any(_END_OF_FILE.search(m) for m in self.messages)

    def kinds(self) -> list[str]:
        """Each message's leading words, cut before anything that may be a value (quote, digit, path...)."""
        return [kind_of(m) for m in self.messages]


def kind_of(message: str) -> str:
    """A library message's leading words, free of values.

    >>> kind_of("Invalid value for VR UI: '1.2.840.99.1'")
    'Invalid value for VR UI'
    >>> kind_of("End of file reached before delimiter (FFFE,E0DD) found in file /data/DOE^JANE/1.dcm")
    'End of file reached before delimiter'
    """
    words = _KIND.match(message)
    text = " ".join((words.group(0) if words else "").split())[:80].rstrip(" -,;.")
    return text or "unnamed message"


_capturing = threading.local()  # the ReadNotes of each thread's innermost quiet_pydicom(), as a stack


class _CaptureRecords(logging.Filter):
    """Drops pydicom's log records raised in a thread inside :func:`quiet_pydicom`, noting their text."""

    def filter(self, record: logging.LogRecord) -> bool:
        stack = getattr(_capturing, "stack", None)
        if not stack:
            return True  # a thread not reading through this module: pydicom's records are not ours
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: its template is still worth classifying
            message = str(record.msg)
        stack[-1].messages.append(message)
        return False


_RECORD_FILTER = _CaptureRecords()


@contextmanager
def quiet_pydicom() -> Iterator[ReadNotes]:
    """Capture pydicom's warnings and log records raised in this block; yield what they said.

    pydicom quotes header values in what it reports ("Invalid value for VR UI: '1.2.840...'", "End of
    file reached ... in file /path/DOE^JANE/..."), and its messages go both to ``warnings`` and to the
    ``pydicom`` logger; inside this block neither reaches stderr or a log handler. Warnings are recorded
    process-wide (``warnings.catch_warnings``), log records only for the calling thread. A nested block
    hands its messages to the enclosing one.

    Yields
    ------
    ReadNotes
        Filled when the block ends (log records as they come).
    """
    notes = ReadNotes()
    stack = getattr(_capturing, "stack", None)
    if stack is None:
        stack = _capturing.stack = []
    for name in _PYDICOM_LOGGERS:
        # installed once and left in place: the filter passes records of threads outside this block, and
        # removing it while another thread reads would let that thread's records through
        logging.getLogger(name).addFilter(_RECORD_FILTER)
    stack.append(notes)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield notes
    finally:
        stack.pop()
        logged = Counter(notes.messages)
        warned = Counter(str(w.message) for w in caught)
        # pydicom's warn_and_log says each thing twice, once per channel: keep one
        notes.messages = list((warned + (logged - warned)).elements())
        if stack:
            stack[-1].messages.extend(notes.messages)


def has_identifying_elements(ds: pydicom.Dataset) -> bool:
    """Whether ``ds`` has an SOP Class UID, SOP Instance UID, Study Instance UID or Pixel Data element."""
    return any(tag in ds for tag in _IDENTIFYING_ELEMENTS)


def open_dicom(path: str | Path, **kwargs: Any) -> pydicom.Dataset:
    """``pydicom.dcmread`` that also reads files without preamble or File Meta Information.

    Only regular files are opened: a FIFO, socket or device raises :class:`NotRegularFile` without being
    read (it is opened non-blocking and checked on the open descriptor, so a file swapped for a FIFO after
    the scan cannot block either). Files without preamble or File Meta Information (written by older
    modalities and some PACS exports) are read with ``force=True`` and kept only if they carry an SOP
    Class UID, SOP Instance UID, Study Instance UID or Pixel Data element; their transfer syntax is then set
    from the encoding pydicom detected (implicit or explicit VR, little or big endian), so their pixel data
    can be decoded. pydicom's warnings and log records are captured (:func:`quiet_pydicom`) and dropped;
    only a count of their kinds is logged, at DEBUG. ``kwargs`` go to ``dcmread``.

    A deflated file (Deflated Explicit VR Little Endian) is inflated as it is parsed, not whole first as
    pydicom does: a header read (``stop_before_pixels`` or ``defer_size`` given) stops at the pixel data and
    costs what the header of a plain file costs (:func:`_read_deflated`).

    Raises
    ------
    NotDicom
        If the file is not DICOM.
    NotRegularFile
        If the path is not a regular file.
    CorruptHeader
        If what follows the 'DICM' prefix parses into elements none of which is a standard element, a
        private creator or a private element with its creator (random bytes); or, for a deflated file, if
        it inflates beyond its limit (:data:`MAX_INFLATED_BYTES`, :data:`MAX_DEFLATED_HEADER_BYTES`) or
        is not a deflate stream.
    EOFError
        If the file ends inside an element or a sequence (a truncated file: pydicom itself returns the
        elements read so far, which look like a file without pixel data). Other exceptions of ``dcmread``
        pass through.
    """
    with quiet_pydicom() as notes:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            data_start = _deflated_data_start(fh)
            fh.seek(0)
            ds: pydicom.Dataset
            if data_start is not None:
                ds = _read_deflated(cast(BinaryIO, fh), data_start, kwargs)
            else:
                ds = _read_plain(fh, path, kwargs)
    if _garbled(ds, size):
        raise CorruptHeader("no recognisable data element after the 'DICM' prefix")
    if notes.truncated or _ends_inside_element(ds, size):
        raise EOFError("the file ends inside a data element or before a sequence delimiter")
    if notes.messages:
        logger.debug("pydicom reported while reading a file (values withheld): %s", _summary(notes))
    if "TransferSyntaxUID" not in ds.file_meta:
        implicit, little = ds.original_encoding
        ds.file_meta.TransferSyntaxUID = (
            ImplicitVRLittleEndian if implicit else ExplicitVRLittleEndian if little else ExplicitVRBigEndian
        )
    return ds


def _read_plain(fh: IO[bytes], path: str | Path, kwargs: dict[str, Any]) -> pydicom.Dataset:
    """``dcmread``, retried with ``force=True`` for a file without preamble that still looks like DICOM."""
    try:
        return pydicom.dcmread(fh, **kwargs)
    except InvalidDicomError:
        fh.seek(0)
        try:
            ds = pydicom.dcmread(fh, **{**kwargs, "force": True})
        except Exception as exc:  # a forced read of a non-DICOM file can fail in many ways
            raise NotDicom(str(path)) from exc
        if not has_identifying_elements(ds):
            raise NotDicom(str(path)) from None
        return ds


#: What a deflated file may inflate to when it is read whole: pydicom would inflate the whole data set in
#: memory first, so a small file could otherwise take all memory. 1 GiB holds 2**28 16-bit pixel values and
#: a header twice over; the image's own decoding budget (:func:`decode_cost`) is checked after the read.
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


def _deflated_data_start(fh: IO[bytes]) -> int | None:
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


def _read_deflated(fh: BinaryIO, data_start: int, kwargs: dict[str, Any]) -> pydicom.FileDataset:
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
        elif not header_only and _cut_inside(dataset, stream.tell()):
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


def open_regular(path: str | Path) -> IO[bytes]:
    """Open ``path`` for binary reading if it is a regular file, without ever blocking on a FIFO.

    Raises
    ------
    NotRegularFile
        If ``path`` is a FIFO, socket or device (checked on the open descriptor, so nothing can swap it).
    """
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO's read end would wait for a writer
    fh = open(os.fspath(path), "rb", opener=lambda name, flags: os.open(name, flags | nonblocking))
    mode = os.fstat(fh.fileno()).st_mode
    if not stat.S_ISREG(mode):
        fh.close()
        raise NotRegularFile(f"not a regular file ({file_kind(mode)})")
    return fh


def _garbled(ds: pydicom.Dataset, size: int) -> bool:
    """Whether what pydicom parsed after a 'DICM' prefix is noise rather than a (small or cut) dataset.

    Random bytes after the prefix parse as no File Meta Information and one or two elements with arbitrary
    tags and lengths. A real dataset, however small, has a tag of the dictionary, a private creator, or a
    private tag with its creator; one that is merely cut short has File Meta Information and elements
    that end inside the file but the last.
    """
    if ds.preamble is None or has_identifying_elements(ds) or not len(ds):
        return False
    for tag in ds.keys():
        if tag.element == 0 or dictionary_has_tag(tag) or tag.is_private_creator:
            return False
        if tag.is_private and BaseTag((tag.group << 16) | (tag.element >> 8)) in ds:
            return False
    return "TransferSyntaxUID" not in ds.file_meta or _ends_inside_element(ds, size)


def _ends_inside_element(ds: pydicom.Dataset, size: int) -> bool:
    """Whether the file ended inside a top-level element.

    pydicom seeks over deferred values and reads short values without checking their length, so a file cut
    inside a value, or inside the next element's 8-byte header (which pydicom takes for the end), reads
    as a shorter dataset. Offsets of a deflated file are into the inflated stream: :func:`_read_deflated`
    checks them against the inflated length itself.
    """
    if ds.file_meta.get("TransferSyntaxUID") == DeflatedExplicitVRLittleEndian:
        return False
    return _cut_inside(ds, size)


def _cut_inside(ds: pydicom.Dataset, size: int) -> bool:
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


def _summary(notes: ReadNotes) -> str:
    return "; ".join(f"{kind} (x{n})" for kind, n in Counter(notes.kinds()).most_common())


def decoded_pixels(ds: pydicom.Dataset) -> np.ndarray:
    """The decoded Pixel Data (YBR converted to RGB), with pydicom's warnings and log records captured.

    The values of ``ds.pixel_array``, but not kept on the dataset: ``ds.pixel_array`` would hold the decoded
    array as long as the dataset lives, beside every copy made from it (:func:`decode_cost`). Only the
    frames NumberOfFrames declares are decoded: pydicom would by default also decode and append any frames
    the compressed data holds beyond them, so that a file declaring one frame could decode a thousand,
    outside any budget counted from its header.

    Raises
    ------
    DicomError
        With :func:`decode_failure`'s reason when the pixel data cannot be decoded.
    """
    try:
        with quiet_pydicom():
            return pixel_array(ds, allow_excess_frames=False)
    except Exception as exc:  # pydicom and its plugins raise many types on undecodable data
        raise DicomError(decode_failure(exc, ds)) from exc


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


def transfer_syntax_name(ds: pydicom.Dataset) -> str:
    """The transfer syntax's name (``"JPEG 2000 Image Compression"``), or its UID when unknown.

    A value that is not a UID (a corrupt header's bytes) is not repeated: it would reach exclusion reasons.
    """
    with quiet_pydicom():  # pydicom quotes an invalid UID in a warning
        uid = UID(str(ds.file_meta.get("TransferSyntaxUID", "")))
        if not uid:
            return "no transfer syntax"
        if not uid.is_valid:
            return "an invalid transfer syntax UID"
        return uid.name if uid.name != str(uid) else str(uid)


def decode_failure(exc: BaseException, ds: pydicom.Dataset) -> str:
    """A specific reason, free of identifiers, for an exception raised while decoding ``ds``'s pixel data."""
    syntax = transfer_syntax_name(ds)
    text = str(exc).lower()
    if isinstance(exc, NotImplementedError) and "no pixel data decoders" in text:
        return f"unsupported transfer syntax: {syntax} has no pixel decoder"
    if "missing dependencies" in text:
        return f"no decoder installed for {syntax}: reinstall sitecal with its decoder plugins"
    if isinstance(exc, (EOFError, BufferError)) or any(
        phrase in text for phrase in ("truncat", "shorter than", "less than expected")
    ):
        return f"Pixel Data (7FE0,0010) truncated: shorter than Rows x Columns x frames need ({syntax})"
    if isinstance(exc, RuntimeError) and "all available plugins" in text:
        return f"Pixel Data (7FE0,0010) corrupt: no installed decoder could decode it ({syntax})"
    return f"pixel description invalid: {type(exc).__name__} reading the image module tags ({syntax})"
