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
import os
import sqlite3  # noqa: F401  (kept as an attribute of this module: tests patch sqlite3.connect through it)
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sitecal._hash_store import HashManifest, _Store
from sitecal._progress import progress_bar

__all__ = ["SETTLE_NS", "FileHashes", "HashManifest", "file_sha256_and_stat", "hash_files"]

#: A file modified this recently (ns) when hashed is not remembered: it may still change within a tick.
SETTLE_NS = 2_000_000_000
_CHUNK = 1 << 20  # as sitecal.provenance.file_sha256: 1 MiB reads, never the whole file
_LOOKUP_BATCH = 500  # rows asked for in one SELECT (below SQLite's 999 parameters on old builds)
_WRITE_ROWS = 2_000  # remembered rows written in one transaction ...
_WRITE_SECONDS = 10.0  # ... or sooner, so that a killed run keeps most of what it hashed


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
        _Store.open(
            manifest if unique else None, write_rows=_WRITE_ROWS, write_seconds=_WRITE_SECONDS
        ) as store,
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
