"""Ground truth: read the labels table and map each key to a class index."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sitecal.errors import DataError

__all__ = ["LabelTable", "read_labels"]


@dataclass(frozen=True)
class LabelTable:
    """Labels by key (identifiers in clear: held in memory only), and rows that could not be used."""

    labels: dict[str, int]
    bad_rows: tuple[tuple[int, str], ...]  # (line number, reason), reasons carry no identifier
    n_rows: int


def read_labels(path: Path, *, key_column: str, label_column: str, class_names: Sequence[str]) -> LabelTable:
    """Read a CSV of ground truth.

    Parameters
    ----------
    path : Path
        CSV with a header row; UTF-8 (a BOM is accepted).
    key_column, label_column : str
        Column of the join key (e.g. StudyInstanceUID) and of the label.
    class_names : sequence of str
        The model's classes; a label is either one of these names or its index ``0 .. C-1``.

    Returns
    -------
    LabelTable
        One label per key. Rows with an empty key, an unknown label, or a key given twice with different
        labels are listed in ``bad_rows`` (the key then has no label).

    Raises
    ------
    DataError
        When the file is missing, is not a CSV with the named columns, or has no rows.
    """
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError(f"{path}: labels file not found. Check data.labels in the protocol.") from None
    index = {name: i for i, name in enumerate(class_names)}
    labels: dict[str, int] = {}
    conflicting: set[str] = set()
    bad: list[tuple[int, str]] = []
    n_rows = 0
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        for column, field in ((key_column, "data.key_column"), (label_column, "data.label_column")):
            if column not in header:
                raise DataError(
                    f"{path}: no column '{column}' (columns: {', '.join(header) or 'none'}). "
                    f"Set {field} in the protocol to the right column."
                )
        for row in reader:
            n_rows += 1
            line = reader.line_num
            key = (row.get(key_column) or "").strip()
            value = (row.get(label_column) or "").strip()
            if not key:
                bad.append((line, f"empty {key_column}"))
                continue
            label = index.get(value)
            if label is None and value.isdigit() and int(value) < len(class_names):
                label = int(value)
            if label is None:
                bad.append((line, f"label {value!r} is not one of {list(class_names)}"))
                continue
            if key in labels and labels[key] != label:
                conflicting.add(key)
                bad.append((line, "key labelled twice with different labels"))
            labels[key] = label
    for key in conflicting:
        del labels[key]
    if n_rows == 0:
        raise DataError(f"{path}: the labels file has a header but no rows.")
    return LabelTable(labels=labels, bad_rows=tuple(bad), n_rows=n_rows)
