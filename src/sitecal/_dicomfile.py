"""Opening DICOM files as sites send them, and naming why pixel data cannot be decoded.

Both the header scan (:mod:`sitecal.cohort.scan`) and the pixel reader (:mod:`sitecal.inference.reader`)
open files here, so a file the scan admits is one the reader can open, by the same rules.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pydicom
from pydicom.errors import InvalidDicomError
from pydicom.uid import UID, ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian

from sitecal.errors import DicomError

__all__ = ["NotDicom", "decode_failure", "decoded_pixels", "open_dicom", "transfer_syntax_name"]

#: Elements of which at least one must be in a file read without the 'DICM' prefix for it to count as
#: DICOM: a forced read of any other file parses into one or two garbage elements.
_IDENTIFYING_ELEMENTS = (0x00080016, 0x00080018, 0x0020000D, 0x7FE00010)


class NotDicom(Exception):
    """The file is not DICOM (no 'DICM' prefix and no recognisable dataset)."""


def open_dicom(path: str | Path, **kwargs: Any) -> pydicom.Dataset:
    """``pydicom.dcmread`` that also reads files without preamble or File Meta Information.

    Such files (written by older modalities and some PACS exports) are read with ``force=True`` and kept
    only if they carry an SOP Class UID, SOP Instance UID, Study Instance UID or Pixel Data element; their
    transfer syntax is then set from the encoding pydicom detected (implicit or explicit VR, little or big
    endian), so their pixel data can be decoded. ``kwargs`` go to ``dcmread``.

    Raises
    ------
    NotDicom
        If the file is not DICOM. Other exceptions of ``dcmread`` (truncated, unreadable) pass through.
    """
    try:
        ds = _read(path, **kwargs)
    except InvalidDicomError:
        try:
            ds = _read(path, force=True, **kwargs)
        except Exception as exc:  # a forced read of a non-DICOM file can fail in many ways
            raise NotDicom(str(path)) from exc
        if not any(tag in ds for tag in _IDENTIFYING_ELEMENTS):
            raise NotDicom(str(path)) from None
    if "TransferSyntaxUID" not in ds.file_meta:
        implicit, little = ds.original_encoding
        ds.file_meta.TransferSyntaxUID = (
            ImplicitVRLittleEndian if implicit else ExplicitVRLittleEndian if little else ExplicitVRBigEndian
        )
    return ds


def _read(path: str | Path, **kwargs: Any) -> pydicom.Dataset:
    # pydicom warns about deviations it repairs (implicit VR where explicit was declared, odd lengths):
    # they are the norm in site exports and would flood the run log; a file it cannot repair raises
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return pydicom.dcmread(path, **kwargs)


def decoded_pixels(ds: pydicom.Dataset) -> np.ndarray:
    """``ds.pixel_array`` (YBR converted to RGB), with pydicom's repair warnings silenced.

    Raises
    ------
    DicomError
        With :func:`decode_failure`'s reason when the pixel data cannot be decoded.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return ds.pixel_array
    except Exception as exc:  # pydicom and its plugins raise many types on undecodable data
        raise DicomError(decode_failure(exc, ds)) from exc


def transfer_syntax_name(ds: pydicom.Dataset) -> str:
    """The transfer syntax's name (``"JPEG 2000 Image Compression"``), or its UID when unknown."""
    uid = UID(str(ds.file_meta.get("TransferSyntaxUID", "")))
    return uid.name if uid.is_valid and uid.name != str(uid) else (str(uid) or "no transfer syntax")


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
