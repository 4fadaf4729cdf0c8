"""Ground truth: read the labels table (CSV or Parquet) and map each key to a class index.

Labels files are read as sites export them: UTF-8 with or without a BOM, UTF-16 with a BOM, or
Windows-1252/Latin-1 when the bytes are not UTF-8; columns separated by ``,``, ``;``, tab or ``|``. What
cannot be read safely is refused with a :class:`~sitecal.errors.DataError` naming the file and line: bytes
that are not text, a quote that is never closed (the rows after it would be lost), a field longer than the
``csv`` module's limit, a file above ``max_bytes``. No message and no bad-row reason ever holds the text of
a cell: cells hold identifiers (keys) and free text a site may have typed a name into.
"""

from __future__ import annotations

import codecs
import csv
import io
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sitecal.errors import DataError

__all__ = ["MAX_LABELS_BYTES", "LabelTable", "read_labels"]

logger = logging.getLogger(__name__)

MAX_LABELS_BYTES = 1 << 30
"""Default size limit of a labels file (1 GiB): one short row per study stays far below it."""

_DELIMITERS = ",;\t|"
_DELIMITER_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
# csv.Sniffer is quadratic on some lines (64 KiB of `,"a"b` take 14 s); a real header fits in 4 KiB
_SNIFF_CHARS = 4096
# A header cell like these (UIDs, accession numbers, dates, MRNs, DOE^JANE) suggests the first line is a
# row of data, and a row of data must not reach an error message.
_DATA_LIKE = re.compile(r"\d{4}|[\^@=\x00-\x1f]|.{65}")
_LINE_BREAK = re.compile(r"[\r\n]")


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
        Larger files are refused before they are read.

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
        encoding, malformed as CSV (a quote never closed, an oversized field), lacks a named column or
        holds no rows; or when a Parquet file is given and pyarrow is not installed.

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
        table = _table(_parquet_rows(path, key_column, label_column), key_column, class_names, "row")
    else:
        rows = _csv_rows(path, key_column, label_column, max_bytes)
        table = _table(rows, key_column, class_names, "line")
    if table.bad_rows:
        counts = Counter(reason for _, reason in table.bad_rows)
        logger.warning(
            "%s: %d of %d label rows cannot be used and are excluded (%s), e.g. %s %d.",
            path,
            len(table.bad_rows),
            table.n_rows,
            "; ".join(f"{reason}: {n}" for reason, n in counts.items()),
            table.numbered_by,
            table.bad_rows[0][0],
        )
    return table


