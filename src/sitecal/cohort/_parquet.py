"""Reading the columns of a Parquet table as text cells, within bounds checked before any column is read.

A Parquet file is small on disk and large in memory at will: 8 million rows of one repeated value take
5.7 MB, a 400 MB cell of one repeated character 14 KB. So before a column is read, the footer's counts
and sizes (``ParquetFile.metadata``) are held against the limits: the rows (``max_rows``), the bytes the
read columns' pages take once decompressed (``max_bytes``, the byte limit of a CSV file), and each column
chunk's decompressed bytes per row, which above :data:`MAX_CELL_BYTES` mean a cell above it. Text columns
are then read dictionary-encoded, so a value repeated in a million rows is decoded once, and each row
group's cells are held against the same cell limit, and all cells together against ``max_bytes``, before
they become Python strings.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sitecal.cohort._labels_csv import too_many_rows
from sitecal.errors import DataError

__all__ = ["MAX_CELL_BYTES", "parquet_chunks"]

#: The largest cell read, in bytes: the csv module's default field_size_limit (131,072 characters), which
#: bounds a field of a CSV file; a Parquet cell counts its UTF-8 bytes.
MAX_CELL_BYTES = 131_072


def parquet_chunks(
    path: Path,
    choose: Callable[[list[str]], Collection[str]],
    *,
    max_rows: int,
    max_bytes: int,
    chunk_rows: int,
    what: str,
    field: str,
    max_cell: int = MAX_CELL_BYTES,
    text: Callable[[object], str] | None = None,
) -> tuple[list[str], list[str], Iterator[tuple[range, list[list[str]]]]]:
    """The header, and the rows of the chosen columns ``chunk_rows`` at a time, of a Parquet file.

    Parameters
    ----------
    path : Path
        The Parquet file.
    choose : callable
        Takes the column names (stripped) and returns those to read.
    max_rows, max_bytes, max_cell : int
        The limits (see the module docstring).
    chunk_rows : int
        Rows per chunk.
    what, field : str
        The file and the protocol field naming it, for messages (``predictions file``,
        ``data.predictions``).
    text : callable, optional
        A cell's value (``None`` for a null) → its text; by default ``""`` for a null, the shortest exact
        text of a float, else the value's text stripped.

    Returns
    -------
    header : list of str
        Every column name, stripped, in file order.
    read : list of str
        The chosen columns (in file order): a row holds their cells only.
    chunks : iterator
        ``(row numbers from 1, rows)``, each cell made by ``text``. A cell above the limits raises
        :class:`DataError` when its row group is reached.

    Raises
    ------
    DataError
        When pyarrow is missing, the file cannot be read as Parquet, a chosen column is given twice or
        holds lists or structs, or the footer shows the file over a limit or without rows.
    """
    pa, pq = _pyarrow(path, what)
    try:
        metadata_file = pq.ParquetFile(path)
        metadata = metadata_file.metadata
        fields = list(metadata_file.schema_arrow)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc, what, field) from None
    names = [str(f.name).strip() for f in fields]
    chosen = set(choose(names))
    read = [i for i, name in enumerate(names) if name in chosen]
    _check_columns(pa, path, names, fields, read, what)
    originals = [fields[i].name for i in read]
    _check_footer(path, metadata, originals, max_rows, max_bytes, max_cell, what, field)
    if metadata.num_rows == 0:
        raise DataError(f"{path}: the {what} has no rows.")
    # text columns are read dictionary-encoded: a value repeated in every row is decoded once
    encoded = [f.name for f in (fields[i] for i in read) if _is_text(pa, f.type)]
    try:
        parquet = pq.ParquetFile(path, read_dictionary=encoded)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc, what, field) from None
    budget = _Budget(path, max_bytes, max_cell, what, field, text or _text)
    chunks = _chunks(pa, parquet, originals, [names[i] for i in read], budget, chunk_rows)
    return names, [names[i] for i in read], chunks


def _check_columns(
    pa: Any, path: Path, names: list[str], fields: list[Any], read: list[int], what: str
) -> None:
    """Refuse a column to read that is given twice or holds lists or structs (nested values)."""
    for i in read:
        if names.count(names[i]) > 1:
            raise DataError(
                f"{path}: the column '{names[i]}' appears {names.count(names[i])} times in the header. "
                "Keep one column of that name."
            )
        if pa.types.is_nested(fields[i].type):
            raise DataError(
                f"{path}: column '{names[i]}' holds {fields[i].type} values; a {what} holds one number or "
                "text per cell. Save it with plain columns, or as CSV."
            )


class _Budget:
    """The cells' bytes read so far, against the limits of one cell and of all of them; what reads a cell."""

    def __init__(
        self, path: Path, max_bytes: int, max_cell: int, what: str, field: str, text: Callable[[object], str]
    ) -> None:
        self.path, self.what, self.field, self.text = path, what, field, text
        self.max_bytes, self.max_cell = max_bytes, max_cell
        self.used = 0

    def check(self, lengths: np.ndarray, column: str, group: int) -> None:
        """Refuse a value of more than the cell limit among values of ``lengths`` bytes."""
        if lengths.size and int(lengths.max()) > self.max_cell:
            raise _cell_error(self.path, column, group, self.max_cell, self.what, self.field)

    def take(self, lengths: np.ndarray, column: str, group: int) -> None:
        """Count cells of ``lengths`` bytes, each checked against the cell limit."""
        self.check(lengths, column, group)
        self.used += int(lengths.sum(dtype=np.int64))
        if self.used > self.max_bytes:
            raise _bytes_error(self.path, self.max_bytes, self.what, self.field)


