"""Exceptions and warnings raised by sitecal.

Every error says what was wrong, where (file, line, field, DICOM tag or path) and what to do next.

::

    SitecalError (Exception)
    ├── ProtocolError (SitecalError, ValueError)    the protocol YAML is missing, malformed or invalid
    ├── DicomError (SitecalError, ValueError)       a DICOM file cannot be used (also an Exclusion reason)
    ├── ModelError (SitecalError, RuntimeError)     the model cannot be loaded or run
    ├── DataError (SitecalError, ValueError)        arrays, labels or tables are unusable
    └── OutputError (SitecalError, OSError)         the run folder cannot be written

    SitecalWarning (UserWarning)
    ├── SmallGroupWarning                           a group is below the protocol's minimum size
    └── ConvergenceWarning                          a numeric solve stopped before its tolerance
"""

from __future__ import annotations

__all__ = [
    "ConvergenceWarning",
    "DataError",
    "DicomError",
    "ModelError",
    "OutputError",
    "ProtocolError",
    "SitecalError",
    "SitecalWarning",
    "SmallGroupWarning",
]


class SitecalError(Exception):
    """Base class of every error sitecal raises on purpose."""


class ProtocolError(SitecalError, ValueError):
    """The protocol file is missing, is not valid YAML, or does not follow the schema."""


class DicomError(SitecalError, ValueError):
    """A DICOM file cannot be read or lacks what the protocol needs."""


class ModelError(SitecalError, RuntimeError):
    """The model cannot be loaded safely or fails on the inputs."""


class DataError(SitecalError, ValueError):
    """Input arrays, labels or tables are malformed (shape, NaN, range, missing column)."""


class OutputError(SitecalError, OSError):
    """The run folder or one of its files cannot be written."""


class SitecalWarning(UserWarning):
    """Base class of sitecal's warnings."""


class SmallGroupWarning(SitecalWarning):
    """A subgroup has fewer studies than the protocol's minimum; its numbers are flagged."""


class ConvergenceWarning(SitecalWarning):
    """A numeric solve stopped at its iteration limit before reaching its tolerance."""
