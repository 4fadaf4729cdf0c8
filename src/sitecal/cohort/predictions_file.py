"""The predictions file: a model's outputs per study, for a model that is not run here.

A hospital validating a vendor's model has the vendor's output per study, not a model it can run. The
file is a CSV (or a Parquet file ending in ``.parquet``) with one row per study:

- a key column, ``data.key_column`` (default: ``data.key``, i.e. ``StudyInstanceUID`` or
  ``AccessionNumber``), in clear: it is pseudonymised on read like a DICOM key, and no key reaches an
  output. A file written by ``sitecal predict`` (and a run folder's ``predictions.csv``) has a
  ``study_key`` column of sitecal's own pseudonyms instead, a ``patient_key`` column and a
  ``split_rank`` column (the study's place in the order the fit/evaluation split follows, see
  :mod:`sitecal._split_key`; the pseudonyms cannot order it, since they change with the site key);
- optionally a patient column, ``data.patient_column``; without one each study is its own patient;
- score columns, one per class of ``model.class_names``, either all logits (``logit:<class>``) or all
  probabilities (``prob:<class>``); a two-class model may give the probability of one class only (the
  other is its complement). Probabilities must lie in [0, 1] and a row's must sum to 1 within
  :data:`SUM_TOLERANCE`; they become scores as their logarithms (floored at :data:`PROBABILITY_FLOOR`),
  so that softmax gives them back and a temperature divides their logarithms;
- optionally the label column (``data.label_column``) when ``data.labels`` is not given, and the columns
  that ``subgroups.<name>.column`` names.

A row that cannot be used (a score that is not a finite number in ASCII digits, a probability outside
[0, 1], a row not summing to 1, an empty key, a key given twice with different scores) is listed with its
line and reason and becomes an exclusion, once: a study whose key has no usable row is excluded for that
row's reason, and the row is not listed again. A file without the needed columns is refused with the
file, column and fix. A file of more than :data:`~sitecal.cohort._labels_csv.MAX_ROWS` rows is refused, a
Parquet file from its footer before any column is read (with its decompressed bytes and its cells held to
the limits of a CSV file, see :mod:`sitecal.cohort._parquet`). Reading logs nothing: the cohort built
from the file warns of its unusable rows (:func:`warn_unusable_rows`), once per run however many times
the file was read to check it.

A subgroup column is named by whoever exported the file: one named like an identifier is refused by the
protocol (``sitecal.protocol._base.refused_column``); one whose values are shown as they are (no
``mapping``, no ``bands``) is refused by :func:`sitecal.cohort.check_subgroup_columns` when its values
are many or one looks like an identifier (both in :mod:`sitecal.cohort._column_policy`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from sitecal._io import write_csv_atomic
from sitecal._split_key import split_ranks
from sitecal._text import plural
from sitecal.cohort._file_columns import cell_at, file_rows, score_columns_of
from sitecal.cohort._labels_csv import MAX_ROWS, check_column_list, check_size
from sitecal.cohort._prediction_rows import (
    DUPLICATE_REASON,
    SUM_TOLERANCE,
    CollectedRows,
    PredictionRow,
    PredictionRows,
    RowSpec,
    UsableRows,
    collect_rows,
    scores,
)
from sitecal.cohort._records import PredictionsFileSummary
from sitecal.errors import DataError
from sitecal.metrics import PROBABILITY_FLOOR

__all__ = [
    "MAX_PREDICTIONS_BYTES",
    "PROBABILITY_FLOOR",
    "SITECAL_KEY_COLUMN",
    "SITECAL_PATIENT_COLUMN",
    "SITECAL_SPLIT_COLUMN",
    "SUM_TOLERANCE",
    "PredictionRow",
    "PredictionTable",
    "ScoreRows",
    "read_predictions",
    "read_scores",
    "warn_unusable_rows",
    "write_predictions",
]

logger = logging.getLogger(__name__)

#: Larger files are refused before they are read (a predictions row is a few hundred bytes).
MAX_PREDICTIONS_BYTES = 1 << 30
#: The key and patient columns of a file sitecal wrote: its own keyed pseudonyms.
SITECAL_KEY_COLUMN = "study_key"
SITECAL_PATIENT_COLUMN = "patient_key"
#: The column of a file sitecal wrote that orders its patients for the split (:mod:`sitecal._split_key`).
SITECAL_SPLIT_COLUMN = "split_rank"
#: The columns a file sitecal wrote has besides its score columns.
_SITECAL_COLUMNS = (SITECAL_KEY_COLUMN, SITECAL_PATIENT_COLUMN, SITECAL_SPLIT_COLUMN)

ScoreKind = Literal["logit", "prob"]


@dataclass(frozen=True)
class PredictionTable:
    """Rows by key, the rows that cannot be used, and what the file is.

    ``rows`` makes each :class:`PredictionRow` when it is asked for; ``usable`` holds the same rows column
    by column (what a cohort of a million studies is built from). ``unusable_keys`` maps each key whose
    rows are all unusable to the ``(position, reason)`` of the row standing for it (one of ``bad_rows``),
    so that its study is excluded once, for that reason (in memory only: keys are identifiers).
    """

    path: Path
    rows: Mapping[str, PredictionRow]
    bad_rows: tuple[tuple[int, str], ...]
    n_rows: int
    score_kind: ScoreKind
    pseudonymised: bool  # keys are sitecal's study pseudonyms (a file sitecal wrote)
    key_column: str
    has_patient: bool
    numbered_by: Literal["line", "row"] = "line"
    usable: UsableRows | None = field(default=None, repr=False, compare=False)
    unusable_keys: Mapping[str, tuple[int, str]] = field(default_factory=dict, repr=False, compare=False)

    def summary(self, *, dicom: bool, labels_file: bool) -> PredictionsFileSummary:
        """What provenance and the report say of this file, joined to DICOM studies or not."""
        return PredictionsFileSummary(
            rows=self.n_rows,
            usable_rows=len(self.rows),
            score_kind=self.score_kind,
            pseudonymised=self.pseudonymised,
            patients="DICOM PatientID" if dicom else "column" if self.has_patient else "one per study",
            labels="labels file" if labels_file else "predictions file",
        )


def read_predictions(
    path: Path,
    *,
    class_names: Sequence[str],
    key_column: str,
    patient_column: str | None = None,
    label_column: str | None = None,
    columns: Sequence[str] = (),
    max_bytes: int = MAX_PREDICTIONS_BYTES,
    max_rows: int = MAX_ROWS,
    label_optional: bool = False,
) -> PredictionTable:
    r"""Read and check a predictions file (see the module docstring for its form).

    Parameters
    ----------
    path : Path
        CSV (encodings and delimiters as for labels, see :func:`sitecal.cohort.read_labels`) or Parquet.
    class_names : sequence of str
        The model's classes, in output order.
    key_column : str
        The column of the key in clear; a file with :data:`SITECAL_KEY_COLUMN` and without this column is
        read as one sitecal wrote (pseudonymised keys, and :data:`SITECAL_PATIENT_COLUMN` for patients).
    patient_column, label_column : str, optional
        Columns of the patient and the label, when the protocol reads them from this file.
    columns : sequence of str
        Further columns to keep per row (subgroup columns).
    label_optional : bool, default False
        A file without ``label_column`` is read as one without labels (``sitecal monitor``: labels come
        after the scores), rather than refused.
    max_bytes, max_rows : int
        Larger files (on disk; a Parquet file's read columns also once decompressed) and files of more
        rows are refused, a Parquet file before any column is read.

    Returns
    -------
    PredictionTable

    Raises
    ------
    DataError
        When the file is missing, too large, unreadable, lacks a named column, mixes logits and
        probabilities, has score columns for classes the model does not have (or lacks some), has no
        usable row, has more than ``max_rows`` rows or (Parquet) a cell larger than a CSV field may be.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "vendor.csv"
    >>> _ = path.write_text("AccessionNumber,prob:nodule\nA1,0.25\nA2,1.5\n", encoding="utf-8")
    >>> table = read_predictions(path, class_names=["normal", "nodule"], key_column="AccessionNumber")
    >>> np.exp(table.rows["A1"].logits).round(3).tolist(), table.bad_rows
    ([0.75, 0.25], ((3, 'probability outside [0, 1] in column prob:nodule'),))
    """
    _check_file(path, max_bytes)
    named_columns = {key_column, patient_column, label_column, *columns, *_SITECAL_COLUMNS} - {None}
    header, cells, chunks, numbered_by = file_rows(path, max_bytes, max_rows, named_columns)
    if label_optional and label_column not in header:
        label_column = None
    own = _columns_of(header, key_column, patient_column, label_column, columns)
    check_column_list(path, header, own.named)
    kind, score_columns = score_columns_of(path, header, class_names)
    _check_split_column(path, header, own.pseudonymised)
    found = _usable_rows(path, chunks, own.spec(cells, kind, score_columns))
    return PredictionTable(
        path=path,
        rows=PredictionRows(found.usable),
        # reasons counted in the order found (as the warning lists them), rows listed in file order
        bad_rows=tuple(sorted(found.bad)),
        n_rows=found.n_rows,
        score_kind=kind,
        pseudonymised=own.pseudonymised,
        key_column=own.key,
        has_patient=own.patient is not None,
        numbered_by=numbered_by,
        usable=found.usable,
        unusable_keys=found.unusable_keys,
    )


@dataclass(frozen=True)
class _Columns:
    """The columns a predictions file's rows are read by: key, patient, label and subgroup columns.

    ``pseudonymised``: the file is one sitecal wrote, keyed by :data:`SITECAL_KEY_COLUMN` (its patients
    in :data:`SITECAL_PATIENT_COLUMN` unless a patient column is named).
    """

    key: str
    patient: str | None
    label: str | None
    subgroups: Sequence[str]
    pseudonymised: bool

    @property
    def named(self) -> list[tuple[str, str]]:
        """Each column the file must have, with the protocol field that names it."""
        named = [(self.key, "data.key_column")]
        named += [(self.patient, "data.patient_column")] if self.patient else []
        named += [(self.label, "data.label_column")] if self.label else []
        named += [(c, "subgroups.<name>.column") for c in self.subgroups]
        return named

    def spec(self, cells: list[str], kind: ScoreKind, score_columns: Sequence[str | None]) -> RowSpec:
        """Where these columns' and the score columns' cells are in a row holding ``cells``."""
        at = {name: cells.index(name) for name, _ in self.named}
        return RowSpec(
            key_column=self.key,
            key_at=at[self.key],
            kind=kind,
            score_at=tuple(cells.index(c) if c is not None else None for c in score_columns),
            score_columns=tuple(score_columns),
            patient_at=at[self.patient] if self.patient else None,
            label_at=at[self.label] if self.label else None,
            column_at={c: at[c] for c in self.subgroups},
            split_at=cells.index(SITECAL_SPLIT_COLUMN) if self.pseudonymised else None,
            split_column=SITECAL_SPLIT_COLUMN,
        )


def _columns_of(
    header: Sequence[str],
    key_column: str,
    patient_column: str | None,
    label_column: str | None,
    columns: Sequence[str],
) -> _Columns:
    """The columns named, or sitecal's own for a file with its key column and without ``key_column``."""
    pseudonymised = key_column not in header and SITECAL_KEY_COLUMN in header
    if pseudonymised:
        key_column = SITECAL_KEY_COLUMN
        if patient_column is None and SITECAL_PATIENT_COLUMN in header:
            patient_column = SITECAL_PATIENT_COLUMN
    return _Columns(key_column, patient_column, label_column, columns, pseudonymised)


def _check_split_column(path: Path, header: Sequence[str], pseudonymised: bool) -> None:
    """Refuse a file sitecal wrote without the column that orders its patients for the split."""
    if pseudonymised and SITECAL_SPLIT_COLUMN not in header:
        raise DataError(
            f"{path}: a predictions file with sitecal's own keys ({SITECAL_KEY_COLUMN}) but without its "
            f"{SITECAL_SPLIT_COLUMN} column, which orders the patients for the fit/evaluation split. It "
            "was written by an earlier sitecal: run 'sitecal predict' again to write it anew."
        )


def _usable_rows(
    path: Path, chunks: Iterator[tuple[Sequence[int], list[list[str]]]], spec: RowSpec
) -> CollectedRows:
    """The file's rows sorted into usable and unusable; refused when none can be used."""
    found = collect_rows(chunks, spec)
    if not found.usable.keys:
        reasons = "; ".join(f"{r}: {n}" for r, n in Counter(r for _, r in found.bad).most_common(3))
        raise DataError(
            f"{path}: none of the {found.n_rows} {plural(found.n_rows, 'row')} of the predictions file can "
            f"be used ({reasons}). "
            "Check the file's score columns and data.key_column."
        )
    return found


def warn_unusable_rows(table: PredictionTable) -> None:
    """Log one warning counting the table's unusable rows by reason (nothing when every row is usable).

    Called where the cohort is built from the table, so that a run warns once although it reads the file
    twice (``sitecal check``'s reading before it, and its own). The reasons come in the order they are
    met reading the file, a key given twice with different cells being met at its second row.
    """
    if not table.bad_rows:
        return
    counts = Counter(reason for _, reason in table.bad_rows)
    firsts = {position for position, reason in table.unusable_keys.values() if reason == DUPLICATE_REASON}
    met = dict.fromkeys(reason for position, reason in table.bad_rows if position not in firsts)
    logger.warning(
        "%s: %d of %d %s cannot be used and %s excluded (%s), e.g. %s %d.",
        table.path,
        len(table.bad_rows),
        table.n_rows,
        plural(table.n_rows, "prediction row"),
        plural(len(table.bad_rows), "is", "are"),
        "; ".join(f"{reason}: {counts[reason]}" for reason in {**met, **counts}),
        table.numbered_by,
        table.bad_rows[0][0],
    )


@dataclass(frozen=True)
class ScoreRows:
    """The usable rows of a scores file: where each is, its group value and its scores as logits."""

    positions: tuple[int, ...]
    groups: tuple[str, ...]
    logits: np.ndarray  # (N, C), float64: logits as given, or the logarithm of the probabilities
    bad_rows: tuple[tuple[int, str], ...]
    n_rows: int
    score_kind: ScoreKind
    numbered_by: Literal["line", "row"]


def read_scores(
    path: Path,
    *,
    class_names: Sequence[str],
    group_column: str | None,
    max_bytes: int = MAX_PREDICTIONS_BYTES,
) -> ScoreRows:
    """Read a file of scores to calibrate: score columns as in a predictions file, and a group column.

    Nothing else of the file is read (a key column, if any, stays where it is). ``group_column`` ``None``:
    no group column (a global calibration). A row whose scores cannot be used is listed in ``bad_rows``.

    Raises
    ------
    DataError
        When the file is missing, unreadable, lacks the group column or a score column, or has no
        usable row.
    """
    if not path.exists():
        raise DataError(f"{path}: scores file not found.")
    if not path.is_file():
        raise DataError(f"{path}: the scores file is not a regular file (a folder, pipe or device).")
    check_size(path, path.stat().st_size, max_bytes, "scores file", "SCORES")
    header, cells, chunks, numbered_by = file_rows(path, max_bytes, MAX_ROWS, {group_column} - {None})
    rows = [(at, cells) for positions, block in chunks for at, cells in zip(positions, block, strict=True)]
    if group_column is not None:
        check_column_list(path, header, [(group_column, "--group-column")])
    kind, score_columns = score_columns_of(path, header, class_names)
    score_at = [cells.index(c) if c is not None else None for c in score_columns]
    group_at = None if group_column is None else cells.index(group_column)
    positions: list[int] = []
    groups: list[str] = []
    logits: list[np.ndarray] = []
    bad: list[tuple[int, str]] = []
    for position, cells in rows:
        row_logits = scores(cells, score_at, score_columns, kind)
        if isinstance(row_logits, str):
            bad.append((position, row_logits))
            continue
        positions.append(position)
        groups.append("" if group_at is None else cell_at(cells, group_at))
        logits.append(row_logits)
    if not positions:
        reasons = "; ".join(f"{r}: {n}" for r, n in Counter(r for _, r in bad).most_common(3))
        raise DataError(
            f"{path}: none of the {len(rows)} {plural(len(rows), 'row')} has usable scores ({reasons})."
        )
    return ScoreRows(
        positions=tuple(positions),
        groups=tuple(groups),
        logits=np.vstack(logits),
        bad_rows=tuple(bad),
        n_rows=len(rows),
        score_kind=kind,
        numbered_by=numbered_by,
    )


def write_predictions(
    path: Path,
    class_names: Sequence[str],
    study_keys: Sequence[str],
    patient_keys: Sequence[str],
    split_keys: Sequence[tuple[str, str]],
    logits: np.ndarray,
) -> None:
    """Write logits per study in the form :func:`read_predictions` reads (sitecal's pseudonymised keys).

    Each logit is written as the shortest text that reads back as the same float64, so a file written
    here and read back gives the same numbers bit for bit. ``split_keys``, each study's (patient, study)
    split keys (in memory, see :mod:`sitecal._split_key`), are written as ranks among the file's studies,
    never as they are.
    """
    write_csv_atomic(
        path,
        [
            SITECAL_KEY_COLUMN,
            SITECAL_PATIENT_COLUMN,
            SITECAL_SPLIT_COLUMN,
            *[f"logit:{name}" for name in class_names],
        ],
        (
            [study, patient, str(rank), *[repr(float(v)) for v in row]]
            for study, patient, rank, row in zip(
                study_keys, patient_keys, split_ranks(split_keys), np.asarray(logits, np.float64), strict=True
            )
        ),
    )


def _check_file(path: Path, max_bytes: int) -> None:
    if not path.exists():
        raise DataError(f"{path}: predictions file not found. Check data.predictions (or --predictions).")
    if not path.is_file():
        raise DataError(
            f"{path}: the predictions file is not a regular file (a folder, pipe or device). Point "
            "data.predictions at a CSV or Parquet file."
        )
    check_size(path, path.stat().st_size, max_bytes, "predictions file", "data.predictions")
