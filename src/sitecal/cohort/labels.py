"""Ground truth: read the labels table (CSV or Parquet) and map each key to a class index."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sitecal.errors import DataError

__all__ = ["LabelTable", "read_labels"]


@dataclass(frozen=True)
class LabelTable:
    """Labels by key (identifiers in clear: held in memory only), and rows that could not be used.

    ``bad_rows`` holds (position, reason) pairs whose reasons carry no identifier. Positions are CSV line
    numbers (the header is line 1) or, for Parquet, row numbers (the first row is row 1): ``numbered_by``.
    """

    labels: dict[str, int]
    bad_rows: tuple[tuple[int, str], ...]
    n_rows: int
    numbered_by: Literal["line", "row"] = "line"


def read_labels(path: Path, *, key_column: str, label_column: str, class_names: Sequence[str]) -> LabelTable:
    """Read a CSV or Parquet table of ground truth.

    Parameters
    ----------
    path : Path
        A ``.parquet`` file (read with pyarrow), or else a CSV with a header row, UTF-8 (a BOM is accepted).
    key_column, label_column : str
        Column of the join key (e.g. StudyInstanceUID) and of the label.
    class_names : sequence of str
        The model's classes; a label is either one of these names or its index ``0 .. C-1`` (in Parquet
        also as an integer or integral float column).

    Returns
    -------
    LabelTable
        One label per key. Rows with an empty key, an unknown label, or a key given twice with different
        labels are listed in ``bad_rows`` (the key then has no label).

    Raises
    ------
    DataError
        When the file is missing, is not a CSV or Parquet file with the named columns, or has no rows; or
        when a Parquet file is given and pyarrow is not installed.
    """
    if not path.is_file():
        raise DataError(f"{path}: labels file not found. Check data.labels in the protocol.")
    if path.suffix.lower() == ".parquet":
        return _table(_parquet_rows(path, key_column, label_column), key_column, class_names, "row")
    return _table(_csv_rows(path, key_column, label_column), key_column, class_names, "line")


def _table(
    rows: Iterable[tuple[int, str, str]],
    key_column: str,
    class_names: Sequence[str],
    numbered_by: Literal["line", "row"],
) -> LabelTable:
    """Labels from (position, key, label text) rows, keys and labels stripped."""
    index = {name: i for i, name in enumerate(class_names)}
    labels: dict[str, int] = {}
    conflicting: set[str] = set()
    bad: list[tuple[int, str]] = []
    n_rows = 0
    for position, key, value in rows:
        n_rows += 1
        if not key:
            bad.append((position, f"empty {key_column}"))
            continue
        label = index.get(value)
        if label is None and value.isdigit() and int(value) < len(class_names):
            label = int(value)
        if label is None:
            bad.append((position, f"label {value!r} is not one of {list(class_names)}"))
            continue
        if key in labels and labels[key] != label:
            conflicting.add(key)
            bad.append((position, "key labelled twice with different labels"))
        labels[key] = label
    for key in conflicting:
        del labels[key]
    return LabelTable(labels=labels, bad_rows=tuple(bad), n_rows=n_rows, numbered_by=numbered_by)


def _check_columns(path: Path, header: Sequence[str], key_column: str, label_column: str) -> None:
    for column, field in ((key_column, "data.key_column"), (label_column, "data.label_column")):
        if column not in header:
            raise DataError(
                f"{path}: no column '{column}' (columns: {', '.join(header) or 'none'}). "
                f"Set {field} in the protocol to the right column."
            )


def _csv_rows(path: Path, key_column: str, label_column: str) -> list[tuple[int, str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        _check_columns(path, reader.fieldnames or [], key_column, label_column)
        rows = [
            (reader.line_num, (row.get(key_column) or "").strip(), (row.get(label_column) or "").strip())
            for row in reader
        ]
    if not rows:
        raise DataError(f"{path}: the labels file has a header but no rows.")
    return rows


def _parquet_rows(path: Path, key_column: str, label_column: str) -> list[tuple[int, str, str]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet labels needs pyarrow: pip install pyarrow (or save the labels as CSV)."
        ) from None
    try:
        parquet = pq.ParquetFile(path)
        header = parquet.schema_arrow.names
        _check_columns(path, header, key_column, label_column)
        table = parquet.read(columns=[key_column, label_column])
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{path}: cannot read the Parquet labels file ({str(exc).rstrip('.')}). "
            "Check data.labels, or save the labels as CSV."
        ) from None
    keys = table.column(key_column).to_pylist()
    values = table.column(label_column).to_pylist()
    if not keys:
        raise DataError(f"{path}: the labels file has no rows.")
    return [(i, _text(key), _text(value)) for i, (key, value) in enumerate(zip(keys, values, strict=True), 1)]


def _text(value: object) -> str:
    """A Parquet cell as the text a CSV would hold: nulls empty, integral floats without '.0'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()
