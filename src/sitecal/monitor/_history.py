"""A monitoring history that lasts: every window's results in a database.

After go-live, ``sitecal monitor`` cuts scores into windows (ISO weeks, months or quarters) and computes,
for each window and each group, a result. The history keeps them: a SQLite file in the monitoring folder,
or a PostgreSQL database for a network. Run again on overlapping data, monitor asks the history which
windows are new, which changed (their input's sha256 differs: labels arrived late, say) and which are
unchanged (their stored result is reused, so old windows keep their numbers), and writes the new and
changed ones in one transaction.

A history belongs to one baseline (the validation run's document ID) and one window kind, fixed when it
is created; opening it with another is refused. It holds aggregates only (numbers per window and group),
never a study or a patient. Everything read from the database is bounded (file size, rows, a result's
size) and checked; a database of another schema version or layout is refused and left as it is.

Example
-------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> with History.open(folder / "history.sqlite", baseline_id="run-1", window_kind="month") as history:
...     entry = WindowEntry("2027-03", "scanner", "GE Signa", "0" * 64, False, {"n": 120, "ece": 0.031})
...     history.plan([("2027-03", "scanner", "GE Signa", "0" * 64)]).new
...     history.write([entry])
...     history.entries() == [entry]
(WindowKey(window='2027-03', attribute='scanner', group='GE Signa'),)
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from sitecal import __version__
from sitecal.monitor._history_open import SCHEMA_VERSION, check_belongs, create_history, read_meta
from sitecal.monitor._history_sql import WINDOW_COLUMNS, WINDOWS, Store, open_store
from sitecal.monitor._history_values import (
    MAX_NAME_CHARS,
    MAX_RESULT_BYTES,
    HistoryError,
    check_kind,
    check_name,
    check_sha256,
    check_window,
    dump_result,
    key_label,
    load_result,
    shown,
    utc_now,
)

_utc_now = utc_now  # the time a row is written (UTC)

__all__ = [
    "MAX_HISTORY_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ROWS",
    "SCHEMA_VERSION",
    "History",
    "HistoryError",
    "Plan",
    "WindowEntry",
    "WindowKey",
]

#: The most window rows a history may hold.
MAX_ROWS = 1_000_000
#: The most bytes of results a history may hold (for a SQLite file, also its size limit).
MAX_HISTORY_BYTES = 2 * 1024**3
_MAX_STAMP_CHARS = 64
_KEY_COLUMNS = "window_label, attribute, group_name"
_BY_KEY = "window_label = ? AND attribute = ? AND group_name = ?"


class WindowKey(NamedTuple):
    """Which window's result: the window label, the subgroup attribute and the group."""

    window: str
    attribute: str
    group: str


@dataclass(frozen=True)
class WindowEntry:
    """One window's result for one group, as the history stores it.

    Parameters
    ----------
    window : str
        The window label: ``"2027-03"`` (month), ``"2027-W09"`` (ISO week) or ``"2027-Q1"`` (quarter).
    attribute : str
        The subgroup attribute (``"scanner"``), or ``"overall"``.
    group : str
        The group (``"GE Signa"``), or ``"All studies"``.
    data_sha256 : str
        sha256 of the window's input rows for this group (keys, scores, labels), 64 lower-case hex digits:
        a different hash means the window changed (labels arrived late) and is computed again.
    labelled : bool
        Whether labels were present (a window without them has the label-free part of the result only).
    result : Mapping
        The result: plain JSON (dicts with text keys, lists, texts, finite numbers, booleans, None), at
        most ``MAX_RESULT_BYTES`` as canonical JSON. Read back, tuples are lists and numbers are equal.
    written_utc, sitecal_version : str or None
        When (UTC, ``2027-04-02T06:00:00Z``) and by which sitecal the stored entry was written; set by the
        history on read, ignored on write and in comparisons.
    """

    window: str
    attribute: str
    group: str
    data_sha256: str
    labelled: bool
    result: Mapping[str, Any]
    written_utc: str | None = field(default=None, compare=False)
    sitecal_version: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.window, str):
            raise HistoryError(f"The window must be a text such as '2027-03'. Got {shown(self.window)}.")
        check_name(self.attribute, what="attribute")
        check_name(self.group, what="group")
        check_sha256(self.data_sha256)
        if not isinstance(self.labelled, bool):
            raise HistoryError(f"labelled must be True or False. Got {shown(self.labelled)}.")
        if not isinstance(self.result, Mapping):
            raise HistoryError(f"The result must be a mapping. Got a {type(self.result).__name__}.")

    @property
    def key(self) -> WindowKey:
        """(window, attribute, group)."""
        return WindowKey(self.window, self.attribute, self.group)


