"""The file-hash manifest's SQLite file: masked, checked rows of remembered file hashes.

:class:`HashManifest` names the file and the site key. :class:`_Store` opens the manifest (creating it
when missing, replacing it once a run when damaged), looks up remembered sha256s (each row's mask removed
and its check verified) and writes new rows in batches. The row format and what is trusted are described
in :mod:`sitecal._hash_manifest`, which uses it. Every SQLite or OS error ends the use of the manifest
with one logged warning, never a failure.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

# the warnings keep the name of the module that hashes the files: a log reads as before
logger = logging.getLogger("sitecal._hash_manifest")

_BUSY_TIMEOUT_MS = 30_000  # how long a run waits for another run's write to finish
_APPLICATION_ID = 0x53434648  # "SCFH": PRAGMA application_id of a sitecal file-hash manifest
_SCHEMA_VERSION = 1
_MAC_BYTES = 16
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS file_hashes "
    "(key BLOB PRIMARY KEY NOT NULL, sha256 BLOB NOT NULL, mac BLOB NOT NULL) WITHOUT ROWID"
)


@dataclass(frozen=True)
class HashManifest:
    """Where file hashes are remembered, and the site key that hides what they are of.

    Parameters
    ----------
    path : Path
        The SQLite file (created with its folder when missing).
    key : bytes
        The site's pseudonymisation key (:attr:`sitecal._pseudonym.Pseudonymizer.key`); ``repr`` never
        shows it.
    """

    path: Path
    key: bytes = field(repr=False)


class _Store:
    """The open manifest: lookups, and remembered rows written in batches.

    Every SQLite or OS error ends the use of the manifest (reads and writes, or writes only) with one
    warning; none is raised. A damaged file is replaced by a new one, once a run.
    """

    def __init__(self, manifest: HashManifest | None, *, write_rows: int, write_seconds: float) -> None:
        self.manifest = manifest
        self.write_rows = write_rows  # remembered rows written in one transaction ...
        self.write_seconds = write_seconds  # ... or sooner, so that a killed run keeps most of what it hashed
        self.key: bytes | None = None  # set while the manifest can be read
        self.value_key = b""  # derived from the key: masks and checks the stored hashes
        self.connection: sqlite3.Connection | None = None
        self.writable = False
        self.replaced = False
        self.pending: list[tuple[bytes, bytes, bytes]] = []
        self.last_write = time.monotonic()
        self.n_rejected = 0

    @classmethod
    def open(cls, manifest: HashManifest | None, *, write_rows: int, write_seconds: float) -> _Store:
        store = cls(manifest, write_rows=write_rows, write_seconds=write_seconds)
        if manifest is not None:
            store._connect()
        return store

    def __enter__(self) -> _Store:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            self.flush()  # also when reading a file failed: what was hashed stays remembered
        finally:
            self._close()
        if self.n_rejected:
            self._warn(
                f"{self.n_rejected} entries failed their check (altered on disk); those files were hashed "
                "again"
            )

    def _connect(self) -> None:
        """Open and check the manifest, creating it when missing and replacing it when damaged."""
        assert self.manifest is not None
        path = self.manifest.path
        try:
            if path.exists() and not path.is_file():
                raise _ForeignFile(
                    "it is not a regular file; move it away to let sitecal remember file hashes"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            self.connection = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            self._prepare(self.connection)
        except _ForeignFile as exc:
            self._disable(str(exc))
            return
        except sqlite3.DatabaseError as exc:
            if _is_corruption(exc):
                self._replace(exc)
            else:
                self._disable(f"cannot use it ({_reason(exc)})")
            return
        except (OSError, sqlite3.Error) as exc:
            self._disable(f"cannot open it ({_reason(exc)})")
            return
        self.key = self.manifest.key
        self.value_key = hmac.digest(self.key, b"sitecal file-hash manifest values", "sha256")
        self.writable = True

    def _replace(self, exc: sqlite3.Error) -> None:
        """Delete a damaged manifest and start a new one (once a run: a second failure disables it)."""
        assert self.manifest is not None
        self._close()
        self.key = None
        self.writable = False
        if self.replaced:
            self._disable(f"it is damaged again ({_reason(exc)})")
            return
        self.replaced = True
        self._warn(f"the file is damaged ({_reason(exc)}); it is replaced by a new one")
        path = self.manifest.path
        try:
            path.unlink(missing_ok=True)
            Path(f"{path}-journal").unlink(missing_ok=True)  # a hot journal of the damaged file
        except OSError as exc:
            self._disable(f"cannot replace it ({_reason(exc)})")
            return
        self._connect()

    @staticmethod
    def _prepare(connection: sqlite3.Connection) -> None:
        """Check that ``connection`` holds a manifest of this schema, creating it in an empty file."""
        connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        # NORMAL: fewer syncs a commit; a manifest damaged by a power cut is found and replaced, and a row
        # torn by it fails its check
        connection.execute("PRAGMA synchronous = NORMAL")
        if _check(connection):
            return
        try:
            # BEGIN IMMEDIATE: two runs creating the manifest at once create it once
            connection.execute("BEGIN IMMEDIATE")
            if not _check(connection):
                connection.execute(_SCHEMA)
                connection.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                connection.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise

    def lookup(self, keys: Sequence[bytes]) -> dict[bytes, str]:
        """The remembered sha256 (hex) of each key found, its mask removed and its MAC checked."""
        if self.connection is None or self.key is None or not keys:
            return {}
        marks = ",".join("?" * len(keys))
        try:
            rows = self.connection.execute(
                f"SELECT key, sha256, mac FROM file_hashes WHERE key IN ({marks})", list(keys)
            ).fetchall()
        except sqlite3.Error as exc:
            if _is_corruption(exc):
                self._replace(exc)
            else:
                self._disable(f"cannot read it ({_reason(exc)})")
            return {}
        found = {}
        for row, masked, mac in rows:
            sha = _unmask(self.value_key, row, masked)
            if (
                sha is not None
                and isinstance(mac, bytes)
                and hmac.compare_digest(mac, _mac(self.value_key, row, sha))
            ):
                found[row] = sha.hex()
            else:
                self.n_rejected += 1
        return found

    def remember(self, row: bytes, sha_hex: str) -> None:
        """Queue ``row → sha`` for writing; written in batches."""
        if not self.writable or self.key is None:
            return
        sha = bytes.fromhex(sha_hex)
        masked = _xor(sha, _pad(self.value_key, row))
        self.pending.append((row, masked, _mac(self.value_key, row, sha)))
        if len(self.pending) >= self.write_rows or time.monotonic() - self.last_write > self.write_seconds:
            self.flush()

    def flush(self) -> None:
        """Write the queued rows in one transaction."""
        rows, self.pending = self.pending, []
        if not rows or self.connection is None or not self.writable:
            return
        try:
            self.connection.execute("BEGIN IMMEDIATE")
            self.connection.executemany("INSERT OR REPLACE INTO file_hashes VALUES (?, ?, ?)", rows)
            self.connection.execute("COMMIT")
        except sqlite3.Error as exc:
            try:
                if self.connection.in_transaction:
                    self.connection.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self.writable = False
            self._warn(f"cannot write to it ({_reason(exc)}); files hashed now are hashed again next run")
        self.last_write = time.monotonic()

    def _close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def _disable(self, why: str) -> None:
        self._close()
        self.key = None
        self.writable = False
        self._warn(f"{why}; the files are hashed without it")

    def _warn(self, why: str) -> None:
        assert self.manifest is not None
        logger.warning("file-hash manifest %s: %s.", self.manifest.path, why)


def _check(connection: sqlite3.Connection) -> bool:
    """Whether ``connection`` holds a manifest of this schema (``False``: an empty file, to be created).

    Raises
    ------
    _ForeignFile
        When it holds something else: another application's database, or a newer or older sitecal's.
    sqlite3.DatabaseError
        When the file is not a database at all.
    """
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    n_tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if (application_id, version, n_tables) == (0, 0, 0):
        return False
    if application_id != _APPLICATION_ID:
        raise _ForeignFile(
            "it is not a sitecal file-hash manifest; move it away to let sitecal remember file hashes"
        )
    if version != _SCHEMA_VERSION:
        raise _ForeignFile(
            f"it was written by another version of sitecal (schema {version}, this one reads "
            f"{_SCHEMA_VERSION}); delete it to start a new one"
        )
    connection.execute("SELECT key, sha256, mac FROM file_hashes LIMIT 1").fetchall()
    return True


def _pad(value_key: bytes, row: bytes) -> bytes:
    """What a row's sha256 is masked with (XOR), so that the file holds no file hash in clear."""
    return hashlib.blake2b(row, key=value_key, person=b"sitecal pad", digest_size=32).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def _unmask(key: bytes, row: object, masked: object) -> bytes | None:
    if not (isinstance(row, bytes) and isinstance(masked, bytes) and len(masked) == 32):
        return None
    return _xor(masked, _pad(key, row))


def _mac(value_key: bytes, row: bytes, sha: bytes) -> bytes:
    """A row's check: an altered row, or one written under another key, fails it."""
    return hashlib.blake2b(row + sha, key=value_key, person=b"sitecal mac", digest_size=_MAC_BYTES).digest()


class _ForeignFile(Exception):
    """The manifest's path holds another application's SQLite file."""


def _reason(exc: BaseException) -> str:
    """An error's own words: SQLite's message, or the OS's without the path it names."""
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc) or type(exc).__name__


def _is_corruption(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text or "corrupt" in text
