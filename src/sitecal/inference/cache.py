"""Logits on disk, content-addressed and verified: nothing is inferred twice, and nothing else is reused.

A cached logit is reused only when everything that determines it is the same. That is the cache
identity (:func:`cache_identity`): the model's identity (weights or bundle fingerprint, format,
version, architecture and its arguments, the sha256 of the architecture's code; see
:meth:`sitecal.inference.LoadedModel.identity`), the transform fingerprint (reader version, VOI, MONAI
version, the chain), the torch and MONAI versions, the number of classes, and the precision the logits were
computed in when it is not float32 (:meth:`LogitCache.for_precision`; float32 adds nothing, so the folders
written before precisions existed keep their name); the image key
(:func:`image_key`) adds each file's UID and sha256. The identity's sha256 names the folder
``<cache root>/<identity sha256>-<site key fingerprint>/``, which holds ``identity.json`` (for people; it
is not trusted) and chunk files ``chunk-<random>.npz`` (arrays ``keys``, ``logits``, ``mac``; no
pickle), one per inference batch, each written atomically: a run killed half-way leaves whole chunks
only, and the next run computes just what is missing.

Each chunk carries a MAC: HMAC-SHA256 under a key derived from the site secret (the pseudonymisation
key) over the identity sha256, the keys and the raw float32 logits. A chunk that fails (empty,
truncated, not a chunk, of another shape or dtype, a MAC that does not verify, non-finite logits) is
ignored, moved to ``quarantine/`` in the folder so that it is not met again, and its images are
computed again; one warning per run says how many chunks were ignored and why. No message names an
image. Sites sharing a cache root get separate folders (the site key's fingerprint is in the name).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import os
import secrets
import stat
import struct
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from sitecal._io import write_bytes_atomic, write_json_atomic
from sitecal._pseudonym import Pseudonymizer
from sitecal._text import plural

__all__ = ["LogitCache", "cache_identity", "image_key"]

logger = logging.getLogger(__name__)

#: Chunks merged into one when a run finds more than this many.
_MERGE_ABOVE = 64
#: Names the chunk layout and MAC message; another layout is another identity, hence another folder.
_LAYOUT = "sitecal-logit-cache/2"
_ARRAYS = {"keys.npy", "logits.npy", "mac.npy"}
_QUARANTINE = "quarantine"


def image_key(pseudonymize: Pseudonymizer, instances: Iterable[tuple[str, str]]) -> str:
    """The cache key of an image or a volume: its ``(SOPInstanceUID, file sha256)`` pairs, in any order.

    The file's hash is part of the key so that a file rewritten under the same UID (a re-export with
    other pixels, a generator reusing UIDs) is read again instead of taking another image's logits.
    The UIDs enter a keyed hash only: the key reveals none of them.
    """
    return pseudonymize.digest("instance", "\n".join(sorted(f"{uid} {sha}" for uid, sha in instances)))


def cache_identity(
    model: Mapping[str, Any], *, transforms_sha256: str, precision: str = "float32"
) -> dict[str, Any]:
    """The identity of a model and transform chain's logits, for :class:`LogitCache`.

    Parameters
    ----------
    model : mapping
        :meth:`sitecal.inference.LoadedModel.identity`.
    transforms_sha256 : str
        :func:`sitecal.inference.transform_fingerprint`.
    precision : str, default "float32"
        The precision the logits are computed in (``inputs.precision`` as it ran).

    Returns
    -------
    dict
        ``{"layout", "model", "transforms_sha256", "torch", "monai"}``, and ``"precision"`` when it is not
        float32: the installed torch and MONAI versions are part of it because a new release may change an
        operator or a transform; mixed-precision logits differ from float32 ones in their last digits.
    """
    return _with_precision(
        {
            "layout": _LAYOUT,
            "model": dict(model),
            "transforms_sha256": transforms_sha256,
            "torch": _installed("torch"),
            "monai": _installed("monai"),
        },
        precision,
    )


def _with_precision(identity: Mapping[str, Any], precision: str) -> dict[str, Any]:
    """``identity`` for logits computed in ``precision``: float32 is the identity without the entry."""
    plain = {k: v for k, v in identity.items() if k != "precision"}
    return plain if precision == "float32" else {**plain, "precision": precision}


def _installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


class _Rejected(Exception):
    """Why a chunk is not used: one of a few fixed reasons, which name no image."""


class LogitCache:
    """The verified cached logits of one cache identity (see the module docstring).

    Parameters
    ----------
    root : Path
        The cache folder (``inputs.logit_cache_dir`` of the protocol).
    identity : mapping
        Everything that determines a logit, as JSON values: :func:`cache_identity`.
    n_classes : int
        Logits per image; part of the identity.
    secret : bytes
        The site secret (the pseudonymisation key): chunks are authenticated under a key derived from it.

    Raises
    ------
    sitecal.errors.OutputError
        When the folder cannot be created or written.
    """

    def __init__(self, root: Path, identity: Mapping[str, Any], n_classes: int, *, secret: bytes) -> None:
        if not isinstance(n_classes, int) or n_classes < 1:
            raise ValueError(
                f"The 'n_classes' parameter of LogitCache must be an int >= 1. Got {n_classes!r}."
            )
        if len(secret) < 16:
            raise ValueError("The 'secret' parameter of LogitCache must be the site key (16 bytes or more).")
        self.identity: dict[str, Any] = {**identity, "n_classes": n_classes}
        self.n_classes = n_classes
        self._root, self._secret = root, secret
        self.digest = hashlib.sha256(
            json.dumps(self.identity, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        self.folder = root / f"{self.digest}-{Pseudonymizer(secret).fingerprint}"
        self._key = hmac.new(secret, b"sitecal logit cache MAC", hashlib.sha256).digest()
        identity_file = self.folder / "identity.json"
        try:
            current = json.loads(identity_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # missing, or damaged: the chunks' MACs do not depend on it
            current = None
        if current != self.identity:
            write_json_atomic(identity_file, self.identity)

    def for_precision(self, precision: str) -> LogitCache:
        """The cache of the same logits computed in ``precision``: this one when it is already that.

        :func:`~sitecal.inference.predict_files` calls it once it knows the precision a run computes in
        (after the check of ``inputs.precision``), so that float32 and mixed-precision logits never mix.
        """
        identity = {k: v for k, v in self.identity.items() if k != "n_classes"}
        wanted = _with_precision(identity, precision)
        if wanted == identity:
            return self
        return LogitCache(self._root, wanted, self.n_classes, secret=self._secret)

    def load(self) -> dict[str, np.ndarray]:
        """Every verified cached key → its float32 logits; failing chunks are quarantined (one warning)."""
        cached: dict[str, np.ndarray] = {}
        used: list[Path] = []
        rejected: Counter[str] = Counter()
        chunks = sorted(self.folder.glob("chunk-*.npz"))
        for chunk in chunks:
            try:
                keys, logits = self._read(chunk)
            except FileNotFoundError:  # merged away by a concurrent run since the listing
                continue
            except (_Rejected, OSError) as why:
                rejected[str(why) if isinstance(why, _Rejected) else "truncated or unreadable"] += 1
                self._quarantine(chunk)
                continue
            cached.update(zip(keys, logits, strict=True))
            used.append(chunk)
        if rejected:
            reasons = "; ".join(f"{n} {reason}" for reason, n in sorted(rejected.items()))
            logger.warning(
                "logit cache %s: ignored %d of %d %s (%s) and moved them to %s/; their images are "
                "computed again",
                self.folder,
                sum(rejected.values()),
                len(chunks),
                plural(len(chunks), "chunk"),
                reasons,
                _QUARANTINE,
            )
        if len(used) > _MERGE_ABOVE:
            self._merge(cached, used)
        return cached

    def store(self, keys: Sequence[str], logits: np.ndarray) -> None:
        """Add one batch's logits (one chunk, written atomically, with its MAC).

        Rows that are not all finite are left out: such an image is an exclusion, computed again (and
        excluded again) by a later run rather than cached.
        """
        rows = np.asarray(logits, dtype=np.float32)
        if rows.shape != (len(keys), self.n_classes):
            raise ValueError(
                f"LogitCache.store: logits of shape {rows.shape} for {len(keys)} keys; expected "
                f"({len(keys)}, {self.n_classes})."
            )
        kept = np.flatnonzero(np.isfinite(rows).all(axis=1))
        if not len(kept):
            return
        names = np.asarray([keys[i] for i in kept.tolist()], dtype=np.str_)
        rows = np.ascontiguousarray(rows[kept], dtype="<f4")
        mac = self._mac(names.tolist(), rows)  # over the keys as stored: numpy drops trailing NULs
        buffer = io.BytesIO()
        np.savez(buffer, keys=names, logits=rows, mac=np.asarray(mac))
        write_bytes_atomic(self.folder / f"chunk-{secrets.token_hex(8)}.npz", buffer.getvalue())

    def _mac(self, keys: list[str], logits: np.ndarray) -> str:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        mac.update(f"{_LAYOUT}\0{self.digest}\0".encode())
        mac.update(struct.pack("<QQ", len(keys), self.n_classes))
        for key in keys:  # length-prefixed, so no two key lists give the same bytes
            data = key.encode("utf-8", "surrogatepass")
            mac.update(struct.pack("<Q", len(data)) + data)
        mac.update(np.ascontiguousarray(logits, dtype="<f4").tobytes())
        return mac.hexdigest()

    def _read(self, chunk: Path) -> tuple[list[str], np.ndarray]:
        info = os.lstat(chunk)
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block, a link may point anywhere
            raise _Rejected("not a regular file")
        if info.st_size == 0:
            raise _Rejected("empty")
        with chunk.open("rb") as fh:
            try:
                with zipfile.ZipFile(fh) as archive:
                    members = archive.infolist()
                fh.seek(0)
                if {m.filename for m in members} != _ARRAYS or any(
                    m.compress_type != zipfile.ZIP_STORED or m.file_size > info.st_size for m in members
                ):  # np.savez stores uncompressed: anything else is not ours (and may be a zip bomb)
                    raise _Rejected("not a sitecal chunk")
                with np.load(fh, allow_pickle=False) as npz:
                    keys, logits, mac = npz["keys"], npz["logits"], npz["mac"]
            except _Rejected:
                raise
            except Exception:  # any malformed bytes (BadZipFile, EOFError, ValueError, ...): never fatal
                raise _Rejected("truncated or unreadable") from None
        if (
            keys.dtype.kind != "U"
            or keys.ndim != 1
            or logits.dtype != np.dtype("<f4")
            or logits.shape != (len(keys), self.n_classes)
            or mac.dtype.kind != "U"
            or mac.shape != ()
        ):
            raise _Rejected("of another shape or type")
        names = keys.tolist()
        if not hmac.compare_digest(str(mac[()]), self._mac(names, logits)):
            raise _Rejected("failing verification: altered, or written under another site key")
        if not np.isfinite(logits).all():
            raise _Rejected("with non-finite logits")
        return names, logits

    def _quarantine(self, chunk: Path) -> None:
        """Move a failing chunk aside (or delete it) so that the next run does not meet it again."""
        try:
            target = self.folder / _QUARANTINE
            target.mkdir(exist_ok=True)
            os.replace(chunk, target / chunk.name)
        except OSError:
            try:
                chunk.unlink(missing_ok=True)
            except OSError:  # a read-only cache: the chunk stays ignored, and is reported again
                pass

    def _merge(self, cached: dict[str, np.ndarray], chunks: list[Path]) -> None:
        keys = sorted(cached)
        self.store(keys, np.stack([cached[k] for k in keys]))  # the merged chunk first, then the parts
        for chunk in chunks:
            chunk.unlink(missing_ok=True)