def _check_footer(
    path: Path,
    metadata: Any,
    columns: Sequence[str],
    max_rows: int,
    max_bytes: int,
    max_cell: int,
    what: str,
    field: str,
) -> None:
    """Refuse, from the footer alone, a file over the row, byte or cell limit (nothing is decompressed)."""
    groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
    rows = max(metadata.num_rows, sum(group.num_rows for group in groups))  # a footer may disagree
    if rows > max_rows:
        raise too_many_rows(path, f"{rows:,}", max_rows, what, field)
    leaves: dict[str, list[int]] = {}
    for j in range(metadata.num_columns):
        leaves.setdefault(metadata.schema.column(j).path, []).append(j)
    total = 0
    for g, group in enumerate(groups):
        for name in columns:
            for j in leaves.get(name, []):
                size = group.column(j).total_uncompressed_size
                total += size
                if size > max_cell * max(
                    group.num_rows, 1
                ):  # more than the limit a row: one cell is above it
                    raise _cell_error(path, name.strip(), g, max_cell, what, field)
    if total > max_bytes:
        raise _bytes_error(path, max_bytes, what, field)


def _chunks(
    pa: Any,
    parquet: Any,
    originals: list[str],
    names: list[str],
    budget: _Budget,
    chunk_rows: int,
) -> Iterator[tuple[range, list[list[str]]]]:
    """Each row group's rows, ``chunk_rows`` at a time, its cells checked before they become text."""
    start = 0
    for g in range(parquet.metadata.num_row_groups):
        try:
            table = parquet.read_row_group(g, columns=originals, use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(budget.path, exc, budget.what, budget.field) from None
        columns = [_cells(pa, table.column(k), name, g, budget) for k, name in enumerate(names)]
        del table
        n = len(columns[0]) if columns else 0
        for i in range(0, n, chunk_rows):
            rows = [list(row) for row in zip(*(c[i : i + chunk_rows] for c in columns), strict=True)]
            yield range(start + i + 1, start + min(i + chunk_rows, n) + 1), rows
        start += n


def _cells(pa: Any, column: Any, name: str, group: int, budget: _Budget) -> list[str]:
    """The cells of one column of a row group as text, its text held against the budget first."""
    import pyarrow.compute as pc

    out: list[str] = []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            # each distinct value is decoded once, and the rows share it: checked before it becomes text
            values = chunk.dictionary
            indices = pc.fill_null(chunk.indices, len(values)).to_numpy(zero_copy_only=False)
            if _is_text(pa, values.type):
                lengths = _lengths(pc, values)
                budget.check(lengths, name, group)
                budget.take(np.append(lengths, 0)[indices], name, group)
            texts = [budget.text(v) for v in values.to_pylist()] + [budget.text(None)]
            out += list(map(texts.__getitem__, indices.tolist()))
            continue
        if _is_text(pa, chunk.type):
            budget.take(_lengths(pc, chunk), name, group)
        out += list(map(budget.text, chunk.to_pylist()))
    return out


def _lengths(pc: Any, array: Any) -> np.ndarray:
    """Bytes of each value of a text or binary array (0 for a null)."""
    return np.asarray(pc.fill_null(pc.binary_length(array), 0).to_numpy(zero_copy_only=False), np.int64)


def _is_text(pa: Any, kind: Any) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _text(value: object) -> str:
    """A Parquet cell as a CSV would hold it: nulls empty; floats as their shortest exact text."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value).strip()


def _pyarrow(path: Path, what: str) -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        needs = "Parquet labels" if what == "labels file" else f"a Parquet {what}"
        raise DataError(
            f"{path}: reading {needs} needs pyarrow: pip install pyarrow (or save "
            f"{'the labels' if what == 'labels file' else 'it'} as CSV)."
        ) from None
    return pa, pq


def _unreadable(path: Path, exc: BaseException, what: str, field: str) -> DataError:
    return DataError(
        f"{path}: cannot read the Parquet {what} ({str(exc).rstrip('.')}). Check {field}, or save it as CSV."
    )


def _cell_error(path: Path, column: str, group: int, max_cell: int, what: str, field: str) -> DataError:
    return DataError(
        f"{path}: column '{column}' (row group {group + 1}) holds a cell of more than {max_cell:,} bytes "
        f"once decompressed (the limit, as for a field of a CSV file); is this a {what}? Check {field}."
    )


def _bytes_error(path: Path, max_bytes: int, what: str, field: str) -> DataError:
    return DataError(
        f"{path}: the columns read of the {what} hold more than {max_bytes:,} bytes once decompressed (the "
        f"limit, as for a CSV file); is this a {what}? Check {field}: a {what} holds one short row per "
        "study."
    )
