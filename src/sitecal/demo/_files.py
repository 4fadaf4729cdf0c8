"""Writing a demo cohort to disk, shared by the 2-D and the CT generators.

Argument checks, the output folder (never overwritten), hashed UIDs, Part-10 bytes, ``labels.csv`` and
``manifest.json``: the parts of :func:`sitecal.demo.generate_demo` and
:func:`sitecal.demo.ct.generate_ct_demo` that do not depend on what is imaged. Every writer here is
deterministic, so the same seed still gives byte-identical files.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pydicom
from pydicom.uid import PYDICOM_ROOT_UID, generate_uid

from ..errors import DataError, OutputError

__all__ = [
    "age_on",
    "check_cohort_arguments",
    "demo_uid",
    "encode",
    "manifest_summary",
    "prepare_out_dir",
    "write_bytes",
    "write_labels_csv",
    "write_manifest_json",
]


def check_cohort_arguments(function: str, n_studies: object, seed: object) -> None:
    """Raise :class:`DataError` unless ``n_studies`` is an int >= 10 and ``seed`` an int >= 0.

    Parameters
    ----------
    function : str
        Name of the generator, for the message (``"generate_demo"``).
    n_studies, seed : object
        The values received.
    """
    if isinstance(n_studies, bool) or not isinstance(n_studies, int) or n_studies < 10:
        raise DataError(f"The 'n_studies' parameter of {function} must be an int >= 10. Got {n_studies!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DataError(f"The 'seed' parameter of {function} must be an int >= 0. Got {seed!r}.")


def prepare_out_dir(out_dir: Path, *, function: str, cohort: str) -> tuple[Path, Path]:
    """Create ``out_dir/dicom`` and return it with ``out_dir/labels.csv``; refuse to overwrite either.

    Parameters
    ----------
    out_dir : pathlib.Path
        The generator's output folder.
    function : str
        Name of the generator, for the message.
    cohort : str
        What the previous output would be called (``"demo cohort"``), for the message.

    Returns
    -------
    dicom_dir, labels_csv : pathlib.Path

    Raises
    ------
    OutputError
        If either path exists, or the folder cannot be created.
    """
    out_dir = Path(out_dir)
    dicom_dir, labels_csv = out_dir / "dicom", out_dir / "labels.csv"
    for existing in (dicom_dir, labels_csv):
        if existing.exists():
            raise OutputError(
                f"{existing} already exists; {function} does not overwrite. Choose an empty out_dir "
                f"or delete the previous {cohort}."
            )
    try:
        dicom_dir.mkdir(parents=True)
    except OSError as exc:
        raise OutputError(f"Cannot create {dicom_dir}: {exc}. Choose a writable out_dir.") from exc
    return dicom_dir, labels_csv


def demo_uid(namespace: str, seed: int, *parts: object) -> str:
    """A UID under pydicom's root: the hash of ``(namespace, seed, *parts)`` as strings.

    The seed and counters are never readable from the UID, and the same inputs give the same UID.
    """
    sources = [namespace, str(seed), *map(str, parts)]
    return str(generate_uid(prefix=PYDICOM_ROOT_UID, entropy_srcs=sources))


def age_on(birth: dt.date, day: dt.date) -> int:
    """Age in whole years on ``day`` of someone born on ``birth``."""
    return day.year - birth.year - ((day.month, day.day) < (birth.month, birth.day))


def encode(ds: pydicom.Dataset) -> bytes:
    """Part-10 bytes of ``ds`` (its file meta must be set)."""
    buffer = io.BytesIO()
    pydicom.dcmwrite(buffer, ds, enforce_file_format=True)
    return buffer.getvalue()


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_labels_csv(path: Path, rows: Iterable[tuple[str, str]]) -> None:
    """Write the ground truth: a ``StudyInstanceUID,label`` header, then one row per pair, LF endings."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["StudyInstanceUID", "label"])
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def manifest_summary(manifest: Any) -> dict[str, Any]:
    """A manifest dataclass as JSON-ready data: without ``studies``, its two paths reduced to their names."""
    data: dict[str, Any] = asdict(manifest)
    data.pop("studies")
    data["dicom_dir"] = manifest.dicom_dir.name
    data["labels_csv"] = manifest.labels_csv.name
    return data


def write_manifest_json(out_dir: Path, summary: dict[str, object]) -> None:
    """Write ``summary`` to ``out_dir/manifest.json`` (2-space indent, final newline)."""
    (Path(out_dir) / "manifest.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
