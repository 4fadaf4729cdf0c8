"""Atomic file writes for the run folder: a temp file in the same folder, then ``os.replace``."""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sitecal.errors import OutputError

__all__ = [
    "CONTROL_CHARACTERS",
    "csv_cell",
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
