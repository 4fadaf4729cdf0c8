"""A local, content-addressed store of retrieved instances that an interrupted retrieval resumes from.

Layout under the store's root (``<output_dir>/.sitecal-pacs/<source id>/``)::

    files/ab/ab12...ef.dcm     one instance, named by the sha256 of its bytes (written atomically)
    incoming/                  instances being received, written as they arrive (outside ``files/``)
    index.json                 sha256(SOPInstanceUID) -> object hash; sha256(StudyInstanceUID) of the
                               studies retrieved whole -> their instances' keys

No UID is stored in clear: the index names instances and studies by the sha256 of their UID, which is
enough to know what is already here and not enough to read a UID back. ``files/`` is what the scan
reads (as it reads ``data.dicom_dir``).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from pathlib import Path
from types import TracebackType

from sitecal._io import write_bytes_atomic, write_json_atomic
from sitecal.errors import DataError, OutputError

__all__ = ["Incoming", "InstanceStore", "uid_key"]


def uid_key(uid: str) -> str:
    """The store's name for a UID: its sha256, hex (the UID itself is never written)."""
    return hashlib.sha256(uid.strip().encode("ascii", "replace")).hexdigest()


class Incoming:
    """An instance being received: its bytes go to a file under ``incoming/`` and are hashed as they come.

    A context manager: the file is removed on exit unless :meth:`InstanceStore.put_incoming` took it.
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{secrets.token_hex(8)}.part"
        self._file = open(self.path, "xb")  # closed by finish or __exit__
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        try:
            self._file.write(data)
        except OSError as exc:
            raise OutputError(
                f"{self.path.parent}: cannot write a retrieved instance ({exc.strerror or exc}). Check free "
                "space and permissions."
            ) from None
        self._hash.update(data)
        self.size += len(data)

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes written (the file is flushed first)."""
        self._file.flush()
        with open(self.path, "rb") as f:
            return f.read(n)

    def finish(self) -> str:
        """Close the file (synced to disk); the sha256 of its bytes."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return self._hash.hexdigest()

    def __enter__(self) -> Incoming:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


class InstanceStore:
    """Instances by content, and which instances and studies are already complete (thread-safe)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "files"
        self._index_path = root / "index.json"
        self._lock = threading.Lock()
        self.instances: dict[str, str] = {}
        self.studies: dict[str, list[str]] = {}
        if self._index_path.is_file():
            try:
                index = json.loads(self._index_path.read_text(encoding="utf-8"))
                self.instances = {str(k): str(v) for k, v in index["instances"].items()}
                self.studies = {str(k): [str(i) for i in v] for k, v in index["studies"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise DataError(
                    f"{self._index_path}: the retrieval index cannot be read ({exc!r}). Delete the folder "
                    f"{root} to retrieve the studies again."
                ) from None
        # what a retrieval killed while receiving left behind (never complete, never in the index)
        for stale in (root / "incoming").glob("*.part"):
            stale.unlink(missing_ok=True)
        # an object listed in the index but gone from disk is retrieved again
        self.instances = {k: v for k, v in self.instances.items() if self.object_path(v).is_file()}
        self.studies = {s: keys for s, keys in self.studies.items() if all(k in self.instances for k in keys)}

    def object_path(self, digest: str) -> Path:
        return self.files / digest[:2] / f"{digest}.dcm"

    def has_study(self, study_uid: str) -> bool:
        return uid_key(study_uid) in self.studies

    def has_instance(self, sop_uid: str) -> bool:
        return uid_key(sop_uid) in self.instances

    def put(self, sop_uid: str, data: bytes) -> str:
        """Store one instance's Part-10 bytes; its object hash."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.object_path(digest)
        if not path.is_file():
            write_bytes_atomic(path, data)
        with self._lock:
            self.instances[uid_key(sop_uid)] = digest
        return digest

    def incoming(self) -> Incoming:
        """A file to receive one instance into, as it arrives (see :meth:`put_incoming`)."""
        return Incoming(self.root / "incoming")

    def put_incoming(self, sop_uid: str, incoming: Incoming) -> str:
        """Store an instance received into ``incoming`` (moved into place, not copied); its object hash."""
        digest = incoming.finish()
        path = self.object_path(digest)
        if path.is_file():
            incoming.path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(incoming.path, path)
        with self._lock:
            self.instances[uid_key(sop_uid)] = digest
        return digest

    def complete_study(self, study_uid: str, sop_uids: list[str]) -> None:
        """Record a study as retrieved whole, and save the index (so a restart skips it)."""
        with self._lock:
            self.studies[uid_key(study_uid)] = sorted(uid_key(u) for u in sop_uids)
            self._save()

    def save(self) -> None:
        with self._lock:
            self._save()

    def _save(self) -> None:
        write_json_atomic(self._index_path, {"instances": self.instances, "studies": self.studies})

    def object_digests(self, study_keys: list[str]) -> list[str]:
        """The sorted object hashes of these studies' instances."""
        return sorted({self.instances[k] for s in study_keys for k in self.studies.get(s, [])})

    def objects_digest(self, study_keys: list[str]) -> str:
        """sha256 over the sorted object hashes of these studies' instances: names what was retrieved."""
        digests = sorted(self.instances[k] for s in study_keys for k in self.studies.get(s, []))
        return hashlib.sha256("\n".join(digests).encode()).hexdigest()