@dataclass(frozen=True)
class Plan:
    """What to do with the windows of a run, against the history (each tuple sorted).

    Attributes
    ----------
    new : tuple of WindowKey
        Not in the history: compute and write.
    changed : tuple of WindowKey
        In the history with another ``data_sha256`` (late labels, corrected data): compute and write again.
    unchanged : tuple of WindowKey
        In the history with the same ``data_sha256``: reuse the stored result.
    kept : tuple of WindowKey
        In the history but not among this run's windows: kept as they are.
    """

    new: tuple[WindowKey, ...]
    changed: tuple[WindowKey, ...]
    unchanged: tuple[WindowKey, ...]
    kept: tuple[WindowKey, ...]

    @property
    def to_compute(self) -> tuple[WindowKey, ...]:
        """The new and the changed windows, sorted."""
        return tuple(sorted(self.new + self.changed))


class History:
    """The stored windows of one baseline, in a SQLite file or a PostgreSQL database.

    Open it with :meth:`History.open`; use it as a context manager (or call :meth:`close`).
    """

    def __init__(self, store: Store, meta: Mapping[str, str]) -> None:
        self._store: Store | None = store
        self.where = store.where  #: the database as messages show it (a path, a URL without password)
        self.baseline_id = meta["baseline_id"]  #: the validation run this history follows
        self.window_kind = meta["window_kind"]  #: 'week', 'month' or 'quarter'
        self.created_utc = meta["created_utc"]  #: when the history was created (UTC)

    @classmethod
    def open(
        cls,
        where: str | Path,
        *,
        baseline_id: str,
        window_kind: str,
        create: bool = True,
        password_file: str | Path | None = None,
        lock_timeout_s: float = 5.0,
    ) -> History:
        """Open (or create) the history at ``where``.

        Parameters
        ----------
        where : str or Path
            A SQLite file (created if absent and ``create``), or a ``postgresql://user@host:port/db`` URL
            (its tables are created in the current schema if absent and ``create``). A URL never holds the
            password: it comes from ``password_file``, or from libpq (``PGPASSFILE``, ``PGPASSWORD``).
        baseline_id : str
            The validation run's document ID; a history follows one baseline.
        window_kind : {'week', 'month', 'quarter'}
            How time is cut; fixed when the history is created.
        create : bool, default True
            Create the history if there is none; otherwise a missing one is an error.
        password_file : str or Path, optional
            A file holding the PostgreSQL password on one line.
        lock_timeout_s : float, default 5.0
            How long to wait for another process's lock before giving up with an error.

        Raises
        ------
        HistoryError
            Not a history (another file or layout), another schema version, baseline or window kind, a
            database over a limit, locked, or unreachable. Nothing of the database is changed.
        """
        kind = check_kind(window_kind)
        baseline = check_name(baseline_id, what="baseline id")
        if not (isinstance(lock_timeout_s, int | float) and 0 < lock_timeout_s <= 600):
            raise HistoryError(
                f"lock_timeout_s must be a number of seconds in (0, 600]. Got {shown(lock_timeout_s)}."
            )
        store = open_store(
            where, create=create, lock_timeout_s=float(lock_timeout_s), password_file=password_file
        )
        try:
            try:
                store.begin_read()
                meta = read_meta(store)
            finally:
                store.rollback()
            if meta is None:
                if not create:
                    raise HistoryError(f"There is no monitoring history in {store.where}: check where it is.")
                meta = create_history(store, baseline_id=baseline, window_kind=kind)
            check_belongs(store.where, meta, baseline_id=baseline, window_kind=kind)
        except BaseException:
            store.close()
            raise
        return cls(store, meta)

    def __repr__(self) -> str:
        return f"History({self.where!r}, baseline_id={self.baseline_id!r}, window_kind={self.window_kind!r})"

    def __enter__(self) -> History:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (closing twice is harmless)."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def _open_store(self) -> Store:
        if self._store is None:
            raise HistoryError(f"The monitoring history {self.where} is closed: open it again.")
        return self._store

    def entries(self) -> list[WindowEntry]:
        """Every stored entry, sorted by (window, attribute, group)."""
        return self._read("", ())

    def entry(self, window: str, attribute: str, group: str) -> WindowEntry | None:
        """The stored entry of one window and group, or None."""
        key = self._check_key((window, attribute, group))
        found = self._read(f"WHERE {_BY_KEY}", key)
        return found[0] if found else None

    def plan(self, incoming: Sequence[tuple[str, str, str, str]]) -> Plan:
        """Sort a run's windows, given as (window, attribute, group, data_sha256), against the history."""
        hashes: dict[WindowKey, str] = {}
        for item in incoming:
            if not (isinstance(item, tuple | list) and len(item) == 4):
                raise HistoryError(
                    "Each incoming window must be (window, attribute, group, data_sha256). "
                    f"Got {shown(item)}."
                )
            key = self._check_key(item[:3])
            if key in hashes:
                raise HistoryError(f"The incoming windows name {key_label(key)} twice.")
            hashes[key] = check_sha256(item[3])
        stored = {
            WindowKey(*self._checked_key(row[:3])): row[3]
            for row in self._select(f"{_KEY_COLUMNS}, data_sha256", "", ())
        }
        new = sorted(k for k in hashes if k not in stored)
        changed = sorted(k for k in hashes if k in stored and stored[k] != hashes[k])
        unchanged = sorted(k for k in hashes if k in stored and stored[k] == hashes[k])
        kept = sorted(k for k in stored if k not in hashes)
        return Plan(tuple(new), tuple(changed), tuple(unchanged), tuple(kept))

    def write(self, entries: Sequence[WindowEntry]) -> None:
        """Store ``entries`` in one transaction: all or nothing.

        A new window is added; a stored one is replaced where anything differs (its hash, labels or
        result), and left as it is (with its time and version) where nothing does, so writing the same
        entries again changes no byte. Each written row records when (UTC) and by which sitecal.
        """
        rows: list[tuple[Any, ...]] = []
        seen: set[WindowKey] = set()
        stamp, version = _utc_now(), str(__version__)
        for entry in entries:
            if not isinstance(entry, WindowEntry):
                raise HistoryError(f"write takes WindowEntry objects. Got a {type(entry).__name__}.")
            key = self._check_key(entry.key)
            if key in seen:
                raise HistoryError(f"The entries to write name {key_label(key)} twice.")
            seen.add(key)
            text = dump_result(entry.result, label=key_label(key))
            rows.append((*key, entry.data_sha256, int(entry.labelled), text, stamp, version))
        if not rows:
            return
        store = self._open_store()
        try:
            store.begin_write(creating=False)
            for row in rows:
                same = store.rows(
                    f"SELECT 1 FROM {WINDOWS} WHERE {_BY_KEY} "
                    "AND data_sha256 = ? AND labelled = ? AND result = ?",
                    row[:6],
                    limit=1,
                )
                if not same:
                    store.upsert(row)
            count = store.rows(f"SELECT COUNT(*) FROM {WINDOWS}", limit=1)[0][0]
            if count > MAX_ROWS:
                raise HistoryError(
                    f"The monitoring history {self.where} would hold {count} windows, over the limit of "
                    f"{MAX_ROWS}: nothing was written. Start a new monitoring folder (or database)."
                )
            store.commit()
        except BaseException:
            store.rollback()
            raise

    # -- reading, bounded -------------------------------------------------------------------------------

    def _check_key(self, key: Sequence[Any]) -> WindowKey:
        window, attribute, group = key
        return WindowKey(
            check_window(window, self.window_kind),
            check_name(attribute, what="attribute"),
            check_name(group, what="group"),
        )

    def _checked_key(self, key: Sequence[Any]) -> WindowKey:
        """A stored key, checked as one to write would be."""
        try:
            return self._check_key(key)
        except HistoryError as exc:
            raise self._foreign_row(key, exc) from None

    def _foreign_row(self, key: Sequence[Any], exc: HistoryError) -> HistoryError:
        return HistoryError(
            f"The monitoring history {self.where} holds a row sitecal did not write "
            f"({key_label(key)}): {exc} Restore the history from a backup, or start a new monitoring "
            "folder (or database)."
        )

    def _select(self, columns: str, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Rows of the windows table, after checking in SQL that they fit the bounds (nothing big is read)."""
        store = self._open_store()
        try:
            store.begin_read()
            count, total = store.rows(
                f"SELECT COUNT(*), COALESCE(SUM(length(result)), 0) FROM {WINDOWS} {where}", params, limit=1
            )[0]
            if count > MAX_ROWS or total > MAX_HISTORY_BYTES:
                raise HistoryError(
                    f"The monitoring history {self.where} holds {count} windows with {total} bytes of "
                    f"results, over the limits of {MAX_ROWS} windows and {MAX_HISTORY_BYTES} bytes: it is "
                    "not a history sitecal wrote. Start a new monitoring folder (or database)."
                )
            too_big = (
                f"length(result) > {MAX_RESULT_BYTES} OR length(window_label) > 8 "
                f"OR length(attribute) > {MAX_NAME_CHARS} OR length(group_name) > {MAX_NAME_CHARS} "
                f"OR length(data_sha256) <> 64 OR length(written_utc) > {_MAX_STAMP_CHARS} "
                f"OR length(sitecal_version) > {_MAX_STAMP_CHARS}"
            )
            joined = f"{where} AND ({too_big})" if where else f"WHERE {too_big}"
            bad = store.rows(f"SELECT substr(window_label, 1, 20) FROM {WINDOWS} {joined}", params, limit=1)
            if bad:
                raise HistoryError(
                    f"The monitoring history {self.where} holds a row over the size limits (window "
                    f"{shown(bad[0][0])}): it is not a history sitecal wrote. Restore it from a backup, or "
                    "start a new monitoring folder (or database)."
                )
            return store.rows(f"SELECT {columns} FROM {WINDOWS} {where}", params, limit=MAX_ROWS)
        finally:
            store.rollback()

    def _read(self, where: str, params: Sequence[Any]) -> list[WindowEntry]:
        found = [self._entry(row) for row in self._select(", ".join(WINDOW_COLUMNS), where, params)]
        return sorted(found, key=lambda e: e.key)

    def _entry(self, row: Sequence[Any]) -> WindowEntry:
        key = self._checked_key(row[:3])
        sha, labelled, text, stamp, version = row[3:]
        try:
            if type(labelled) is not int or labelled not in (0, 1):
                raise HistoryError(f"labelled is {shown(labelled)}, not 0 or 1.")
            if not (isinstance(stamp, str) and isinstance(version, str)):
                raise HistoryError("its time or version is not a text.")
            return WindowEntry(
                *key,
                data_sha256=check_sha256(sha),
                labelled=bool(labelled),
                result=load_result(text, label=key_label(key)),
                written_utc=stamp,
                sitecal_version=version,
            )
        except HistoryError as exc:
            raise self._foreign_row(key, exc) from None
