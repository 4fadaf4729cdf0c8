"""Hash once: a persistent memory of file sha256s, so that an unchanged file is not read again.

Every run names its data by the dataset manifest hash (:func:`sitecal.provenance.dataset_manifest_sha256`),
which needs the sha256 of every analysed file. Reading 100,000 files again at each run takes minutes, so
:func:`hash_files` remembers each file's sha256 in an SQLite file (by default
``report.output_dir/.sitecal-file-hashes.sqlite``) and takes it from there while the file is unchanged.
The dataset manifest hash does not change: only where each file's sha256 comes from does.

What is trusted
---------------
A file is taken as unchanged when its resolved path, size, modification time in nanoseconds (``mtime_ns``),
inode and device are those it had when it was hashed. A file rewritten in place with the same size *and*
its modification time set back to the old value (``touch -r``, ``cp -p``, ``rsync -t`` onto an existing
file, a restored backup) is not noticed: that is the known limit of every such cache (``git``, ``make``,
``rsync``). Two guards narrow it:

- a file whose modification time is within :data:`SETTLE_NS` (2 s) of the moment it is hashed, or in the
  future, is hashed but not remembered: a file still being written, or rewritten within one tick of a
  coarse clock (2 s on FAT and SMB shares), never leaves a stale entry ("racy git");
- a file whose size or modification time changed while it was read is not remembered either.

Delete the manifest to have every file read again; it is only a memory and is rebuilt at the next run.

What the file holds
-------------------
No path, folder name or file hash in clear: folder names can hold patient names, and a file's sha256 would
tell anyone holding a copy of an image that it is in the site's data. A row is

- ``key``: ``HMAC-SHA256(site key, "sitecal file" NUL path NUL size NUL mtime_ns NUL inode NUL device)``
  (the resolved path's bytes, the numbers in decimal), 32 bytes;
- ``sha256``: the file's sha256 XOR a pad, ``BLAKE2b-256(key)`` keyed with a value key derived from the
  site key (``HMAC-SHA256(site key, "sitecal file-hash manifest values")``), 32 bytes;
- ``mac``: ``BLAKE2b-128(key + sha256)`` keyed with the value key: a row altered on disk is ignored and
  the file hashed again.

(Keyed BLAKE2b for the pad and the check, at a fifth of an HMAC's cost: a second run's time goes there.)

The site key is the pseudonymisation key (``privacy.key_file``), so runs at one site share the manifest
and a run under another key finds nothing in it.

Concurrency and failures
------------------------
Several runs may share the manifest at once (three per-site runs on one machine): SQLite's locking with a
busy timeout serialises the writes, each a short transaction of a batch of rows. The rollback journal is
used rather than WAL, which does not work on a network file system and needs a writable folder even to
read. A manifest that cannot be created, read or written (read-only folder, corrupt file, lock held too
long) is one logged warning naming the manifest, never a failure: the run goes on hashing what it cannot
take from the manifest, and a corrupt manifest is replaced by a new one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from sitecal._progress import progress_bar

__all__ = ["SETTLE_NS", "FileHashes", "HashManifest", "file_sha256_and_stat", "hash_files"]

logger = logging.getLogger(__name__)

#: A file modified this recently (ns) when hashed is not remembered: it may still change within a tick.
SETTLE_NS = 2_000_000_000
_CHUNK = 1 << 20  # as sitecal.provenance.file_sha256: 1 MiB reads, never the whole file
_LOOKUP_BATCH = 500  # rows asked for in one SELECT (below SQLite's 999 parameters on old builds)
_WRITE_ROWS = 2_000  # remembered rows written in one transaction ...
_WRITE_SECONDS = 10.0  # ... or sooner, so that a killed run keeps most of what it hashed
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


@dataclass(frozen=True, eq=False)
class FileHashes(Mapping[Path, str]):
    """sha256 (64 lower-case hex digits) of each file, with how many were read and how many remembered.

    A read-only mapping from each path as given to its hash; it compares equal to a dict of the same items.
    """

    hashes: Mapping[Path, str]
    n_hashed: int = 0
    n_reused: int = 0

    def __getitem__(self, path: Path) -> str:
        return self.hashes[path]

    def __iter__(self) -> Iterator[Path]:
        return iter(self.hashes)

    def __len__(self) -> int:
        return len(self.hashes)


def file_sha256_and_stat(path: str | Path) -> tuple[str, os.stat_result, os.stat_result]:
    """sha256 of a file's bytes, with the file's status before and after reading it (same file handle)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:  # not Path.open: its parsing costs as much as reading a small file
        before = os.fstat(fh.fileno())
        while block := fh.read(_CHUNK):
            digest.update(block)
        after = os.fstat(fh.fileno())
    return digest.hexdigest(), before, after


