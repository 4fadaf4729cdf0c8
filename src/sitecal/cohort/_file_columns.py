"""Where a predictions or scores file's cells are: its rows in chunks (CSV or Parquet), its score columns."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Literal

from sitecal.cohort import _prediction_rows
from sitecal.cohort._labels_csv import csv_chunks
from sitecal.cohort._parquet import parquet_chunks
from sitecal.cohort._prediction_rows import ScoreKind
from sitecal.errors import DataError

__all__ = ["cell_at", "file_rows", "score_columns_of"]


def file_rows(
    path: Path, max_bytes: int, max_rows: int, named: Collection[str | None]
) -> tuple[list[str], list[str], Iterator[tuple[Sequence[int], list[list[str]]]], Literal["line", "row"]]:
    """The header, the columns a row holds, and the rows in chunks of (positions, rows), of a file.

    A CSV row holds every column of the header. Of a Parquet file only the ``named`` columns and the score
    columns are read, and a row holds theirs only.
    """
    size = _prediction_rows.CHUNK_ROWS
    if path.suffix.lower() == ".parquet":

        def read(header: list[str]) -> list[str]:
            return [name for name in header if name in named or name.startswith(("logit:", "prob:"))]

        header, cells, parts = parquet_chunks(
            path,
            read,
            max_rows=max_rows,
            max_bytes=max_bytes,
            chunk_rows=size,
            what="predictions file",
            field="data.predictions",
        )
        return header, cells, parts, "row"
    header, chunks = csv_chunks(
        path,
        (),
        max_bytes,
        what="predictions file",
        field="data.predictions",
        chunk_rows=size,
        max_rows=max_rows,
    )
    # the first chunk at once: a file with a header and no rows is refused before its columns are checked
    first = next(chunks)
    return header, header, itertools.chain([first], chunks), "line"


def score_columns_of(
    path: Path, header: Sequence[str], class_names: Sequence[str]
) -> tuple[ScoreKind, list[str | None]]:
    """Whether scores are logits or probabilities, and each class's column (``None``: the complement)."""
    found: dict[str, dict[str, str]] = {"logit": {}, "prob": {}}
    for name in header:
        if name.startswith(("logit:", "prob:")) and header.count(name) > 1:
            raise DataError(
                f"{path}: the column '{name}' appears {header.count(name)} times in the header. Keep one "
                "score column per class."
            )
        prefix, sep, cls = name.partition(":")
        if sep and prefix in found:
            if cls not in class_names:
                raise DataError(
                    f"{path}: column '{name}' names a class the model does not have (model.class_names: "
                    f"{', '.join(class_names)}). Rename the column, or fix model.class_names."
                )
            found[prefix][cls] = name
    kinds = [kind for kind, cols in found.items() if cols]
    if len(kinds) != 1:
        what = "both logit: and prob: columns" if kinds else "no score column"
        expected = ", ".join(f"logit:{c}" for c in class_names)
        raise DataError(
            f"{path}: {what}. Give one column per class, all logits ({expected}) or all probabilities "
            f"(prob:<class>; a two-class model may give one class's probability only)."
        )
    kind: ScoreKind = "logit" if kinds[0] == "logit" else "prob"
    cols = found[kind]
    missing = [c for c in class_names if c not in cols]
    if kind == "prob" and len(class_names) == 2 and len(missing) == 1:
        return kind, [cols.get(c) for c in class_names]
    if missing:
        raise DataError(
            f"{path}: no column {', '.join(f'{kind}:{c}' for c in missing)}. Give one {kind}: column per "
            f"class of model.class_names ({', '.join(class_names)})."
        )
    return kind, [cols[c] for c in class_names]


def cell_at(row: Sequence[str], at: int) -> str:
    """The cell at ``at`` stripped, ``""`` past the row's end."""
    return row[at].strip() if at < len(row) else ""
