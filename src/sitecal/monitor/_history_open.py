"""Opening a monitoring history: what a database must hold to be one this sitecal reads, and creating one.

A history's meta table holds its schema version, its baseline (the validation run's document ID), its
window kind, when it was created and by which sitecal. A database of another schema version, or with
tables named like a history's but another layout, is refused and left as it is: a history is never
converted silently.
"""

from __future__ import annotations

from collections.abc import Mapping

from sitecal import __version__
from sitecal.monitor._history_sql import CREATE_TABLES, META, META_COLUMNS, WINDOW_COLUMNS, WINDOWS, Store
from sitecal.monitor._history_values import HistoryError, shown, utc_now

__all__ = ["SCHEMA_VERSION", "check_belongs", "create_history", "read_meta"]

#: The layout of a history's tables; a history of another version is refused, never converted silently.
SCHEMA_VERSION = 1
_MAX_META_CHARS = 1024


def read_meta(store: Store) -> dict[str, str] | None:
    """The meta of the history in ``store``, None if it holds none; raise if it is not one this reads."""
    ours, foreign = store.tables()
    if store.exclusive and foreign:
        listed = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise HistoryError(
            f"The file {store.where} is not a sitecal monitoring history (it holds {listed}); nothing in it "
            "was changed. Name a monitoring folder's history, or a new file."
        )
    if not ours:
        return None
    if ours != {META, WINDOWS} or store.columns(META) != set(META_COLUMNS):
        raise _layout(store, f"the tables {sorted(ours)}")
    rows = store.rows(f"SELECT key, value FROM {META}", limit=100)
    if len(rows) > 100 or not all(
        isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= _MAX_META_CHARS
        for k, v in rows
    ):
        raise _layout(store, f"the rows of {META}")
    meta = dict(rows)
    version = meta.get("schema_version", "")
    if not (version.isascii() and version.isdigit() and len(version) <= 6):
        raise _layout(store, f"schema_version {shown(version)}")
    if int(version) != SCHEMA_VERSION:
        writer = shown(meta.get("created_by", "unknown"))
        what = (
            "Upgrade sitecal to read it"
            if int(version) > SCHEMA_VERSION
            else "Run the sitecal that wrote it, or start a new monitoring folder (or database)"
        )
        raise HistoryError(
            f"The monitoring history {store.where} has schema version {int(version)} (written by sitecal "
            f"{writer}); this sitecal ({__version__}) reads version {SCHEMA_VERSION} and never converts a "
            f"history silently. {what}. Nothing in it was changed."
        )
    if store.columns(WINDOWS) != set(WINDOW_COLUMNS):
        raise _layout(store, f"the columns of {WINDOWS}")
    missing = [k for k in ("baseline_id", "window_kind", "created_utc") if k not in meta]
    if missing:
        raise _layout(store, f"no {', '.join(missing)} in {META}")
    return meta


def _layout(store: Store, detail: str) -> HistoryError:
    return HistoryError(
        f"The database {store.where} has tables named like a sitecal monitoring history but not its layout "
        f"({detail}): this sitecal cannot read it, and nothing in it was changed. Name another file (or "
        "database), or start a new monitoring folder."
    )


def create_history(store: Store, *, baseline_id: str, window_kind: str) -> dict[str, str]:
    """Create the history's tables and meta in one transaction (another process may have just done it)."""
    try:
        store.begin_write(creating=True)
        meta = read_meta(store)
        if meta is None:
            for statement in CREATE_TABLES:
                store.execute(statement)
            meta = {
                "schema_version": str(SCHEMA_VERSION),
                "baseline_id": baseline_id,
                "window_kind": window_kind,
                "created_utc": utc_now(),
                "created_by": str(__version__),
            }
            for item in sorted(meta.items()):
                store.execute(f"INSERT INTO {META} (key, value) VALUES (?, ?)", item)
        store.commit()
    except BaseException:
        store.rollback()
        raise
    return meta


def check_belongs(where: str, meta: Mapping[str, str], *, baseline_id: str, window_kind: str) -> None:
    if meta["baseline_id"] != baseline_id:
        raise HistoryError(
            f"The monitoring history {where} belongs to the baseline {shown(meta['baseline_id'])}, not "
            f"{shown(baseline_id)}: a history follows one validation run. Use a new monitoring folder (or "
            "database) for the new baseline."
        )
    if meta["window_kind"] != window_kind:
        raise HistoryError(
            f"The monitoring history {where} holds {shown(meta['window_kind'])} windows, not "
            f"{window_kind!r}: monitor by {shown(meta['window_kind'])} as before, or use a new monitoring "
            f"folder (or database) for {window_kind} windows."
        )
