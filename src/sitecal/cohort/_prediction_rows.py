"""The usable rows of a predictions file, column by column: checked in bulk, kept once per key.

A file of a million studies must not become a million Python objects on its way to a cohort. Its rows
are taken a chunk at a time and each needed column at once: cells stripped, scores parsed with ``float``
(as a row at a time would, so the same float64 bit for bit) where they are ASCII numbers (``'٠.٥'``,
``'１'`` and ``'1_000'`` are not numbers here, :func:`~sitecal.cohort._cells.ascii_float`) and checked
with numpy; only a row that fails a check is looked at alone, for the reason it is listed with. Subgroup
and label cells repeat a few values, and each value is kept once. :class:`PredictionRows` shows the
result as the mapping of keys to :class:`PredictionRow` that
:class:`~sitecal.cohort.predictions_file.PredictionTable` has always had, making a row when it is asked
for.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Literal

import numpy as np

from sitecal.cohort._cells import ascii_float
from sitecal.metrics import log_probabilities

__all__ = [
    "DUPLICATE_REASON",
    "CollectedRows",
    "PredictionRow",
    "PredictionRows",
    "RowSpec",
    "UsableRows",
    "collect_rows",
    "paused_gc",
    "scores",
]

ScoreKind = Literal["logit", "prob"]

#: How far a row's probabilities may sum from 1 (rounding in the vendor's export), absolute.
SUM_TOLERANCE = 1e-3
#: Rows read and checked together. Results do not depend on it (tests read with chunks of a few rows).
CHUNK_ROWS = 1 << 15
# Rows whose sum lies this close to the tolerance are checked alone, as one row's scores always were.
_SUM_MARGIN = 1e-9
#: Why both rows of a key given twice with different cells are unusable.
DUPLICATE_REASON = "key given twice with different scores, patient, label or columns"


@dataclass(frozen=True)
class PredictionRow:
    """One usable row: where it is, its scores as logits, and the cells the protocol reads from it."""

    position: int  # CSV line or Parquet row
    key: str  # as written: in clear, or a sitecal pseudonym (PredictionTable.pseudonymised)
    logits: np.ndarray  # (C,) float64
    patient: str | None = None
    label: str | None = None
    columns: dict[str, str] = field(default_factory=dict)
    split_rank: int | None = None  # a file sitecal wrote: the study's rank in split-key order


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


@dataclass(frozen=True)
class UsableRows:
    """The usable rows, one per key, in the order of the file; column ``i`` of each list is row ``i``."""

    keys: list[str]
    positions: list[int]
    logits: np.ndarray  # (N, C) float64, read-only: each row's logits are a view of it
    patients: list[str | None] | None  # None: the file has no patient column
    labels: list[str] | None  # None: the label is not read from this file
    columns: dict[str, list[str]]  # subgroup column -> its cells
    split_ranks: list[int] | None  # a file sitecal wrote
    index: dict[str, int]  # key -> row

    def row(self, i: int) -> PredictionRow:
        """Row ``i`` as a :class:`PredictionRow`."""
        return PredictionRow(
            position=self.positions[i],
            key=self.keys[i],
            logits=self.logits[i],
            patient=None if self.patients is None else self.patients[i],
            label=None if self.labels is None else self.labels[i],
            columns={name: cells[i] for name, cells in self.columns.items()},
            split_rank=None if self.split_ranks is None else self.split_ranks[i],
        )


class PredictionRows(Mapping[str, PredictionRow]):
    """Key -> :class:`PredictionRow` over :class:`UsableRows`, in file order; each row made when asked for."""

    def __init__(self, usable: UsableRows) -> None:
        self._usable = usable

    def __getitem__(self, key: str) -> PredictionRow:
        return self._usable.row(self._usable.index[key])

    def __contains__(self, key: object) -> bool:
        return key in self._usable.index

    def __iter__(self) -> Iterator[str]:
        return iter(self._usable.keys)

    def __len__(self) -> int:
        return len(self._usable.keys)

    def __repr__(self) -> str:  # the keys are identifiers: never shown
        return f"PredictionRows({len(self)} rows)"


@dataclass(frozen=True)
class CollectedRows:
    """What :func:`collect_rows` found: the usable rows, the unusable ones, and the keys left without a row.

    ``unusable_keys`` maps each key that has rows but no usable one to the ``(position, reason)`` of the
    row that stands for it: its first unusable row, or for a key given twice with different cells, its
    first row (listed with the duplicate reason). A study joined on that key is then excluded once, for
    that reason, and that row is not listed again (:func:`sitecal.cohort._build.build_cohort`). Keys are
    identifiers: in memory only, never shown.
    """

    usable: UsableRows
    bad: list[tuple[int, str]]  # (position, reason) of every unusable row, in the order found
    unusable_keys: dict[str, tuple[int, str]] = field(repr=False)
    n_rows: int


def collect_rows(chunks: Iterable[tuple[Sequence[int], list[list[str]]]], spec: RowSpec) -> CollectedRows:
    """The usable rows of ``(positions, rows)`` chunks, the unusable ``(position, reason)`` and the row count.

    A row is unusable for the first of: an empty key, a score that is not usable (:func:`scores`), a split
    rank that is not a whole number >= 0, or a key given before with other scores, patient, label or
    columns; in the last case the key's first row is unusable too (listed after the others). A key given
    again with the same cells keeps its first row. Reasons are listed in the order of the rows. The keys
    that have rows but no usable one are kept with the row that stands for each (:class:`CollectedRows`).
    """
    acc = _Accumulator(spec)
    with paused_gc():
        for positions, rows in chunks:
            acc.add(list(positions), rows)
        return acc.finish()


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a million objects are built; restore it after.

    Each collection walks the objects built so far, so collections triggered by building N objects cost
    O(N²) together (a third of the time to read 10^6 rows). What is built here holds no reference cycle:
    reference counting frees all of it, and the collector, when it runs again, finds nothing of it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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


class _Accumulator:
    """The usable rows so far, column by column, and the unusable ones."""

    def __init__(self, spec: RowSpec) -> None:
        self.spec = spec
        self.keys: list[str] = []
        self.positions: list[int] = []
        self.logit_chunks: list[np.ndarray] = []
        self.chunk_starts: list[int] = []
        self.patients: list[str | None] | None = None if spec.patient_at is None else []
        self.labels: list[str] | None = None if spec.label_at is None else []
        self.columns: dict[str, list[str]] = {name: [] for name in spec.column_at}
        self.split_ranks: list[int] | None = None if spec.split_at is None else []
        self.index: dict[str, int] = {}  # key -> its first usable row
        self.bad: list[tuple[int, str]] = []
        # key -> (position, reason) of its first unusable row; only keys left without a usable row are kept
        self.unusable: dict[str, tuple[int, str]] = {}
        self.conflicting: set[str] = set()
        self.n_rows = 0
        self.shared: dict[str, dict[str, str]] = {}  # per column: each distinct cell, kept once

    def add(self, positions: list[int], rows: list[list[str]]) -> None:
        spec = self.spec
        self.n_rows += len(rows)
        width = spec.width
        if rows and min(map(len, rows)) < width:  # cells a short row lacks are empty
            for row in rows:
                if len(row) < width:
                    row.extend([""] * (width - len(row)))

        def column(at: int) -> list[str]:
            return list(map(str.strip, map(itemgetter(at), rows)))

        def shared(name: str, at: int) -> list[str]:
            cells = column(at)
            seen = self.shared.setdefault(name, {})
            return list(map(seen.setdefault, cells, cells))

        keys = column(spec.key_at)
        logits, alone = _bulk_scores(rows, spec)
        ranks = None if spec.split_at is None else list(map(split_rank, column(spec.split_at)))
        reasons: dict[int, str] = {}  # chunk row -> why it cannot be used
        suspects = set(np.flatnonzero(alone).tolist())
        if not all(keys):
            suspects.update(j for j, key in enumerate(keys) if not key)
        if ranks is not None and None in ranks:
            suspects.update(j for j, rank in enumerate(ranks) if rank is None)
        for j in sorted(suspects):
            reason = self._reason(rows[j], keys[j], ranks, j)
            if isinstance(reason, str):
                reasons[j] = reason
            else:
                logits[j] = reason
        patients = None if spec.patient_at is None else [p or None for p in column(spec.patient_at)]
        labels = None if spec.label_at is None else shared("\0label", spec.label_at)
        cells = {name: shared(name, at) for name, at in spec.column_at.items()}
        kept = self._first_of_each_key(positions, keys, logits, patients, labels, cells, ranks, reasons)
        if kept is None:  # every row of the chunk is kept
            self._extend(positions, keys, logits, patients, labels, cells, ranks)
            return
        self._extend(
            [positions[j] for j in kept],
            [keys[j] for j in kept],
            logits[kept],
            None if patients is None else [patients[j] for j in kept],
            None if labels is None else [labels[j] for j in kept],
            {name: [values[j] for j in kept] for name, values in cells.items()},
            None if ranks is None else [ranks[j] for j in kept],
        )

    def _reason(self, cells: list[str], key: str, ranks: list[int | None] | None, j: int) -> str | np.ndarray:
        """Why a row looked at alone cannot be used, or its logits when it can."""
        spec = self.spec
        if not key:
            return f"empty {spec.key_column}"
        logits = scores(cells, spec.score_at, spec.score_columns, spec.kind)
        if isinstance(logits, str):
            return logits
        if ranks is not None and ranks[j] is None:
            return f"{spec.split_column} is not a whole number >= 0"
        return logits

    def _first_of_each_key(
        self,
        positions: list[int],
        keys: list[str],
        logits: np.ndarray,
        patients: list[str | None] | None,
        labels: list[str] | None,
        cells: dict[str, list[str]],
        ranks: list[int | None] | None,
        reasons: dict[int, str],
    ) -> list[int] | None:
        """Chunk rows to keep (None: all); the others' reasons go to ``bad``, in row order."""
        base = len(self.keys)
        if not reasons:
            new = dict(zip(keys, range(base, base + len(keys)), strict=True))
            if len(new) == len(keys) and self.index.keys().isdisjoint(new):
                self.index.update(new)
                return None
        kept: list[int] = []

        def values(i: int) -> tuple[object, ...]:
            """What must agree between two rows of one key (the logits: equal as numbers)."""
            if i >= base:
                j = kept[i - base]
                return (
                    logits[j],
                    None if patients is None else patients[j],
                    None if labels is None else labels[j],
                    tuple(c[j] for c in cells.values()),
                )
            return self._stored(i)

        for j, key in enumerate(keys):
            reason = reasons.get(j)
            if reason is None:
                first = self.index.get(key)
                if first is None:
                    self.index[key] = base + len(kept)
                    kept.append(j)
                    continue
                here = (
                    logits[j],
                    None if patients is None else patients[j],
                    None if labels is None else labels[j],
                    tuple(c[j] for c in cells.values()),
                )
                if _same(values(first), here):
                    continue
                self.conflicting.add(key)
                reason = DUPLICATE_REASON
            self.bad.append((positions[j], reason))
            if key:
                self.unusable.setdefault(key, (positions[j], reason))
        return kept

    def _stored(self, i: int) -> tuple[object, ...]:
        chunk = bisect.bisect_right(self.chunk_starts, i) - 1
        return (
            self.logit_chunks[chunk][i - self.chunk_starts[chunk]],
            None if self.patients is None else self.patients[i],
            None if self.labels is None else self.labels[i],
            tuple(c[i] for c in self.columns.values()),
        )

    def _extend(
        self,
        positions: list[int],
        keys: list[str],
        logits: np.ndarray,
        patients: list[str | None] | None,
        labels: list[str] | None,
        cells: dict[str, list[str]],
        ranks: list[int | None] | None,
    ) -> None:
        if not keys:
            return
        self.chunk_starts.append(len(self.keys))
        self.logit_chunks.append(logits)
        self.positions += positions
        self.keys += keys
        if self.patients is not None and patients is not None:
            self.patients += patients
        if self.labels is not None and labels is not None:
            self.labels += labels
        for name, values in cells.items():
            self.columns[name] += values
        if self.split_ranks is not None and ranks is not None:
            self.split_ranks += ranks  # type: ignore[arg-type]  # usable rows have a rank

    def finish(self) -> CollectedRows:
        n_classes = len(self.spec.score_at)
        logits = np.concatenate(self.logit_chunks) if self.logit_chunks else np.zeros((0, n_classes))
        keep = None
        if self.conflicting:
            firsts = [(self.positions[self.index[key]], key) for key in self.conflicting]
            self.bad += [(position, DUPLICATE_REASON) for position, _ in firsts]
            # a key given twice with different cells has no usable row because of the duplicate: its first
            # row stands for it (an unusable row of it before that one has its own reason, and is listed)
            self.unusable.update((key, (position, DUPLICATE_REASON)) for position, key in firsts)
            keep = [key not in self.conflicting for key in self.keys]
        usable = UsableRows(
            keys=_kept(self.keys, keep),
            positions=_kept(self.positions, keep),
            logits=logits if keep is None else logits[np.array(keep, dtype=bool)],
            patients=None if self.patients is None else _kept(self.patients, keep),
            labels=None if self.labels is None else _kept(self.labels, keep),
            columns={name: _kept(values, keep) for name, values in self.columns.items()},
            split_ranks=None if self.split_ranks is None else _kept(self.split_ranks, keep),
            index=self.index,
        )
        if keep is not None:
            usable.index.clear()
            usable.index.update(zip(usable.keys, range(len(usable.keys)), strict=True))
        usable.logits.flags.writeable = False
        left = {key: row for key, row in self.unusable.items() if key not in usable.index}
        return CollectedRows(usable=usable, bad=self.bad, unusable_keys=left, n_rows=self.n_rows)


def _kept(values: list, keep: list[bool] | None) -> list:  # type: ignore[type-arg]
    if keep is None:
        return values
    return [v for v, k in zip(values, keep, strict=True) if k]


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return bool(np.array_equal(a[0], b[0])) and a[1:] == b[1:]  # type: ignore[arg-type]
