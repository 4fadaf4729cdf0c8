"""A network part's rows: read as they are hashed, so that a part is verified in the one read that parses it.

Each physical line is read within a bound and hashed before it is parsed; the part's sha256 is compared to
the one its (sealed) sidecar recorded once the file is read, and also when a row cannot be read, so that an
altered part is refused as altered rather than for the row the alteration broke. Keys must be sitecal's
pseudonyms: a part holds no other identifier, and nothing else from it reaches a table or a message.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np

from sitecal._dicomfile import NotRegularFile, open_regular
from sitecal._split_key import network_split_keys
from sitecal._text import plural
from sitecal.cohort._records import Study
from sitecal.errors import DataError

__all__ = ["altered", "part_sha256", "read_rows"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: A part's physical line is a few hundred bytes; a longer one than this is refused (never read whole).
_MAX_LINE_BYTES = 1 << 20
#: What sitecal writes as a part's keys (:class:`sitecal._pseudonym.Pseudonymizer`): anything else, which
#: could be an identifier, is refused before it reaches a table or a message.
_STUDY_KEY = re.compile(r"S-[0-9a-f]{16}")
_PATIENT_KEY = re.compile(r"P-[0-9a-f]{16}")
_AGAIN = "Ask the site for both files of its part again."


def read_rows(
    part: Path, *, class_names: Sequence[str], subgroups: Sequence[str], sha256: str, rows: int
) -> list[Study]:
    """The part's studies, its bytes hashed as they are read against ``sha256`` (its sidecar's).

    A part whose rows cannot be read is refused for its sha256 when that is not ``sha256`` (the file was
    altered), else for the row; one of another number of rows than ``rows`` is refused too.
    """
    try:
        fh = open_regular(part)
    except (NotRegularFile, OSError) as exc:
        raise DataError(f"{part}: cannot read it ({exc.strerror or exc}). {_AGAIN}") from None
    with fh:
        lines = _HashedLines(fh)
        try:
            studies = _parse(part, class_names, subgroups, lines)
        except (DataError, csv.Error, UnicodeDecodeError, _LineTooLong) as exc:
            if lines.rest() != sha256:
                raise altered(part) from None
            if isinstance(exc, DataError):
                raise
            raise DataError(
                f"{part}: not a CSV that sitecal writes ({type(exc).__name__}). {_AGAIN}"
            ) from None
        if lines.rest() != sha256:
            raise altered(part)
    if len(studies) != rows:
        raise DataError(
            f"{part}: {len(studies)} {plural(len(studies), 'row')}, but its sidecar says {rows}. {_AGAIN}"
        )
    return studies


def part_sha256(part: Path) -> str:
    """The part's sha256 (a regular file only: a FIFO put in its place never blocks)."""
    try:
        with open_regular(part) as fh:
            return _HashedLines(fh).rest()
    except (NotRegularFile, OSError) as exc:
        raise DataError(f"{part}: cannot read it ({exc.strerror or exc}). {_AGAIN}") from None


def altered(part: Path) -> DataError:
    """The error for a part whose sha256 is not the one its sidecar sealed."""
    return DataError(
        f"{part}: its sha256 is not the one its sidecar recorded: the file was changed or cut short after "
        "the site wrote it. Ask the site for it again."
    )


class _LineTooLong(Exception):
    """A physical line of a part above :data:`_MAX_LINE_BYTES`."""


class _HashedLines:
    """A part's lines as text, every byte read hashed: the part is verified as it is parsed, in one read."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.digest = hashlib.sha256()

    def __iter__(self) -> Iterator[str]:
        for raw in iter(lambda: self._fh.readline(_MAX_LINE_BYTES + 1), b""):
            self.digest.update(raw)
            if len(raw) > _MAX_LINE_BYTES:
                raise _LineTooLong
            yield raw.decode("utf-8")

    def rest(self) -> str:
        """Hash what was not read yet; the part's sha256."""
        for block in iter(lambda: self._fh.read(1 << 20), b""):
            self.digest.update(block)
        return self.digest.hexdigest()


def _parse(
    part: Path, class_names: Sequence[str], subgroups: Sequence[str], lines: _HashedLines
) -> list[Study]:
    classes = list(class_names)
    header = ["study_key", "patient_key", "label"]
    header += [f"logit:{c}" for c in classes] + [f"subgroup:{n}" for n in subgroups]
    label_of = {name: i for i, name in enumerate(classes)}
    n_logits = len(classes)
    studies = []
    reader = csv.reader(lines)
    if next(reader, None) != header:
        raise DataError(f"{part}: its columns are not {', '.join(header)}: not a part of this protocol.")
    for line, cells in enumerate(reader, start=2):
        if len(cells) != len(header):
            raise DataError(f"{part}: line {line} has {len(cells)} cells, not {len(header)}.")
        study_key, patient_key = cells[0], cells[1]
        if not (_STUDY_KEY.fullmatch(study_key) and _PATIENT_KEY.fullmatch(patient_key)):
            raise DataError(
                f"{part}: line {line}: study_key or patient_key is not a sitecal pseudonym (S- or P- and 16 "
                "hexadecimal digits). A part holds pseudonyms only."
            )
        try:
            logits = np.array([float(v) for v in cells[3 : 3 + n_logits]], dtype=np.float64)
        except ValueError:
            raise DataError(f"{part}: line {line}: a logit is not a number.") from None
        if not all(math.isfinite(v) for v in logits) or cells[2] not in label_of:
            raise DataError(f"{part}: line {line}: a logit is not finite, or the label is no class name.")
        split, order = network_split_keys(study_key, patient_key)
        studies.append(
            Study(
                study_key=study_key,
                patient_key=patient_key,
                files=(),
                relative_path="",
                instance_uids=(),
                attributes={
                    name: _uncell(value) for name, value in zip(subgroups, cells[3 + n_logits :], strict=True)
                },
                label=label_of[cells[2]],
                logits=logits,
                split_key=split,
                study_order=order,
            )
        )
    return studies


def _uncell(value: str) -> str:
    """A subgroup value as the site had it (undoing the formula escape of :func:`sitecal._io.csv_cell`)."""
    return value[1:] if value.startswith("'") and value[1:].startswith(_FORMULA_START) else value
