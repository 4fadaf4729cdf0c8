"""Writing and reading the run folder's JSON documents, each checked against its type both ways."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from sitecal._io import read_json, write_json_atomic
from sitecal.results._calibration import CalibrationDocument, MethodCalibrationDocument
from sitecal.results._codec import Record

__all__ = ["read_calibration", "read_document", "write_document"]

D = TypeVar("D", bound=Record)


def write_document(path: Path, document: Record) -> None:
    """Check ``document`` against its type, then write it as JSON atomically.

    The bytes are those of :func:`sitecal._io.write_json_atomic` (sorted keys, 2-space indent, a final
    newline, NaN refused): the same document always gives the same file.

    Parameters
    ----------
    path : Path
        Where to write (``run_folder / "evaluation.json"``).
    document : Record
        An ``Evaluation``, ``CalibrationDocument`` or other results object.

    Raises
    ------
    DataError
        When the document does not follow its type (the message names the file and the JSON path);
        nothing is written then.
    OutputError
        When the file cannot be written.
    """
    path = Path(path)
    data = document.to_dict()
    type(document).from_dict(data, source=path.name)  # what is written must read back
    write_json_atomic(path, data)


def read_document(path: Path, cls: type[D]) -> D:
    """Read a JSON document written by :func:`write_document` and check it against ``cls``.

    Parameters
    ----------
    path : Path
        The file.
    cls : type
        The document type (``Evaluation``, ``CalibrationDocument``).

    Returns
    -------
    An instance of ``cls``.

    Raises
    ------
    DataError
        When the file is missing, is not JSON, is over :func:`sitecal._io.read_json`'s bounds (16 MiB, 64
        levels deep), holds NaN or infinity, or does not follow ``cls`` (naming the file and the JSON path
        of the first problem, e.g. ``evaluation.json: $.split.n_fit: expected an integer, got 1.5``).
    """
    path = Path(path)
    return cls.from_dict(read_json(path), source=str(path))


def read_calibration(path: Path) -> CalibrationDocument | MethodCalibrationDocument:
    """Read a run's ``calibration.json``: temperatures, or another method's fits (by its ``method``).

    Read within the bounds of :func:`sitecal._io.read_json`; raises DataError as :func:`read_document`.
    """
    path = Path(path)
    data = read_json(path)
    method = data.get("method") if isinstance(data, dict) else None
    cls = CalibrationDocument if method in (None, "temperature") else MethodCalibrationDocument
    return cls.from_dict(data, source=str(path))