def hash_files(
    paths: Iterable[Path], *, manifest: HashManifest | None = None, progress: bool = False
) -> FileHashes:
    """sha256 of every file, each read once, or taken from ``manifest`` while the file is unchanged.

    Parameters
    ----------
    paths : iterable of Path
        The files; a path given twice is hashed once.
    manifest : HashManifest, optional
        Where hashes are remembered (see the module docstring for what is trusted). Without it every file
        is read, as :func:`sitecal.provenance.file_sha256` does.
    progress : bool, default False
        A progress bar over the files.

    Returns
    -------
    FileHashes
        The hashes, equal to :func:`sitecal.provenance.file_sha256` of each file, with ``n_hashed`` (files
        read) and ``n_reused`` (taken from the manifest); ``n_hashed + n_reused`` is the number of distinct
        paths.

    Raises
    ------
    OSError
        When a file cannot be read, as :func:`sitecal.provenance.file_sha256` raises. Problems with the
        manifest itself are logged warnings, never raised.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.dcm").write_bytes(b"a")
    >>> hashes = hash_files([folder / "a.dcm"])
    >>> hashes[folder / "a.dcm"] == hashlib.sha256(b"a").hexdigest(), hashes.n_hashed, hashes.n_reused
    (True, 1, 0)
    """
    unique = list(dict.fromkeys(paths))
    hashes: dict[Path, str] = {}
    n_reused = 0
    with (
        _Store.open(manifest if unique else None) as store,
        progress_bar(total=len(unique), desc="Hashing", unit="file", disable=not progress) as bar,
    ):
        folders: dict[str, str] = {}  # each folder resolved once, not once a file
        for start in range(0, len(unique), _LOOKUP_BATCH):
            batch = unique[start : start + _LOOKUP_BATCH]
            key = store.key  # None once the manifest is out of use: then no file is examined for it
            seen = [_identity(path, folders) if key is not None else None for path in batch]
            rows = [_row_key(key, *found) if key is not None and found else None for found in seen]
            known = store.lookup([row for row in rows if row is not None])
            for path, found, row in zip(batch, seen, rows, strict=True):
                remembered = known.get(row) if row is not None else None
                if remembered is not None:
                    hashes[path] = remembered
                    n_reused += 1
                else:
                    sha, before, after = file_sha256_and_stat(path)
                    hashes[path] = sha
                    if row is not None and found and _settled(found[1], before, after):
                        store.remember(row, sha)
                bar.update(1)
    return FileHashes(hashes, n_hashed=len(unique) - n_reused, n_reused=n_reused)


def _identity(path: Path, folders: dict[str, str]) -> tuple[str, os.stat_result] | None:
    """``path`` resolved, with the status of the file it names.

    ``None`` when it cannot be examined: it is then read, and reading it raises what the caller should see.
    """
    name = os.fspath(path)
    try:
        info = os.lstat(name)
        if stat.S_ISLNK(info.st_mode):
            return os.path.realpath(name), os.stat(name)
    except OSError:
        return None
    folder, base = os.path.split(name)
    if folder not in folders:  # realpath makes it absolute, and resolves links and '..' above the file
        folders[folder] = os.path.realpath(folder or ".")
    return os.path.join(folders[folder], base), info


def _row_key(key: bytes, resolved: str, info: os.stat_result) -> bytes:
    """``HMAC-SHA256(key, resolved path NUL size NUL mtime_ns NUL inode NUL device)``."""
    fields = f"\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ino}\0{info.st_dev}"
    return hmac.digest(key, b"sitecal file\0" + os.fsencode(resolved) + fields.encode(), "sha256")


def _settled(looked_up: os.stat_result, before: os.stat_result, after: os.stat_result) -> bool:
    """Whether a hashed file may be remembered under the key of ``looked_up``.

    The file read must be the one looked up, unchanged while read, and not modified just now.
    """
    fields = ("st_size", "st_mtime_ns", "st_ino", "st_dev")
    same = all(getattr(looked_up, f) == getattr(before, f) == getattr(after, f) for f in fields)
    return same and after.st_mtime_ns <= time.time_ns() - SETTLE_NS


class _Store:
    """The open manifest: lookups, and remembered rows written in batches.

    Every SQLite or OS error ends the use of the manifest (reads and writes, or writes only) with one
    warning; none is raised. A damaged file is replaced by a new one, once a run.
    """

    def __init__(self, manifest: HashManifest | None) -> None:
        self.manifest = manifest
        self.key: bytes | None = None  # set while the manifest can be read
        self.value_key = b""  # derived from the key: masks and checks the stored hashes
        self.connection: sqlite3.Connection | None = None
        self.writable = False
        self.replaced = False
        self.pending: list[tuple[bytes, bytes, bytes]] = []
        self.last_write = time.monotonic()
        self.n_rejected = 0

    @classmethod
    def open(cls, manifest: HashManifest | None) -> _Store:
        store = cls(manifest)
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
        if len(self.pending) >= _WRITE_ROWS or time.monotonic() - self.last_write > _WRITE_SECONDS:
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
