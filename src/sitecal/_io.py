"""Atomic file writes for the run folder: a temp file in the same folder, then ``os.replace``."""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sitecal.errors import OutputError

__all__ = ["write_bytes_atomic", "write_csv_atomic", "write_json_atomic", "write_text_atomic"]


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
    """Write a CSV with a header row atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())
