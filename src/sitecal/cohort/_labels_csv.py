"""Reading a labels CSV as sites save it: its encoding, its delimiter, and quoting that went wrong."""

from __future__ import annotations

import codecs
import csv
import io
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from sitecal.errors import DataError

logger = logging.getLogger(__name__)

_DELIMITERS = ",;\t|"
_DELIMITER_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
_SNIFF_CHARS = 4096
_DATA_LIKE = re.compile(r"\d{4}|[\^@=\x00-\x1f]|.{65}")
_LINE_BREAK = re.compile(r"[\r\n]")


def csv_rows(path: Path, key_column: str, label_column: str, max_bytes: int) -> list[tuple[int, str, str]]:
    """(line where the row starts, key, label) of every row of a CSV file."""
    header, rows = csv_table(
        path, ((key_column, "data.key_column"), (label_column, "data.label_column")), max_bytes
    )
    key_at, label_at = header.index(key_column), header.index(label_column)
    return [(line, _cell(row, key_at), _cell(row, label_at)) for line, row in rows]


def csv_table(
    path: Path,
    columns: Sequence[tuple[str, str]],
    max_bytes: int,
    *,
    what: str = "labels file",
    field: str = "data.labels",
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (names stripped) and ``(line where the row starts, fields)`` of every row of a CSV file.

    ``columns`` are the ``(column, protocol field naming it)`` pairs that must be in the header, once each,
    and never hold a line break; ``what`` and ``field`` name the file in messages (``labels file``,
    ``data.labels``).
    """
    text, encoding = _decode(path, _read(path, max_bytes, what, field), what)
    # newline="": split at \n, \r\n and \r only (not at \u2028 or \x0c, as str.splitlines would), keep them
    lines = io.StringIO(text, newline="").readlines()
    first = next((line for line in lines if not _blank(line)), None)
    names = ", ".join(column for column, _ in columns)
    if first is None:
        raise DataError(
            f"{path}: the {what} is empty. It needs a header row naming the columns ({names}) and one row "
            "per study."
        )
    delimiter = _delimiter(first, [column for column, _ in columns])
    logger.info("%s: read as %s, delimiter %s", path, encoding, _DELIMITER_NAMES[delimiter])
    records = _records(path, lines, delimiter, what, field)
    start, end, header = next(records)
    if end > start:  # no column name holds a line break: a quote left open
        raise _unclosed_quote(path, start)
    header = [name.strip() for name in header]
    check_column_list(path, header, columns, delimiter)
    named = [header.index(column) for column, _ in columns]
    rows = []
    for start, end, row in records:
        if end > start and _swallowed(row, named, delimiter, len(header)):
            raise _unclosed_quote(path, start)
        rows.append((start, row))
    if not rows:
        raise DataError(f"{path}: the {what} has a header but no rows.")
    return header, rows


def _read(path: Path, max_bytes: int, what: str, field: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)  # bounded even if the file grew since stat()
    except OSError as exc:
        raise DataError(
            f"{path}: cannot read the {what} ({exc.strerror or type(exc).__name__}). "
            f"Check {field} and the file's permissions."
        ) from None
    check_size(path, len(data), max_bytes, what, field)
    return data


def _decode(path: Path, data: bytes, what: str) -> tuple[str, str]:
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
        f"{path}: the {what} is not text in {' or '.join(name for _, name in tried)}. "
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


def _records(
    path: Path, lines: list[str], delimiter: str, what: str, field: str
) -> Iterator[tuple[int, int, list[str]]]:
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
            raise _csv_error(path, lines, start, reader.line_num, delimiter, what, field) from None
        if not all(_blank(field) for field in row):
            yield start, reader.line_num, row


def _blank(text: str) -> bool:
    """Whether a line or field holds nothing but spaces and delimiters (a spreadsheet's ,,, or ;;;)."""
    return not text.strip(" \t\r\n" + _DELIMITERS)


def _csv_error(
    path: Path, lines: list[str], start: int, end: int, delimiter: str, what: str, field: str
) -> DataError:
    """What went wrong in the record on lines ``start .. end`` (the csv module's message holds no text)."""
    limit = csv.field_size_limit()
    if start < end or _ends_in_quote(lines[start - 1], delimiter):
        # a record runs past its first line only inside a quoted field, so that quote opens on `start`
        return _unclosed_quote(path, start)
    if len(lines[start - 1]) > limit:
        return DataError(
            f"{path}: line {start}: a field of more than {limit} characters; is this a {what}? Check {field}."
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


def check_size(
    path: Path, size: int, max_bytes: int, what: str = "labels file", field: str = "data.labels"
) -> None:
    if size > max_bytes:
        raise DataError(
            f"{path}: the {what} has more than {max_bytes} bytes (the limit); is this a {what}? "
            f"Check {field}: a {what} holds one short row per study."
        )


def check_columns(
    path: Path, header: Sequence[str], key_column: str, label_column: str, delimiter: str | None = None
) -> None:
    """Both named columns are in the header, once each; the error shows the header only if it is one."""
    check_column_list(
        path, header, ((key_column, "data.key_column"), (label_column, "data.label_column")), delimiter
    )


def check_column_list(
    path: Path, header: Sequence[str], columns: Sequence[tuple[str, str]], delimiter: str | None = None
) -> None:
    """Each ``(column, field)`` is in the header once; the error shows the header only if it is one."""
    for column, field in columns:
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
