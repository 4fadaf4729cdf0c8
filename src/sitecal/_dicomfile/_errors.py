"""The exceptions of opening a file, shared by the reading paths of :mod:`sitecal._dicomfile`."""

from __future__ import annotations

__all__ = ["CorruptHeader", "NotDicom", "NotRegularFile"]


class NotDicom(Exception):
    """The file is not DICOM (no 'DICM' prefix and no recognisable dataset)."""


class CorruptHeader(ValueError):
    """The file starts as DICOM but what follows parses into noise (its text says what was wrong)."""


class NotRegularFile(OSError):
    """The path is a FIFO, socket, device or folder, which is never read (its text says which)."""
