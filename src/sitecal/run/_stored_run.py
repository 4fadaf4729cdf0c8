"""What ``sitecal plan --from-run`` reads of a run folder: its analysed studies and how it calibrated them.

:func:`read_run` reads ``calibration.json`` (the method, the calibration attribute, the classes and the
small-group policy), ``predictions.csv`` (each study's logits) and ``cohort.csv`` (each study's patient,
label, group and part of the split) into a :class:`StoredRun`, naming the file and line of anything that
is not what a run wrote.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

import numpy as np
from numpy.typing import NDArray

from sitecal._io import read_json
from sitecal.errors import DataError
from sitecal.evaluation import Split
from sitecal.protocol import CalibrationSettings

__all__ = ["RUN_FILES", "RUN_REMEDY", "StoredRun", "read_run"]

#: What --from-run reads of a run folder, in the order it reads them.
RUN_FILES = ("calibration.json", "predictions.csv", "cohort.csv")
#: The next step of every message about a run folder's file.
RUN_REMEDY = "Point --from-run at the unedited folder of a finished run."
# cohort.csv's split column: the one split's parts, or a fold of a cross-fitted run (fold 1 to fold K)
_FOLD = re.compile(r"fold ([1-9][0-9]{0,2})")
# the values the protocol allows (calibration.method, calibration.fallback): what a run can have written
_METHODS = get_args(CalibrationSettings.model_fields["method"].annotation)
_FALLBACKS = get_args(CalibrationSettings.model_fields["fallback"].annotation)


@dataclass(frozen=True)
class StoredRun:
    """What --from-run reads of a run folder: its analysed studies and how it calibrated them.

    Attributes
    ----------
    folder : Path
    logits : numpy.ndarray of float, shape (N, C)
        Each analysed study's logits (``predictions.csv``), in ``cohort.csv`` order.
    labels : numpy.ndarray of int, shape (N,)
    patients : numpy.ndarray of str, shape (N,)
        Patient pseudonyms: a patient's studies share a fold.
    groups : numpy.ndarray of str, shape (N,)
        Each study's calibration group (``"all"`` without ``per``).
    split : Split
        The run's split, from ``cohort.csv``'s split column.
    per : str or None
        The calibration attribute.
    method : str
        ``calibration.method``.
    min_group_size : int
    fallback : str
        The run's policy for small groups (temperature scaling).
    """

    folder: Path
    logits: NDArray[np.float64]
    labels: NDArray[np.int64]
    patients: NDArray[np.str_]
    groups: NDArray[np.str_]
    split: Split
    per: str | None
    method: str
    min_group_size: int
    fallback: str


def read_run(run_folder: Path) -> StoredRun:
    """Read what --from-run needs of a run folder; the only place planning reads one.

    :func:`sitecal.run.planning.plan_models` verifies the folder's seal before it calls this, so the files are
    the run's own. ``calibration.json`` is read by :func:`sitecal._io.read_json` (16 MiB, 64 levels); the
    two tables row by row (a cell at most the csv module's field limit, 128 kB), each problem named by its
    line.

    Raises
    ------
    DataError
        A missing file, or a file that is not what the run wrote (named, with its line).
    """
    folder = Path(run_folder)
    for name in RUN_FILES:
        if not (folder / name).is_file():
            raise DataError(
                f"{folder / name}: not found. --from-run needs a run folder written by `sitecal run`."
            )
    settings = _calibration_settings(folder / "calibration.json")
    class_names = settings["class_names"]
    logits = _logits(folder / "predictions.csv", class_names)
    rows = _cohort_rows(folder / "cohort.csv", settings["per"], class_names, logits)
    if not rows:
        raise DataError(f"{folder / 'cohort.csv'}: no analysed study to plan from. {RUN_REMEDY}")
    lines, keys, patients, labels, groups, parts = (list(column) for column in zip(*rows, strict=True))
    return StoredRun(
        folder=folder,
        logits=np.array([logits[k] for k in keys], dtype=np.float64),
        labels=np.array(labels, dtype=np.int64),
        patients=np.array(patients, dtype=str),
        groups=np.array(groups, dtype=str),
        split=_split(folder / "cohort.csv", parts, lines),
        per=settings["per"],
        method=settings["method"],
        min_group_size=settings["min_group_size"],
        fallback=settings["fallback"],
    )


def _calibration_settings(path: Path) -> dict[str, Any]:
    """The run's calibration method, attribute, classes and small-group policy, from calibration.json."""
    cal = read_json(path, remedy=RUN_REMEDY)
    if not isinstance(cal, dict):
        raise DataError(f"{path}: not a JSON object. {RUN_REMEDY}")
    method, per, names = cal.get("method"), cal.get("per"), cal.get("class_names")
    # another method's min_group_size is its fits' (GroupMethods.to_dict)
    fits = cal if method == "temperature" else cal.get("fits")
    size = fits.get("min_group_size") if isinstance(fits, dict) else None
    fallback = cal.get("fallback") if method == "temperature" else "global"
    checks = [
        ("method", method in _METHODS, f"one of {', '.join(_METHODS)}"),
        ("per", per is None or (isinstance(per, str) and per != ""), "a subgroup name or null"),
        (
            "class_names",
            isinstance(names, list) and len(names) >= 2 and all(isinstance(c, str) and c for c in names),
            "two or more class names",
        ),
        (
            "min_group_size",
            isinstance(size, int) and not isinstance(size, bool) and size >= 1,
            "a whole number >= 1",
        ),
        ("fallback", fallback in _FALLBACKS, f"one of {', '.join(_FALLBACKS)}"),
    ]
    for field, ok, expected in checks:  # the value is not quoted: it is the file's text
        if not ok:
            raise DataError(f"{path}: {field}: expected {expected}. {RUN_REMEDY}")
    return {
        "method": method,
        "per": per,
        "class_names": tuple(cast(list[str], names)),
        "min_group_size": size,
        "fallback": fallback,
    }


def _csv_rows(path: Path, needed: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, the ``needed`` cells) of each row of one of the run's tables; a missing column is named."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            missing = [c for c in needed if c not in header]
            if missing:
                raise DataError(f"{path}: no column {missing[0]}. {RUN_REMEDY}")
            at = {c: header.index(c) for c in needed}
            for cells in reader:
                if len(cells) != len(header):
                    raise DataError(
                        f"{path}: line {reader.line_num}: {len(cells)} cells, not {len(header)}. {RUN_REMEDY}"
                    )
                yield reader.line_num, {c: cells[i] for c, i in at.items()}
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        # the csv module's messages name the line and the limit, never the cell's text
        raise DataError(f"{path}: cannot read it ({type(exc).__name__}: {exc}). {RUN_REMEDY}") from None


def _logits(path: Path, class_names: Sequence[str]) -> dict[str, NDArray[np.float64]]:
    """Each study's logits from predictions.csv (finite numbers, one column per class)."""
    columns = [f"logit:{c}" for c in class_names]
    out: dict[str, NDArray[np.float64]] = {}
    for line, cells in _csv_rows(path, ["study_key", *columns]):
        try:
            row = np.array([float(cells[c]) for c in columns])
        except ValueError:
            row = np.array([math.nan])
        if not np.isfinite(row).all():
            raise DataError(f"{path}: line {line}: a logit is not a finite number. {RUN_REMEDY}")
        if cells["study_key"] in out:
            raise DataError(f"{path}: line {line}: a study given twice. {RUN_REMEDY}")
        out[cells["study_key"]] = row
    return out


def _cohort_rows(
    path: Path, per: str | None, class_names: Sequence[str], logits: Mapping[str, NDArray[np.float64]]
) -> list[tuple[int, str, str, int, str, str]]:
    """(line, study, patient, label index, calibration group, part of the split) of each cohort.csv row."""
    index = {c: i for i, c in enumerate(class_names)}
    needed = ["study_key", "patient_key", "label", "split", *([per] if per else [])]
    rows = []
    for line, cells in _csv_rows(path, needed):
        if cells["label"] not in index:
            raise DataError(
                f"{path}: line {line}: the label is none of calibration.json's classes. {RUN_REMEDY}"
            )
        if cells["study_key"] not in logits:
            raise DataError(f"{path}: line {line}: the study has no row in predictions.csv. {RUN_REMEDY}")
        group = cells[per] if per else "all"
        rows.append(
            (line, cells["study_key"], cells["patient_key"], index[cells["label"]], group, cells["split"])
        )
    return rows


def _split(path: Path, parts: Sequence[str], lines: Sequence[int]) -> Split:
    """The run's split from cohort.csv's split column: fit / evaluation, or fold 1 to fold K."""
    folds = [_FOLD.fullmatch(p) for p in parts]
    if all(folds):
        fold = np.array([int(m.group(1)) - 1 for m in folds if m is not None], dtype=np.int64)
        return Split("crossfit", fold, int(fold.max()) + 1)
    if all(p in ("fit", "evaluation") for p in parts):
        return Split.from_fit_mask(np.array([p == "fit" for p in parts], dtype=bool))
    # the first row that is no part of a split, or whose kind (parts or folds) is not the first row's
    crossfit = folds[0] is not None
    line = next(
        n
        for n, p, f in zip(lines, parts, folds, strict=True)
        if (f is not None) != crossfit or (f is None and p not in ("fit", "evaluation"))
    )
    raise DataError(
        f"{path}: line {line}: split is none of fit, evaluation or fold 1 to K, or the column mixes a one "
        f"split's parts with folds. {RUN_REMEDY}"
    )
