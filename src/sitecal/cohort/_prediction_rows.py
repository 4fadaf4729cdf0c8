"""The usable rows of a predictions file, column by column: checked in bulk, kept once per key.

A file of a million studies must not become a million Python objects on its way to a cohort. Its rows
are taken a chunk at a time and each needed column at once: cells stripped, scores parsed with ``float``
(as a row at a time would, so the same float64 bit for bit) where they are ASCII numbers (``'٠.٥'``,
``'１'`` and ``'1_000'`` are not numbers here, :func:`~sitecal.cohort._cells.ascii_float`) and checked
with numpy; only a row that fails a check is looked at alone, for the reason it is listed with. Subgroup
and label cells repeat a few values, and each value is kept once. :class:`PredictionRows` shows the
result as the mapping of keys to :class:`PredictionRow` that
:class:`~sitecal.cohort.predictions_file.PredictionTable` has always had, making a row when it is asked
for. Where a row's cells are and how its scores are read: :mod:`sitecal.cohort._score_cells`.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from sitecal.cohort._score_cells import SUM_TOLERANCE, RowSpec, ScoreKind, _bulk_scores, scores, split_rank

__all__ = [
    "DUPLICATE_REASON",
    "SUM_TOLERANCE",
    "CollectedRows",
    "PredictionRow",
    "PredictionRows",
    "RowSpec",
    "ScoreKind",
    "UsableRows",
    "collect_rows",
    "paused_gc",
    "scores",
]

#: Rows read and checked together. Results do not depend on it (tests read with chunks of a few rows).
CHUNK_ROWS = 1 << 15
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
