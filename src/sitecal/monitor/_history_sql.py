"""The two databases a monitoring history lives in: a SQLite file and a PostgreSQL database.

Both run the same SQL (``?`` placeholders, ``INSERT ... ON CONFLICT``, ``TEXT`` and ``INTEGER`` columns).
What differs is here and only here: opening (and what refuses a file or a URL before it is opened),
finding the tables and their columns, taking the write lock, and reading the driver's errors as a
:class:`HistoryError` that names the database (a URL without its password) and what to do.

SQLite is the standard library's ``sqlite3``; PostgreSQL is ``psycopg`` 3, imported only for a
``postgresql://`` URL.
"""

from __future__ import annotations

import abc
import re
import sqlite3
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sitecal.monitor._history_values import HistoryError, shown

__all__ = [
    "CREATE_TABLES",
    "MAX_DATABASE_BYTES",
    "META",
    "META_COLUMNS",
    "WINDOWS",
    "WINDOW_COLUMNS",
    "Store",
    "open_store",
    "redact",
]

META = "sitecal_monitor_meta"
WINDOWS = "sitecal_monitor_window"
META_COLUMNS = ("key", "value")
WINDOW_COLUMNS = (
    "window_label",
    "attribute",
    "group_name",
    "data_sha256",
    "labelled",
    "result",
    "written_utc",
    "sitecal_version",
)
CREATE_TABLES = (
    f"CREATE TABLE {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"CREATE TABLE {WINDOWS} (window_label TEXT NOT NULL, attribute TEXT NOT NULL, group_name TEXT NOT NULL, "
    "data_sha256 TEXT NOT NULL, labelled INTEGER NOT NULL, result TEXT NOT NULL, written_utc TEXT NOT NULL, "
    "sitecal_version TEXT NOT NULL, PRIMARY KEY (window_label, attribute, group_name))",
)
_UPSERT = (
    f"INSERT INTO {WINDOWS} ({', '.join(WINDOW_COLUMNS)}) VALUES ({', '.join('?' * len(WINDOW_COLUMNS))}) "
    "ON CONFLICT (window_label, attribute, group_name) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in WINDOW_COLUMNS[3:])
)
#: The largest SQLite file a history may be (checked before opening; the file cannot grow past it).
MAX_DATABASE_BYTES = 2 * 1024**3
_SQLITE_HEADER = b"SQLite format 3\x00"
_MAX_OBJECTS = 1000  # schema entries read from a SQLite file before it is judged foreign
_MAX_PASSWORD_BYTES = 4096
_PG_LOCK_KEY = 7_301_972_845  # the advisory lock held while a PostgreSQL history is created
_SCHEMES = ("postgresql://", "postgres://")


def redact(text: str) -> str:
    """``text`` with any password of a database URL or connection string replaced by ``***``."""
    text = re.sub(r"(://[^/@\s:]*:)\S*@", r"\1***@", text)
    return re.sub(r"(password\s*=\s*)('[^']*'|[^&\s]*)", r"\1***", text, flags=re.IGNORECASE)


def _locked(where: str) -> HistoryError:
    return HistoryError(
        f"The monitoring history {where} is locked: another sitecal monitor is running on it? "
        "Wait and run again. Nothing was written."
    )


class Store(abc.ABC):
    """One open connection to a history's database, with its dialect's few differences."""

    #: the database as messages show it (a SQLite path, a URL without password)
    where: str
    #: whether a table other than a history's makes the database foreign (a SQLite file: yes)
    exclusive: bool

    @abc.abstractmethod
    def _run(self, sql: str, params: Sequence[Any]) -> Any:
        """Execute ``sql`` (``?`` placeholders) and return the driver's cursor."""

    @abc.abstractmethod
    def _translate(self, exc: Exception) -> HistoryError | None:
        """The error to raise for a driver error (None: not a driver error)."""

    @abc.abstractmethod
    def begin_read(self) -> None:
        """Start a transaction that sees one state of the database."""

    @abc.abstractmethod
    def begin_write(self, *, creating: bool) -> None:
        """Start a transaction holding the history's write lock (or fail with 'locked')."""

    @abc.abstractmethod
    def tables(self) -> tuple[set[str], list[str]]:
        """(the history's tables present, names of other objects that make the database foreign)."""

    @abc.abstractmethod
    def columns(self, table: str) -> set[str]:
        """The column names of ``table``."""

    @abc.abstractmethod
    def _close(self) -> None: ...

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Raise a driver's error as a :class:`HistoryError` naming this database."""
        try:
            yield
        except HistoryError:
            raise
        except Exception as exc:
            error = self._translate(exc)
            if error is None:
                raise
            raise error from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement that returns no rows."""
        with self.translated():
            self._run(sql, params)

    def rows(self, sql: str, params: Sequence[Any] = (), *, limit: int) -> list[tuple[Any, ...]]:
        """At most ``limit`` + 1 rows of a query (one more than allowed shows that there are too many)."""
        with self.translated():
            return [tuple(r) for r in self._run(sql, params).fetchmany(limit + 1)]

    def upsert(self, row: Sequence[Any]) -> None:
        """Insert or replace one window's row (``WINDOW_COLUMNS`` order)."""
        self.execute(_UPSERT, row)

    def commit(self) -> None:
        """End the transaction, keeping what it wrote."""
        self.execute("COMMIT")

    def rollback(self) -> None:
        """End the transaction, dropping what it wrote (quietly: it runs while another error is raised)."""
        try:
            self._run("ROLLBACK", ())
        except Exception:  # no transaction open, or the connection is gone: nothing was kept
            pass

    def close(self) -> None:
        """Close the connection (an open transaction is dropped)."""
        try:
            self._close()
        except Exception:  # closing a broken connection has nothing left to lose
            pass


class _SQLite(Store):
    exclusive = True

    def __init__(self, path: Path, *, create: bool, lock_timeout_s: float) -> None:
        self.where = str(path)
        self._path = path
        if path.exists() or path.is_symlink():
            if not path.is_file():
                raise HistoryError(f"The monitoring history {path} is not a file: name a SQLite file.")
            size = path.stat().st_size
            if size > MAX_DATABASE_BYTES:
                raise HistoryError(
                    f"The monitoring history {path} is {size} bytes, over the limit of {MAX_DATABASE_BYTES}: "
                    "it is not a history sitecal wrote; start a new monitoring folder."
                )
            with path.open("rb") as f:
                head = f.read(len(_SQLITE_HEADER))
            if size and head != _SQLITE_HEADER:
                raise HistoryError(
                    f"The monitoring history {path} is not a SQLite database: name the history.sqlite of a "
                    "monitoring folder, or a new file."
                )
        elif not create:
            raise HistoryError(f"There is no monitoring history at {path}: check the path.")
        elif not path.parent.is_dir():
            raise HistoryError(
                f"The folder of the monitoring history {path} does not exist: create it first."
            )
        uri = "file:" + urllib.parse.quote(str(path.absolute())) + ("?mode=rwc" if create else "?mode=rw")
        try:
            self._conn = sqlite3.connect(uri, uri=True, timeout=lock_timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._translate(exc) or exc from None
        with self.translated():
            # A history never runs what a file's schema defines (views, triggers) and never grows past its
            # size limit; a file that has other objects than a history's is refused before any write.
            self._conn.execute("PRAGMA trusted_schema = OFF")
            page = self._conn.execute("PRAGMA page_size").fetchone()[0]
            self._conn.execute(f"PRAGMA max_page_count = {MAX_DATABASE_BYTES // int(page)}")

    def _run(self, sql: str, params: Sequence[Any]) -> Any:
        return self._conn.execute(sql, tuple(params))

    def _translate(self, exc: Exception) -> HistoryError | None:
        if not isinstance(exc, sqlite3.Error):
            return None
        code = getattr(exc, "sqlite_errorcode", None)
        base = None if code is None else code & 0xFF
        if base in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return _locked(self.where)
        if base in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return HistoryError(
                f"The monitoring history {self.where} is not a SQLite database or is damaged ({exc}): "
                "restore it from a backup, or start a new monitoring folder."
            )
        if base == sqlite3.SQLITE_FULL:
            return HistoryError(
                f"The monitoring history {self.where} cannot grow: the disk is full or the file reached "
                f"its limit of {MAX_DATABASE_BYTES} bytes. Nothing was written."
            )
        if base in (
            sqlite3.SQLITE_CANTOPEN,
            sqlite3.SQLITE_READONLY,
            sqlite3.SQLITE_PERM,
            sqlite3.SQLITE_IOERR,
        ):
            return HistoryError(
                f"The monitoring history {self.where} cannot be opened or written ({exc}): check that the "
                "folder and the file are writable."
            )
        return HistoryError(f"The monitoring history {self.where} cannot be used: {exc}.")

    def begin_read(self) -> None:
        self.execute("BEGIN")

    def begin_write(self, *, creating: bool) -> None:
        self.execute("BEGIN IMMEDIATE")

    def tables(self) -> tuple[set[str], list[str]]:
        autoindexes = {f"sqlite_autoindex_{t}_1" for t in (META, WINDOWS)}
        ours: set[str] = set()
        foreign: list[str] = []
        found = self.rows("SELECT type, name FROM sqlite_master", limit=_MAX_OBJECTS)
        for kind, name in found:
            if kind == "table" and name in (META, WINDOWS):
                ours.add(name)
            elif not (kind == "index" and name in autoindexes):
                foreign.append(shown(name))
        return ours, sorted(foreign)

    def columns(self, table: str) -> set[str]:
        return {str(r[0]) for r in self.rows("SELECT name FROM pragma_table_info(?)", (table,), limit=100)}

    def _close(self) -> None:
        self._conn.close()


class _PostgreSQL(Store):
    exclusive = False

    def __init__(self, url: str, *, password_file: Path | None, lock_timeout_s: float) -> None:
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict, make_conninfo
        except ImportError:
            raise HistoryError(
                "A monitoring history in PostgreSQL needs the psycopg driver: "
                "pip install 'sitecal[postgres]'."
            ) from None
        self._psycopg = psycopg
        self.where = redact(url)
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            raise HistoryError(
                f"The database URL {redact(url)} is not a PostgreSQL URL: write "
                "postgresql://user@host:port/database."
            ) from None
        self.where = "postgresql://{}{}{}/{}".format(
            f"{params['user']}@" if params.get("user") else "",
            params.get("host") or params.get("hostaddr") or "",
            f":{params['port']}" if params.get("port") else "",
            params.get("dbname") or "",
        )
        if params.get("password"):
            raise HistoryError(
                f"The database URL {self.where} holds a password: sitecal never takes one from a URL (it "
                "would show in logs and process lists). Put it in a file and pass that file as the password "
                "file, or use a libpq password file (PGPASSFILE)."
            )
        self._password = None if password_file is None else _read_password(password_file)
        if self._password is not None:
            params["password"] = self._password
        options = f"-c lock_timeout={max(1, round(lock_timeout_s * 1000))}"
        params["options"] = f"{params['options']} {options}" if params.get("options") else options
        params.setdefault("connect_timeout", "10")
        params.setdefault("application_name", "sitecal monitor")
        try:
            self._conn = psycopg.connect(make_conninfo("", **params), autocommit=True)
        except psycopg.Error as exc:
            raise HistoryError(
                f"Cannot connect to the monitoring database {self.where}: {self._reason(exc)}. Check the "
                "host, port, database, user and password file."
            ) from None

    def _reason(self, exc: Exception) -> str:
        text = " ".join(str(exc).split())
        if self._password:
            text = text.replace(self._password, "***")
        text = redact(text)
        return text if len(text) <= 300 else text[:297] + "..."

    def _run(self, sql: str, params: Sequence[Any]) -> Any:
        return self._conn.execute(sql.replace("?", "%s"), tuple(params))

    def _translate(self, exc: Exception) -> HistoryError | None:
        errors = self._psycopg.errors
        if isinstance(exc, errors.LockNotAvailable | errors.QueryCanceled):
            return _locked(self.where)
        if isinstance(exc, errors.InsufficientPrivilege):
            return HistoryError(
                f"The monitoring database {self.where} refuses this user: {self._reason(exc)}. Grant it the "
                "right to create tables and to read and write them."
            )
        if isinstance(exc, self._psycopg.Error):
            return HistoryError(f"The monitoring database {self.where} cannot be used: {self._reason(exc)}.")
        return None

    def begin_read(self) -> None:
        self.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def begin_write(self, *, creating: bool) -> None:
        self.execute("BEGIN")
        if creating:
            self.execute("SELECT pg_advisory_xact_lock(?)", (_PG_LOCK_KEY,))
        else:
            # Self-conflicting: one writer at a time, while readers read on.
            self.execute(f"LOCK TABLE {WINDOWS} IN SHARE ROW EXCLUSIVE MODE")

    def tables(self) -> tuple[set[str], list[str]]:
        if self.rows("SELECT current_schema()", limit=1)[0][0] is None:
            raise HistoryError(
                f"The monitoring database {self.where} has no schema to hold the history (empty "
                "search_path): set one in the URL (options=-csearch_path=...) or create the schema."
            )
        found = self.rows(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_name IN (?, ?)",
            (META, WINDOWS),
            limit=2,
        )
        return {str(r[0]) for r in found}, []

    def columns(self, table: str) -> set[str]:
        found = self.rows(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ?",
            (table,),
            limit=100,
        )
        return {str(r[0]) for r in found}

    def _close(self) -> None:
        self._conn.close()


def _read_password(path: Path) -> str:
    try:
        with Path(path).open("rb") as f:
            data = f.read(_MAX_PASSWORD_BYTES + 1)
    except OSError as exc:
        raise HistoryError(f"The password file {path} cannot be read ({exc.strerror}).") from None
    try:
        password = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        password = ""
    if not password or len(data) > _MAX_PASSWORD_BYTES or "\n" in password:
        raise HistoryError(
            f"The password file {path} must hold the password on one line (UTF-8, under "
            f"{_MAX_PASSWORD_BYTES} bytes)."
        )
    return password


def is_url(where: str | Path) -> bool:
    """Whether ``where`` names a database server (a URL) rather than a SQLite file."""
    return isinstance(where, str) and "://" in where


def open_store(
    where: str | Path, *, create: bool, lock_timeout_s: float, password_file: str | Path | None
) -> Store:
    """Open the SQLite file or the PostgreSQL URL ``where`` (nothing is created or written yet)."""
    if is_url(where):
        text = str(where)
        if not text.lower().startswith(_SCHEMES):
            raise HistoryError(
                f"The monitoring database {redact(text)} is not supported: give a SQLite file's path or a "
                "postgresql:// URL."
            )
        return _PostgreSQL(
            text,
            password_file=None if password_file is None else Path(password_file),
            lock_timeout_s=lock_timeout_s,
        )
    if password_file is not None:
        raise HistoryError(
            f"A password file was given for the SQLite history {where}: it is only for a postgresql:// URL."
        )
    return _SQLite(Path(where), create=create, lock_timeout_s=lock_timeout_s)
