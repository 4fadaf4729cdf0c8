"""Reading a labels CSV as sites save it: its encoding, its delimiter, and quoting that went wrong."""

from __future__ import annotations

import codecs
import csv
import io
import itertools
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
_BLANK = " \t\r\n" + _DELIMITERS
# the line breaks of str.splitlines that a CSV line does not end at (io.StringIO with newline="")
_OTHER_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BLOCK_CHARS = 1 << 20

#: The most rows a labels or predictions file may hold (CSV or Parquet). Five times the largest cohort
#: benchmarked (10^6 studies, whose predictions file is read in 13 s and 1.3 GiB): a year of a national
#: screening programme fits, and the memory of the rows stays below a workstation's. A Parquet file of a
#: few megabytes holds ten million rows; without this limit reading it would take gigabytes.
MAX_ROWS = 5_000_000


def csv_rows(
    path: Path, key_column: str, label_column: str, max_bytes: int, max_rows: int = MAX_ROWS
) -> list[tuple[int, str, str]]:
    """(line where the row starts, key, label) of every row of a CSV file."""
    header, rows = csv_table(
        path,
        ((key_column, "data.key_column"), (label_column, "data.label_column")),
        max_bytes,
        max_rows=max_rows,
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
    max_rows: int = MAX_ROWS,
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (names stripped) and ``(line where the row starts, fields)`` of every row of a CSV file.

    ``columns`` are the ``(column, protocol field naming it)`` pairs that must be in the header, once each,
    and never hold a line break; ``what`` and ``field`` name the file in messages (``labels file``,
    ``data.labels``). More than ``max_rows`` rows raise :class:`~sitecal.errors.DataError`.
    """
    header, chunks = csv_chunks(path, columns, max_bytes, what=what, field=field, max_rows=max_rows)
    return header, [(start, row) for starts, rows in chunks for start, row in zip(starts, rows, strict=True)]


def csv_chunks(
    path: Path,
    columns: Sequence[tuple[str, str]],
    max_bytes: int,
    *,
    what: str = "labels file",
    field: str = "data.labels",
    chunk_rows: int = 1 << 15,
    max_rows: int = MAX_ROWS,
) -> tuple[list[str], Iterator[tuple[list[int], list[list[str]]]]]:
    """The header, and the rows of a CSV file as :func:`csv_table` reads them, ``chunk_rows`` at a time.

    Each chunk is ``(lines where the rows start, rows)``. The file is decoded and its header checked at
    once; its records are parsed as the chunks are taken, so a large file never lies in memory both as
    text and as rows. A malformed record, a file with a header and no rows, or more than ``max_rows``
    rows, raises :class:`~sitecal.errors.DataError` when the iteration reaches it (at most one chunk
    beyond the limit is parsed).
    """
    text, encoding = _decode(path, _read(path, max_bytes, what, field), what)
    first = next((line for line in _lines(text) if not _blank(line)), None)
    names = ", ".join(column for column, _ in columns)
    if first is None:
        raise DataError(
            f"{path}: the {what} is empty. It needs a header row naming the columns ({names}) and one row "
            "per study."
        )
    delimiter = _delimiter(first, [column for column, _ in columns])
    logger.info("%s: read as %s, delimiter %s", path, encoding, _DELIMITER_NAMES[delimiter])
    records = _records(path, text, delimiter, what, field, chunk_rows)
    first_chunk = next(records, None)
    if first_chunk is None:
        raise DataError(f"{path}: the {what} is empty. It needs a header row naming the columns ({names}).")
    starts, rows, spanning = first_chunk
    if spanning and spanning[0] == 0:  # no column name holds a line break: a quote left open
        raise _unclosed_quote(path, starts[0])
    header = [name.strip() for name in rows[0]]
    check_column_list(path, header, columns, delimiter)
    named = [header.index(column) for column, _ in columns]

    def chunks() -> Iterator[tuple[list[int], list[list[str]]]]:
        found = 0
        rest = (starts[1:], rows[1:], [i - 1 for i in spanning if i > 0])
        for chunk_starts, chunk_rows, chunk_spanning in itertools.chain([rest], records):
            for i in chunk_spanning:
                if _swallowed(chunk_rows[i], named, delimiter, len(header)):
                    raise _unclosed_quote(path, chunk_starts[i])
            found += len(chunk_rows)
            if found > max_rows:
                raise too_many_rows(path, f"more than {max_rows:,}", max_rows, what, field)
            if chunk_rows:
                yield chunk_starts, chunk_rows
        if not found:
            raise DataError(f"{path}: the {what} has a header but no rows.")

    return header, chunks()


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
    path: Path, text: str, delimiter: str, what: str, field: str, chunk_rows: int
) -> Iterator[tuple[list[int], list[list[str]], list[int]]]:
    """The records with a non-blank field, ``chunk_rows`` at a time; csv errors become located.

    Each chunk is ``(lines where the records start, records' fields, records spanning several lines)``,
    the last as indices into the chunk. Rows of empty fields (``,,`` as spreadsheets write below a table,
    in any of the delimiters) are skipped, not bad rows.

    The csv module parses a chunk in one call. Where the chunk's records are as many as its lines (no
    record spans lines), the line of each is known; otherwise the chunk's lines, kept until the chunk is
    parsed, are parsed again a record at a time. A csv error is located by parsing the file again a
    record at a time, up to it.
    """
    kept: list[tuple[int, list[str]]] = []  # (number of its first line, lines) of the blocks not yet parsed

    def blocks() -> Iterator[list[str]]:
        number = 1
        for block in _blocks(text):
            kept.append((number, block))
            number += len(block)
            yield block

    reader = csv.reader(itertools.chain.from_iterable(blocks()), delimiter=delimiter, strict=True)
    while True:
        done = reader.line_num
        while kept and kept[0][0] + len(kept[0][1]) <= done + 1:  # blocks parsed to their end
            del kept[0]
        try:
            rows = list(itertools.islice(reader, chunk_rows))
        except csv.Error:
            raise _located_error(path, text, delimiter, what, field) from None
        if not rows:
            return
        if reader.line_num - done == len(rows):
            starts = list(range(done + 1, reader.line_num + 1))
            spanning: list[int] = []
        else:
            starts, spanning = _spans(_kept_lines(kept, done + 1, reader.line_num), done, delimiter)
        # a record is blank when all its fields are: when their concatenation is
        blank = [i for i, row in enumerate(rows) if not "".join(row).strip(_BLANK)]
        if blank:
            keep = [True] * len(rows)
            for i in blank:
                keep[i] = False
            new_index = list(itertools.accumulate(keep, initial=0))
            spanning = [new_index[i] for i in spanning if keep[i]]
            starts = list(itertools.compress(starts, keep))
            rows = list(itertools.compress(rows, keep))
        yield starts, rows, spanning


def _kept_lines(kept: Sequence[tuple[int, list[str]]], first: int, last: int) -> list[str]:
    """Lines ``first`` to ``last`` (numbered from 1) of the kept blocks."""
    out: list[str] = []
    for number, block in kept:
        lo, hi = max(first, number), min(last, number + len(block) - 1)
        if lo <= hi:
            out += block[lo - number : hi - number + 1]
    return out


def _spans(lines: list[str], done: int, delimiter: str) -> tuple[list[int], list[int]]:
    """The line where each record of ``lines`` (after line ``done``) starts, and those spanning lines."""
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    starts: list[int] = []
    spanning: list[int] = []
    end = done
    for _ in reader:
        start, end = end + 1, done + reader.line_num
        if end > start:
            spanning.append(len(starts))
        starts.append(start)
    return starts, spanning


def _located_error(path: Path, text: str, delimiter: str, what: str, field: str) -> DataError:
    """The csv error of the file, with the lines of the record it is in."""
    reader = csv.reader(_lines(text), delimiter=delimiter, strict=True)
    end = 0
    try:
        for _ in reader:
            end = reader.line_num
    except csv.Error:
        return _csv_error(path, text, end + 1, reader.line_num, delimiter, what, field)
    raise AssertionError("a csv error that parsing again does not meet")  # pragma: no cover


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` as ``io.StringIO(text, newline="")`` gives them, line ends kept."""
    return itertools.chain.from_iterable(_blocks(text))


def _blocks(text: str) -> Iterator[list[str]]:
    r"""The lines of ``text`` as ``io.StringIO(text, newline="")`` gives them, a block of lines at a time.

    A line ends at ``\n``, ``\r\n`` or ``\r`` only (not at ``\u2028`` or ``\x0c``, as ``str.splitlines``
    would), its end kept. ``str.splitlines`` is used, a block at a time, where the text holds none of the
    other breaks it knows: a line at a time from ``io.StringIO`` costs more than the parsing.
    """
    if any(char in text for char in _OTHER_BREAKS):
        yield io.StringIO(text, newline="").readlines()
        return
    start = 0
    while start < len(text):
        # cut after a \n: it always ends a line (alone or after a \r), so no \r\n is cut in two
        end = text.find("\n", start + _BLOCK_CHARS)
        end = len(text) if end < 0 else end + 1
        yield text[start:end].splitlines(keepends=True)
        start = end


def _blank(text: str) -> bool:
    """Whether a line or field holds nothing but spaces and delimiters (a spreadsheet's ,,, or ;;;)."""
    return not text.strip(_BLANK)


def _csv_error(
    path: Path, text: str, start: int, end: int, delimiter: str, what: str, field: str
) -> DataError:
    """What went wrong in the record on lines ``start .. end`` (the csv module's message holds no text)."""
    lines = list(itertools.islice(_lines(text), start))
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


def too_many_rows(path: Path, rows: str, max_rows: int, what: str, field: str) -> DataError:
    """The error of a file of ``rows`` rows (``"12,000,000"`` or ``"more than 5,000,000"``)."""
    return DataError(
        f"{path}: the {what} has {rows} rows, above the limit of {max_rows:,} studies a file may hold; is "
        f"this a {what}? Check {field}, or evaluate a sample of at most {max_rows:,} studies (or one site's "
        "studies at a time)."
    )


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
