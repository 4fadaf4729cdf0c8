"""Site mappings: CSV files ``value,group`` that rename a subgroup's normalised values (stations → sites)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sitecal.cohort._cells import without_controls
from sitecal.cohort.attributes import UNKNOWN, normalise_text
from sitecal.errors import DataError
from sitecal.protocol import SubgroupSettings

__all__ = ["UNMAPPED", "ValueMapping", "read_mapping", "read_mappings"]

#: The group of studies whose value a subgroup's mapping does not list. Reported like any other group, so
#: that a station missing from the file shows up instead of being merged silently or shown in clear.
UNMAPPED = "unmapped"

_COLUMNS = ("value", "group")


@dataclass(frozen=True)
class ValueMapping:
    """Normalised values → group names, matched ignoring case.

    ``groups`` holds each value as first written in the file (whitespace collapsed).
    """

    path: Path
    groups: Mapping[str, str]
    _folded: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_folded", {_fold(k): v for k, v in self.groups.items()})

    def group(self, value: str) -> str:
        """The group of a normalised ``value``; :data:`UNMAPPED` if absent, :data:`UNKNOWN` stays so."""
        if value == UNKNOWN:
            return UNKNOWN
        return self._folded.get(_fold(value), UNMAPPED)


def _fold(value: str) -> str:
    return normalise_text(value).casefold()


def read_mapping(path: Path, *, field: str = "mapping") -> ValueMapping:
    r"""Read a mapping CSV with the columns ``value`` and ``group`` (others are ignored).

    Parameters
    ----------
    path : Path
        UTF-8 CSV with a header row (a BOM is accepted).
    field : str
        The protocol field that names the file, for error messages (``subgroups.site.mapping``).

    Returns
    -------
    ValueMapping
        Values and groups with control characters replaced by spaces, whitespace trimmed and collapsed.
        A value listed twice with the same group
        (ignoring case) is kept once.

    Raises
    ------
    DataError
        When the file is missing, lacks a column, has no rows, has an empty cell, or maps one value to
        two groups. The message names the file and line.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "stations.csv"
    >>> _ = path.write_text("value,group\nCT01-ER,Emergency\n")
    >>> mapping = read_mapping(path)
    >>> mapping.group("ct01-er"), mapping.group("CT02"), mapping.group("unknown")
    ('Emergency', 'unmapped', 'unknown')
    """
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError(
            f"{path}: mapping file not found. Check {field} in the protocol (a path relative to the protocol "
            "file)."
        ) from None
    groups: dict[str, str] = {}
    first: dict[str, tuple[str, int]] = {}  # folded value → (value as first written, its line)
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        for column in _COLUMNS:
            if column not in header:
                raise DataError(
                    f"{path}:1: no column '{column}' (columns: {', '.join(header) or 'none'}). "
                    f"The file named by {field} needs the header 'value,group'."
                )
        for row in reader:
            # a group name is shown in every output: no control character of the file reaches one
            value, group = (" ".join(without_controls(row.get(c) or "").split()) for c in _COLUMNS)
            for column, cell in zip(_COLUMNS, (value, group), strict=True):
                if not cell:
                    raise DataError(
                        f"{path}:{reader.line_num}: empty '{column}'. Fill it in or delete the row."
                    )
            key = value.casefold()
            if key in first:
                written, line = first[key]
                if groups[written] != group:
                    raise DataError(
                        f"{path}:{reader.line_num}: value '{value}' is mapped to '{group}' here and to "
                        f"'{groups[written]}' on line {line} (values are compared ignoring case and extra "
                        "spaces). Keep one row for it."
                    )
                continue
            first[key] = (value, reader.line_num)
            groups[value] = group
    if not groups:
        raise DataError(f"{path}: the mapping file has a header but no rows. Add 'value,group' rows.")
    return ValueMapping(path=path, groups=groups)


def read_mappings(
    subgroups: Mapping[str, SubgroupSettings], resolve: Callable[[str], Path]
) -> dict[str, ValueMapping]:
    """Read the mapping of every subgroup that declares one.

    Parameters
    ----------
    subgroups : mapping
        Subgroup name → settings, as in the protocol.
    resolve : callable
        Turns a protocol path into a file path (``LoadedProtocol.resolve``: relative to the protocol file).

    Returns
    -------
    dict
        Subgroup name → its :class:`ValueMapping`, for the subgroups with ``mapping``.
    """
    return {
        name: read_mapping(resolve(s.mapping), field=f"subgroups.{name}.mapping")
        for name, s in subgroups.items()
        if s.mapping is not None
    }
