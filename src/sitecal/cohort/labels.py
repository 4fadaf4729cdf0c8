"""Ground truth: read the labels table (CSV or Parquet) and map each key to a class index.

Labels files are read as sites export them: UTF-8 with or without a BOM, UTF-16 with a BOM, or
Windows-1252/Latin-1 when the bytes are not UTF-8; columns separated by ``,``, ``;``, tab or ``|``. What
cannot be read safely is refused with a :class:`~sitecal.errors.DataError` naming the file and line: bytes
that are not text, a quote that is never closed (the rows after it would be lost), a field longer than the
``csv`` module's limit, a file above ``max_bytes`` or of more rows than
:data:`~sitecal.cohort._labels_csv.MAX_ROWS` (a Parquet file from its footer, before any column is read,
see :mod:`sitecal.cohort._parquet`). No message and no bad-row reason ever holds the text of
a cell: cells hold identifiers (keys) and free text a site may have typed a name into.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sitecal._text import plural
from sitecal.cohort._labels_csv import MAX_ROWS, check_columns, check_size, csv_rows
from sitecal.cohort._parquet import parquet_chunks
from sitecal.errors import DataError

__all__ = ["MAX_LABELS_BYTES", "LabelTable", "label_table", "read_labels"]

logger = logging.getLogger(__name__)

MAX_LABELS_BYTES = 1 << 30
"""Default size limit of a labels file (1 GiB): one short row per study stays far below it."""

# csv.Sniffer is quadratic on some lines (64 KiB of `,"a"b` take 14 s); a real header fits in 4 KiB
# A header cell like these (UIDs, accession numbers, dates, MRNs, DOE^JANE) suggests the first line is a
# row of data, and a row of data must not reach an error message.


@dataclass(frozen=True)
class LabelTable:
    """Labels by key (identifiers in clear: held in memory only), and rows that could not be used.

    ``bad_rows`` holds (position, reason) pairs whose reasons carry no cell text. Positions are CSV line
    numbers where the row starts (the header is line 1) or, for Parquet, row numbers (the first row is
    row 1): ``numbered_by``.
    """

    labels: dict[str, int]
    bad_rows: tuple[tuple[int, str], ...]
    n_rows: int
    numbered_by: Literal["line", "row"] = "line"


def read_labels(
    path: Path,
    *,
    key_column: str,
    label_column: str,
    class_names: Sequence[str],
    max_bytes: int = MAX_LABELS_BYTES,
    max_rows: int = MAX_ROWS,
) -> LabelTable:
    r"""Read a CSV or Parquet table of ground truth.

    Parameters
    ----------
    path : Path
        A ``.parquet`` file (read with pyarrow), or else a CSV with a header row: UTF-8 (a BOM is accepted),
        UTF-16 with a BOM, or Windows-1252/Latin-1 when the bytes are not UTF-8; columns separated by
        ``,``, ``;``, tab or ``|`` (detected from the header line). The encoding and delimiter used are
        logged.
    key_column, label_column : str
        Column of the join key (e.g. StudyInstanceUID) and of the label.
    class_names : sequence of str
        The model's classes; a label is either one of these names or its index ``0 .. C-1`` in ASCII
        digits (in Parquet also as an integer or integral float column).
    max_bytes : int, default MAX_LABELS_BYTES
        Larger files are refused before they are read (a Parquet file also when the two columns hold more
        once decompressed).
    max_rows : int, default MAX_ROWS
        Files of more rows are refused (a Parquet file before its columns are read).

    Returns
    -------
    LabelTable
        One label per key. Rows with an empty key or label, a label that is neither a class name nor an
        index, or a key given twice with different labels are listed in ``bad_rows`` (the key then has no
        label); a warning counts them.

    Raises
    ------
    DataError
        When the file is missing, not a regular file, larger than ``max_bytes``, not text in a known
        encoding, malformed as CSV (a quote never closed, an oversized field), lacks a named column,
        holds no rows or more than ``max_rows``; or when a Parquet file is given and pyarrow is not
        installed, or it holds a cell larger than a CSV field may be.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "labels.csv"
    >>> _ = path.write_text("StudyInstanceUID;label\n1.2.3;nodule\n1.2.4;²\n", encoding="utf-8")
    >>> table = read_labels(path, key_column="StudyInstanceUID", label_column="label",
    ...                     class_names=["normal", "nodule"])
    >>> table.labels, table.bad_rows
    ({'1.2.3': 1}, ((3, 'label is not one of the class names [normal, nodule] or an index 0..1'),))
    """
    _check_file(path, max_bytes)
    if path.suffix.lower() == ".parquet":
        rows = _parquet_rows(path, key_column, label_column, max_bytes, max_rows)
        table = label_table(rows, key_column, class_names, "row")
    else:
        rows = csv_rows(path, key_column, label_column, max_bytes, max_rows)
        table = label_table(rows, key_column, class_names, "line")
    if table.bad_rows:
        counts = Counter(reason for _, reason in table.bad_rows)
        logger.warning(
            "%s: %d of %d %s cannot be used and %s excluded (%s), e.g. %s %d.",
            path,
            len(table.bad_rows),
            table.n_rows,
            plural(table.n_rows, "label row"),
            plural(len(table.bad_rows), "is", "are"),
            "; ".join(f"{reason}: {n}" for reason, n in counts.items()),
            table.numbered_by,
            table.bad_rows[0][0],
        )
    return table


def label_table(
    rows: Iterable[tuple[int, str, str]],
    key_column: str,
    class_names: Sequence[str],
    numbered_by: Literal["line", "row"],
) -> LabelTable:
    """Labels from (position, key, label text) rows, keys and labels stripped."""
    index = {name: i for i, name in enumerate(class_names)}
    names = ", ".join(class_names)
    unknown = f"label is not one of the class names [{names}] or an index 0..{len(class_names) - 1}"
    labels: dict[str, int] = {}
    conflicting: set[str] = set()
    bad: list[tuple[int, str]] = []
    known: dict[str, int | None] = {}
    n = len(class_names)
    n_rows = 0
    for position, key, value in rows:
        n_rows += 1
        if not key:
            bad.append((position, f"empty {key_column}"))
            continue
        if not value:
            bad.append((position, "empty label"))
            continue
        # a file of a million rows holds a few distinct label cells: each is read once
        label = known[value] if value in known else known.setdefault(value, _label_index(value, index, n))
        if label is None:
            bad.append((position, unknown))
            continue
        if key in labels and labels[key] != label:
            conflicting.add(key)
            bad.append((position, "key labelled twice with different labels"))
        labels[key] = label
    for key in conflicting:
        del labels[key]
    return LabelTable(labels=labels, bad_rows=tuple(bad), n_rows=n_rows, numbered_by=numbered_by)


def _label_index(value: str, index: dict[str, int], n_classes: int) -> int | None:
    """The class of a label cell: a class name, or an index in ASCII digits (not '²', '٣' or '１')."""
    if value in index:
        return index[value]
    if value.isascii() and value.isdigit():
        number = value.lstrip("0") or "0"
        # int() of thousands of digits raises; no class index is that long
        if len(number) <= len(str(n_classes)) and int(number) < n_classes:
            return int(number)
    return None


def _check_file(path: Path, max_bytes: int) -> None:
    """Refuse what is not a regular file (a FIFO would block, /dev/zero never ends) or is too large."""
    if not path.exists():
        raise DataError(f"{path}: labels file not found. Check data.labels in the protocol.")
    if not path.is_file():
        raise DataError(
            f"{path}: the labels file is not a regular file (a folder, pipe or device). "
            "Point data.labels at a CSV or Parquet file."
        )
    check_size(path, path.stat().st_size, max_bytes)


def _parquet_rows(
    path: Path, key_column: str, label_column: str, max_bytes: int, max_rows: int
) -> list[tuple[int, str, str]]:
    """(row number, key, label) of every row of a Parquet labels file; its two columns only are read."""

    def read(header: list[str]) -> list[str]:
        check_columns(path, header, key_column, label_column)  # before any column is read
        return [key_column, label_column]

    _, cells, chunks = parquet_chunks(
        path,
        read,
        max_rows=max_rows,
        max_bytes=max_bytes,
        chunk_rows=1 << 15,
        what="labels file",
        field="data.labels",
        text=_text,
    )
    key_at, label_at = cells.index(key_column), cells.index(label_column)
    return [
        (number, cells[key_at], cells[label_at])
        for numbers, rows in chunks
        for number, cells in zip(numbers, rows, strict=True)
    ]


def _text(value: object) -> str:
    """A Parquet cell as the text a CSV would hold: nulls empty, integral floats without '.0'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()
