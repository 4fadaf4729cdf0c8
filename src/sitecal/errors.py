"""Exceptions and warnings raised by sitecal.

Every error says what was wrong, where (file, line, field, DICOM tag or path) and what to do next.

::

    SitecalError (Exception)
    ├── ProtocolError (SitecalError, ValueError)    the protocol YAML is missing, malformed or invalid
    ├── DicomError (SitecalError, ValueError)       a DICOM file cannot be used (also an Exclusion reason)
    ├── ModelError (SitecalError, RuntimeError)     the model cannot be loaded or run
    ├── DataError (SitecalError, ValueError)        arrays, labels or tables are unusable
    │   ├── SealError                               a run folder's seal does not hold (edited, added,
    │   │                                           missing file, incomplete run, no key to check it)
    │   └── HistoryError (sitecal.monitor)          a monitoring history is locked, of another schema
    │                                               version, baseline or window kind, or unusable
    ├── InputError (SitecalError, ValueError)       a command's input is missing or contradictory (an
    │                                               option, a file a valid protocol names, an
    │                                               environment variable); the command exits 2
    └── OutputError (SitecalError, OSError)         the run folder cannot be written

    Terminated (KeyboardInterrupt)                  SIGTERM, handled as an interruption (SIGINT) is


    SitecalWarning (UserWarning)
    ├── SmallGroupWarning                           a group is below the protocol's minimum size
    └── ConvergenceWarning                          a numeric solve stopped before its tolerance
"""

from __future__ import annotations

__all__ = [
    "ConvergenceWarning",
    "DataError",
    "DicomError",
    "InputError",
    "ModelError",
    "OutputError",
    "ProtocolError",
    "SealError",
    "SitecalError",
    "SitecalWarning",
    "SmallGroupWarning",
    "Terminated",
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


class SealError(DataError):
    """A run folder cannot be trusted (:mod:`sitecal._seal`).

    A sealed file was edited or is missing, a file was added, the seal itself was edited, the run did not
    finish, or no key is at hand to check it.
    """


class InputError(SitecalError, ValueError):
    """A command's input cannot be used: a file a valid protocol names, an option or an environment variable.

    Raised by the ``sitecal`` command line; like every :class:`SitecalError`, it exits with code 2 (bad
    input) and a message naming the option, file or variable.
    """


class OutputError(SitecalError, OSError):
    """The run folder or one of its files cannot be written."""


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM).

    Handled as an interruption, so that the run folder is marked incomplete and the run log says so, as
    for Ctrl-C.
    """


class SitecalWarning(UserWarning):
    """Base class of sitecal's warnings."""


class SmallGroupWarning(SitecalWarning):
    """A subgroup has fewer studies than the protocol's minimum; its numbers are flagged."""


class ConvergenceWarning(SitecalWarning):
    """A numeric solve stopped at its iteration limit before reaching its tolerance."""