def _table(
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
    n_rows = 0
    for position, key, value in rows:
        n_rows += 1
        if not key:
            bad.append((position, f"empty {key_column}"))
            continue
        if not value:
            bad.append((position, "empty label"))
            continue
        label = _label_index(value, index, len(class_names))
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
    _check_size(path, path.stat().st_size, max_bytes)


def _check_size(path: Path, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise DataError(
            f"{path}: the labels file has more than {max_bytes} bytes (the limit); is this a labels file? "
            "Check data.labels: a labels file holds one short row per study."
        )


def _check_columns(
    path: Path, header: Sequence[str], key_column: str, label_column: str, delimiter: str | None = None
) -> None:
    """Both named columns are in the header, once each; the error shows the header only if it is one."""
    for column, field in ((key_column, "data.key_column"), (label_column, "data.label_column")):
        if header.count(column) > 1:
            raise DataError(
                f"{path}: the column '{column}' appears {header.count(column)} times in the header. "
                f"Rename or remove the extra ones, so that {field} names one column."
            )
        if column in header:
            continue
        looks_like_data = any(_DATA_LIKE.search(name) for name in header)
        if looks_like_data:
            found = "the first line holds values, not column names"
        else:
            names = [name for name in header if name]
            found = "columns: " + (", ".join(names[:30]) or "none") + (", ..." if len(names) > 30 else "")
        if delimiter is not None:
            found += f"; delimiter {_DELIMITER_NAMES[delimiter]}"
        hint = " and give the file a header row naming the columns" if looks_like_data else ""
        raise DataError(
            f"{path}: no column '{column}' ({found}). Set {field} in the protocol to the right column{hint}."
        )


def _csv_rows(path: Path, key_column: str, label_column: str, max_bytes: int) -> list[tuple[int, str, str]]:
    """(line where the row starts, key, label) of every row of a CSV file."""
    text, encoding = _decode(path, _read(path, max_bytes))
    # newline="": split at \n, \r\n and \r only (not at \u2028 or \x0c, as str.splitlines would), keep them
    lines = io.StringIO(text, newline="").readlines()
    first = next((line for line in lines if not _blank(line)), None)
    if first is None:
        raise DataError(
            f"{path}: the labels file is empty. It needs a header row naming the columns "
            f"({key_column}, {label_column}) and one row per study."
        )
    delimiter = _delimiter(first, (key_column, label_column))
    logger.info("%s: read as %s, delimiter %s", path, encoding, _DELIMITER_NAMES[delimiter])
    records = _records(path, lines, delimiter)
    start, end, header = next(records)
    if end > start:  # no column name holds a line break: a quote left open
        raise _unclosed_quote(path, start)
    header = [name.strip() for name in header]
    _check_columns(path, header, key_column, label_column, delimiter)
    key_at, label_at = header.index(key_column), header.index(label_column)
    rows = []
    for start, end, row in records:
        if end > start and _swallowed(row, (key_at, label_at), delimiter, len(header)):
            raise _unclosed_quote(path, start)
        rows.append((start, _cell(row, key_at), _cell(row, label_at)))
    if not rows:
        raise DataError(f"{path}: the labels file has a header but no rows.")
    return rows


def _read(path: Path, max_bytes: int) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)  # bounded even if the file grew since stat()
    except OSError as exc:
        raise DataError(
            f"{path}: cannot read the labels file ({exc.strerror or type(exc).__name__}). "
            "Check data.labels and the file's permissions."
        ) from None
    _check_size(path, len(data), max_bytes)
    return data


def _decode(path: Path, data: bytes) -> tuple[str, str]:
    """The text of the file and the name of the encoding that read it."""
    if data.startswith(codecs.BOM_UTF8):
        tried = [("utf-8-sig", "UTF-8 (with BOM)")]
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        tried = [("utf-16", "UTF-16 (with BOM)")]
    else:
        # Windows-1252 decodes Latin-1 text identically and also the 0x80-0x9F punctuation Excel writes
        tried = [("utf-8", "UTF-8"), ("cp1252", "Windows-1252/Latin-1")]
    for codec, name in tried:
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        if "\x00" not in text:  # NULs: UTF-16 without a BOM, a spreadsheet, or not text at all
            return text, name
    raise DataError(
        f"{path}: the labels file is not text in {' or '.join(name for _, name in tried)}. "
        "Save it as UTF-8 (in Excel: 'CSV UTF-8'), or as Parquet."
    )


def _delimiter(header_line: str, columns: Sequence[str]) -> str:
    """The delimiter of the header line: the sniffed one, or the first candidate that finds the columns.

    A one-line sample gives the Sniffer little to go on (``a,b;c;d`` sniffs as ``,``), so when the sniffed
    delimiter does not find the named columns, each candidate is tried.
    """
    sample = header_line[:_SNIFF_CHARS]
    try:
        sniffed: str = csv.Sniffer().sniff(sample, delimiters=_DELIMITERS).delimiter
    except csv.Error:  # one column, or no candidate stands out
        sniffed = ","
    candidates: list[str] = [sniffed, *_DELIMITERS]
    for candidate in candidates:
        names = {name.strip() for name in next(csv.reader([sample], delimiter=candidate), [])}
        if all(column in names for column in columns):
            return candidate
    return sniffed


def _records(path: Path, lines: list[str], delimiter: str) -> Iterator[tuple[int, int, list[str]]]:
    """(first line, last line, fields) of each record with a non-blank field; csv errors become located.

    Rows of empty fields (``,,`` as spreadsheets write below a table, in any of the delimiters) are
    skipped, not bad rows.
    """
    reader = csv.reader(iter(lines), delimiter=delimiter, strict=True)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error:
            raise _csv_error(path, lines, start, reader.line_num, delimiter) from None
        if not all(_blank(field) for field in row):
            yield start, reader.line_num, row


def _blank(text: str) -> bool:
    """Whether a line or field holds nothing but spaces and delimiters (a spreadsheet's ,,, or ;;;)."""
    return not text.strip(" \t\r\n" + _DELIMITERS)


def _csv_error(path: Path, lines: list[str], start: int, end: int, delimiter: str) -> DataError:
    """What went wrong in the record on lines ``start .. end`` (the csv module's message holds no text)."""
    limit = csv.field_size_limit()
    if start < end or _ends_in_quote(lines[start - 1], delimiter):
        # a record runs past its first line only inside a quoted field, so that quote opens on `start`
        return _unclosed_quote(path, start)
    if len(lines[start - 1]) > limit:
        return DataError(
            f"{path}: line {start}: a field of more than {limit} characters; is this a labels file? "
            "Check data.labels."
        )
    return DataError(
        f'{path}: line {start}: text follows a closing quote (") in the same field. '
        'Fix the quoting: a field that holds a quote is quoted as a whole, its quotes doubled ("").'
    )


def _unclosed_quote(path: Path, line: int) -> DataError:
    return DataError(
        f'{path}: line {line}: a quote (") opens here and is never closed; the rows after it would be lost. '
        "Fix the quoting."
    )


def _ends_in_quote(line: str, delimiter: str) -> bool:
    """Whether a quoted field opened on this line is still open at its end (a short line: checked cheaply)."""
    if len(line) > csv.field_size_limit():
        return False
    inside, field_start, i = False, True, 0
    while i < len(line):
        char = line[i]
        if inside:
            if char == '"':
                if line.startswith('"', i + 1):
                    i += 1  # a doubled quote stands for one quote
                else:
                    inside = False
        elif char == '"' and field_start:
            inside = True
        field_start = not inside and char == delimiter
        i += 1
    return inside


def _swallowed(row: Sequence[str], named: Sequence[int], delimiter: str, n_columns: int) -> bool:
    """Whether a record spanning lines looks like a quote left open rather than a multi-line note.

    A key or a label never holds a line break; another column may (a comment typed with Alt+Enter), unless
    a line inside it holds as many delimiters as a row: then rows were read into it.
    """
    if any(_LINE_BREAK.search(_cell(row, at)) for at in named):
        return True
    return any(
        line.count(delimiter) >= n_columns - 1
        for field in row
        if _LINE_BREAK.search(field)
        for line in _LINE_BREAK.split(field)[1:]
    )


def _cell(row: Sequence[str], at: int) -> str:
    return row[at].strip() if at < len(row) else ""


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
