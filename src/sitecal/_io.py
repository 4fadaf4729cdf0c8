"""Atomic file writes for the run folder: a temp file in the same folder, then ``os.replace``."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sitecal.errors import DataError, OutputError

__all__ = [
    "CONTROL_CHARACTERS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "csv_cell",
    "json_depth",
    "read_json",
    "unwritable_folder",
    "write_bytes_atomic",
    "write_csv_atomic",
    "write_json_atomic",
    "write_text_atomic",
]


def unwritable_folder(folder: Path) -> str | None:
    """Why ``folder`` (which may not exist yet) cannot be created and written, or ``None``; creates nothing.

    The nearest existing folder on its path decides: it must be a folder this process may write into.
    """
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing}: no permission to write here"
    return None


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        # os.open with 0o666 honours the umask (mkstemp would leave the file readable by its owner only)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OutputError(
            f"{path}: cannot write ({exc.strerror or exc}). Check free space and permissions."
        ) from None


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, document: Any) -> None:
    """Write JSON (sorted keys, 2-space indent, NaN refused) atomically; same content → same bytes."""
    write_text_atomic(path, json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_csv_atomic(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    r"""Write a CSV with a header row atomically, every cell escaped by :func:`csv_cell`.

    Rows end in ``\n``. No cell holds a control character (:func:`csv_cell` replaces them), so none holds
    a line break; the quoting of ``\r`` below stays as a second guard.
    """
    lines = []
    record = io.StringIO()
    # the csv module quotes a cell only for the characters of its line terminator: with "\n" alone, a
    # bare "\r" (a hostile file name or header value) would go out unquoted and split the row in readers
    writer = csv.writer(record, lineterminator="\r\n")
    for row in itertools.chain([header], rows):
        record.seek(0)
        record.truncate()
        writer.writerow([csv_cell(cell) for cell in row])
        lines.append(record.getvalue()[:-2] + "\n")
    write_text_atomic(path, "".join(lines))


#: Characters no text cell of an output holds: C0 controls (NUL, tab and line breaks included), DEL, C1
#: controls, and the bidirectional embeddings, overrides, isolates and marks, which make a cell display
#: other text than it holds (Trojan Source, CVE-2021-42574). Values are cleaned where they enter the
#: cohort; :func:`csv_cell` replaces any that is left, as the last guard.
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What replaces a control character in a CSV cell: U+FFFD, the character that stands for one that
# cannot be shown
_REPLACEMENT = "\ufffd"

# A spreadsheet reads a cell starting with one of these as a formula (OWASP "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@")


def csv_cell(value: Any) -> Any:
    r"""``value`` as a CSV cell that no spreadsheet runs as a formula and that holds no control character.

    Each of :data:`CONTROL_CHARACTERS` (NUL, tab, line breaks, DEL, C1, bidirectional controls) becomes
    U+FFFD. Text then starting with ``=``, ``+``, ``-`` or ``@`` gets a leading ``'``, as OWASP
    recommends, unless the whole text is a number (a logit ``-1.25`` or ``-inf`` stays a number). Values
    that are not text (numbers, ``None``) are returned as they are.

    Examples
    --------
    >>> csv_cell("=SUM(A1:A9)"), csv_cell("-1.25"), csv_cell("-1+2"), csv_cell(-3)
    ("'=SUM(A1:A9)", '-1.25', "'-1+2", -3)
    >>> csv_cell("DOE\x00JANE\r\n=1") == "DOE\ufffdJANE\ufffd\ufffd=1"
    True
    """
    if not isinstance(value, str):
        return value
    value = CONTROL_CHARACTERS.sub(_REPLACEMENT, value)
    if not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    # float() also takes surrounding whitespace ("-1 ") and digit separators ("-1_0"), which are no
    # number a spreadsheet reads: such cells are escaped like any other text
    return value if value == value.strip() and "_" not in value else "'" + value


#: Largest JSON document :func:`read_json` reads: 45 times the demo's ``evaluation.json`` (370 kB for 7,000
#: numbers; the document grows with the groups, not the studies). What json.loads builds is bounded with
#: it: 16 MiB of the costliest JSON (empty objects, ``[{},{},...]``) takes 420 MiB and 2.8 s, of numbers
#: 190 MiB.
MAX_JSON_BYTES = 16 << 20
#: Deepest nesting :func:`read_json` reads: sitecal's documents nest 8 levels at most (``evaluation.json``).
#: json.loads recurses once per level, so a document 100,000 levels deep ends in RecursionError; 64 stays
#: far below Python's recursion limit.
MAX_JSON_DEPTH = 64
# Bytes the depth scan counts at a time (each chunk's prefix sums take 8 bytes a byte)
_DEPTH_CHUNK = 1 << 20


def read_json(
    path: Path,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    remedy: str = "Restore the file the run wrote.",
) -> Any:
    """Read a JSON document within a size and a nesting bound, refusing what is not plain JSON.

    The file is opened without blocking (a FIFO in its place cannot hang the reader) and must be a regular
    file of at most ``max_bytes`` bytes of UTF-8. Its nesting is measured before it is parsed, without
    recursion (brackets outside strings, counted with prefix sums), so that a deep document is refused
    instead of ending in RecursionError. ``NaN``, ``Infinity``, numbers that overflow to infinity and a
    key given twice in one object are refused: JSON has no non-finite number, and two readers of an
    object with a key twice could each take another value.

    Parameters
    ----------
    path : Path
        The file.
    max_bytes : int, default :data:`MAX_JSON_BYTES`
    max_depth : int, default :data:`MAX_JSON_DEPTH`
        Arrays and objects nested in each other (``[[1]]`` is 2 deep).
    remedy : str
        The next step each message ends with.

    Returns
    -------
    The parsed document (dict, list, str, int, float, bool or None).

    Raises
    ------
    DataError
        Naming the file and what is wrong: missing or unreadable, not a regular file, over the size or
        depth limit, not UTF-8, not JSON (with json's line and column), a non-finite number or a key
        given twice. No text of the file is quoted.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "deep.json"
    >>> _ = path.write_text("[" * 100 + "]" * 100)
    >>> read_json(path)
    Traceback (most recent call last):
    ...
    sitecal.errors.DataError: .../deep.json: JSON nested 100 levels deep, over the limit of 64. Restore ...
    """
    path = Path(path)
    data = _bounded_bytes(path, max_bytes, remedy)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}). {remedy}") from None
    depth = json_depth(data)
    if depth > max_depth:
        raise DataError(f"{path}: JSON nested {depth} levels deep, over the limit of {max_depth}. {remedy}")
    try:
        return json.loads(
            text, parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except (ValueError, RecursionError) as exc:  # RecursionError: a guard, the depth is checked above
        raise DataError(f"{path}: not valid JSON ({exc}). {remedy}") from None


def json_depth(data: bytes) -> int:
    r"""How deep the arrays and objects of JSON text nest: the most brackets open at once, outside strings.

    Counted without recursion, in linear time and memory (numpy prefix sums over chunks); brackets that do
    not match make no error here (json.loads reports them).

    >>> json_depth(rb'{"a": [1, {"b": "]]\\"}], "c": ["\\\"["]}'), json_depth(b"7")
    (3, 0)
    """
    # escaped backslashes, then escaped quotes, become other bytes (pairs from the left, as JSON reads a
    # run of backslashes): each quote left opens or closes a string
    plain = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    deepest = level = 0
    quotes = 0  # quotes before the chunk: an odd count means the chunk starts within a string
    for start in range(0, len(plain), _DEPTH_CHUNK):  # a loop over chunks of a million bytes
        codes = np.frombuffer(
            plain, dtype=np.uint8, count=min(_DEPTH_CHUNK, len(plain) - start), offset=start
        )
        seen = np.cumsum(codes == ord('"'), dtype=np.int64) + quotes
        outside = seen % 2 == 0  # a bracket is never a quote: outside when an even number precede it
        steps = np.zeros(codes.shape[0], dtype=np.int8)
        steps[outside & ((codes == ord("[")) | (codes == ord("{")))] = 1
        steps[outside & ((codes == ord("]")) | (codes == ord("}")))] = -1
        levels = np.cumsum(steps, dtype=np.int64) + level
        deepest, level, quotes = max(deepest, int(levels.max())), int(levels[-1]), int(seen[-1])
    return deepest


def _bounded_bytes(path: Path, max_bytes: int, remedy: str) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; a FIFO, device or folder is refused, not read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DataError(
            f"{path}: cannot read it ({exc.strerror or exc}). Pass the file the run wrote."
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"{path}: not a regular file. {remedy}")
        if info.st_size > max_bytes:
            raise DataError(f"{path}: {info.st_size} bytes, over the limit of {max_bytes} bytes. {remedy}")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(max_bytes + 1)  # the file may have grown since fstat
    except OSError as exc:
        raise DataError(
            f"{path}: cannot read it ({exc.strerror or exc}). Pass the file the run wrote."
        ) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise DataError(f"{path}: over the limit of {max_bytes} bytes. {remedy}")
    return data


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number too large for a float (it would be infinite)")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # the key is not quoted: it is the file's text
        raise ValueError("an object gives a key twice")
    return out
