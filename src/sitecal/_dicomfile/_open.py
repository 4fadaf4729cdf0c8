"""Opening DICOM files: regular files only, pydicom's words captured, truncation and noise named."""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import numpy as np
import pydicom
from pydicom.datadict import dictionary_has_tag
from pydicom.errors import InvalidDicomError
from pydicom.pixels.utils import pixel_array
from pydicom.tag import BaseTag
from pydicom.uid import (
    UID,
    DeflatedExplicitVRLittleEndian,
    ExplicitVRBigEndian,
    ExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
)

from sitecal._dicomfile._deflated import cut_inside, deflated_data_start, read_deflated
from sitecal._dicomfile._errors import CorruptHeader, NotDicom, NotRegularFile
from sitecal.errors import DicomError

__all__ = [
    "ReadNotes",
    "decode_failure",
    "decoded_pixels",
    "file_kind",
    "has_identifying_elements",
    "kind_of",
    "open_dicom",
    "open_regular",
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
    costs what the header of a plain file costs (:func:`sitecal._dicomfile._deflated.read_deflated`).

    Raises
    ------
    NotDicom
        If the file is not DICOM.
    NotRegularFile
        If the path is not a regular file.
    CorruptHeader
        If what follows the 'DICM' prefix parses into elements none of which is a standard element, a
        private creator or a private element with its creator (random bytes); or, for a deflated file, if
        it inflates beyond its limit (``_deflated.MAX_INFLATED_BYTES``, ``MAX_DEFLATED_HEADER_BYTES``) or is
        not a deflate stream.
    EOFError
        If the file ends inside an element or a sequence (a truncated file: pydicom itself returns the
        elements read so far, which look like a file without pixel data). Other exceptions of ``dcmread``
        pass through.
    """
    with quiet_pydicom() as notes:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            data_start = deflated_data_start(fh)
            fh.seek(0)
            ds: pydicom.Dataset
            if data_start is not None:
                ds = read_deflated(cast(BinaryIO, fh), data_start, kwargs)
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
    as a shorter dataset. Offsets of a deflated file are into the inflated stream: ``read_deflated``
    checks them against the inflated length itself.
    """
    if ds.file_meta.get("TransferSyntaxUID") == DeflatedExplicitVRLittleEndian:
        return False
    return cut_inside(ds, size)


def _summary(notes: ReadNotes) -> str:
    return "; ".join(f"{kind} (x{n})" for kind, n in Counter(notes.kinds()).most_common())


def decoded_pixels(ds: pydicom.Dataset) -> np.ndarray:
    """The decoded Pixel Data (YBR converted to RGB), with pydicom's warnings and log records captured.

    The values of ``ds.pixel_array``, but not kept on the dataset: ``ds.pixel_array`` would hold the decoded
    array as long as the dataset lives, beside every copy made from it
    (:func:`sitecal._dicomfile.decode_cost`). Only the frames NumberOfFrames declares are decoded: pydicom
    would by default also decode and append any frames the compressed data holds beyond them, so that a
    file declaring one frame could decode a thousand,
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
