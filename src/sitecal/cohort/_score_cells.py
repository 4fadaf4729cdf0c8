"""A row's cells as the file gives them: where they are (:class:`RowSpec`) and its scores read as logits.

Score cells are parsed with ``float`` where they are ASCII numbers (``'٠.٥'``, ``'１'`` and ``'1_000'``
are not numbers here, :func:`~sitecal.cohort._cells.ascii_float`): :func:`scores` reads one row and says
why it cannot be used; :func:`_bulk_scores` reads a chunk's columns at once with numpy and names the rows
to look at alone. Probabilities must sum to 1 within :data:`SUM_TOLERANCE` and become logits as their
logarithms. :func:`split_rank` reads a file sitecal wrote's split rank cell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Literal

import numpy as np

from sitecal.cohort._cells import ascii_float
from sitecal.metrics import log_probabilities

__all__ = ["SUM_TOLERANCE", "RowSpec", "ScoreKind", "scores", "split_rank"]

ScoreKind = Literal["logit", "prob"]

#: How far a row's probabilities may sum from 1 (rounding in the vendor's export), absolute.
SUM_TOLERANCE = 1e-3
# Rows whose sum lies this close to the tolerance are checked alone, as one row's scores always were.
_SUM_MARGIN = 1e-9


@dataclass(frozen=True)
class RowSpec:
    """Where a file's cells are (header positions) and what its scores are."""

    key_column: str
    key_at: int
    kind: ScoreKind
    score_at: tuple[int | None, ...]  # per class; None: the complement of the other (two classes)
    score_columns: tuple[str | None, ...]
    patient_at: int | None = None
    label_at: int | None = None
    column_at: Mapping[str, int] = field(default_factory=dict)  # subgroup column -> position
    split_at: int | None = None  # a file sitecal wrote: its split rank column ...
    split_column: str = ""  # ... and that column's name

    @property
    def width(self) -> int:
        """Fields a row needs for every named cell (a shorter row's missing cells are empty)."""
        named = [self.key_at, self.patient_at, self.label_at, self.split_at, *self.score_at]
        return 1 + max([at for at in named if at is not None] + list(self.column_at.values()))


def scores(
    cells: Sequence[str], at: Sequence[int | None], columns: Sequence[str | None], kind: ScoreKind
) -> np.ndarray | str:
    """The row's logits, or why the row cannot be used."""
    values: list[float | None] = []
    for i, column in zip(at, columns, strict=True):
        if i is None:
            values.append(None)
            continue
        text = cells[i].strip() if i < len(cells) else ""
        value = ascii_float(text)
        if value is None:  # the reason names the column, never the cell
            return f"not a number in column {column}" if text else f"empty cell in column {column}"
        if not math.isfinite(value):
            return f"not a finite number in column {column}"
        if kind == "prob" and not 0.0 <= value <= 1.0:
            return f"probability outside [0, 1] in column {column}"
        values.append(value)
    if kind == "logit":
        return np.array(values, dtype=np.float64)
    given = sum(v for v in values if v is not None)
    probs = np.array([1.0 - given if v is None else v for v in values], dtype=np.float64)
    if abs(probs.sum() - 1.0) > SUM_TOLERANCE or probs.min() < -SUM_TOLERANCE:
        return f"probabilities sum to {given:.4g}, not 1 (tolerance {SUM_TOLERANCE:g})"
    return log_probabilities(probs)


def split_rank(text: str) -> int | None:
    """A split rank as written (a whole number >= 0), or None."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 15 else None


def _float(text: str) -> float:
    value = ascii_float(text)
    return math.nan if value is None else value  # not finite: the row is looked at alone


def _bulk_scores(rows: list[list[str]], spec: RowSpec) -> tuple[np.ndarray, np.ndarray]:
    """Every row's logits (rows that may be unusable: any values) and which rows to look at alone."""
    given: list[np.ndarray] = []
    for at in spec.score_at:
        if at is not None:
            cells = list(map(str.strip, map(itemgetter(at), rows)))
            joined = "".join(cells)
            try:
                # float() of ASCII text without "_" reads what ascii_float reads: the fast path
                if not joined.isascii() or "_" in joined:
                    raise ValueError
                parsed = list(map(float, cells))
            except ValueError:
                parsed = list(map(_float, cells))
            given.append(np.array(parsed, dtype=np.float64))
    n = len(rows)
    finite = np.ones(n, dtype=bool)
    for column in given:
        finite &= np.isfinite(column)
    if spec.kind == "logit":
        return np.stack(given, axis=1) if given else np.zeros((n, 0)), ~finite
    alone = ~finite
    # rows with a value that is not finite (inf - inf) or not in [0, 1] are looked at alone
    with np.errstate(invalid="ignore", over="ignore"):
        for column in given:
            alone |= (column < 0.0) | (column > 1.0)
        total = given[0]
        for column in given[1:]:
            total = total + column  # left to right, as a row's sum() of its given values
        it = iter(given)
        probs = np.stack([1.0 - total if at is None else next(it) for at in spec.score_at], axis=1)
        alone |= np.abs(probs.sum(axis=1) - 1.0) > SUM_TOLERANCE - _SUM_MARGIN
        alone |= probs.min(axis=1) < -SUM_TOLERANCE + _SUM_MARGIN
    logits = np.zeros(probs.shape)
    logits[~alone] = log_probabilities(probs[~alone])
    return logits, alone
