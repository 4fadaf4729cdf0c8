"""Logits on disk, keyed by (model sha256, transform fingerprint, image): nothing is inferred twice.

Reruns and resumed runs take what is there. One folder per (model, transforms) pair under the cache
root holds ``identity.json`` (the full pair) and chunk files ``chunk-<random>.npz`` (arrays ``keys``,
``logits``; no pickle), one per inference batch, each written atomically: a run killed half-way leaves
whole chunks only, and the next run computes just what is missing. Image keys are keyed hashes of the
image's SOPInstanceUIDs (:func:`image_key`), so no UID is written in clear.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from sitecal._io import write_bytes_atomic, write_json_atomic
from sitecal._pseudonym import Pseudonymizer
from sitecal.errors import OutputError

__all__ = ["LogitCache", "image_key"]

logger = logging.getLogger(__name__)

#: Chunks merged into one when a run finds more than this many.
_MERGE_ABOVE = 64


def image_key(pseudonymize: Pseudonymizer, instances: Iterable[tuple[str, str]]) -> str:
    """The cache key of an image or a volume: its ``(SOPInstanceUID, file sha256)`` pairs, in any order.

    The file's hash is part of the key so that a file rewritten under the same UID (a re-export with
    other pixels, a generator reusing UIDs) is read again instead of taking another image's logits.
    The UIDs enter a keyed hash only: the key reveals none of them.
    """
    return pseudonymize.digest("instance", "\n".join(sorted(f"{uid} {sha}" for uid, sha in instances)))


class LogitCache:
    """The cached logits of one (model, transform chain) pair.

    Parameters
    ----------
    root : Path
        The cache folder (``inputs.logit_cache`` of the protocol).
    model_sha256, transforms_sha256 : str
        The model fingerprint and :func:`sitecal.inference.transform_fingerprint`.
    n_classes : int
        Logits per image; a chunk of another width is ignored.
    """

    def __init__(self, root: Path, model_sha256: str, transforms_sha256: str, n_classes: int) -> None:
        self.folder = root / f"{model_sha256[:16]}-{transforms_sha256[:16]}"
        self.identity = {"model_sha256": model_sha256, "transforms_sha256": transforms_sha256}
        self.n_classes = n_classes
        identity_file = self.folder / "identity.json"
        try:
            if identity_file.is_file():
                if json.loads(identity_file.read_text()) != self.identity:
                    raise OutputError(
                        f"{self.folder}: holds logits of another model or transform chain under the same "
                        "short name. Delete this folder (it is only a cache) and run again."
                    )
            else:
                write_json_atomic(identity_file, self.identity)
        except (OSError, ValueError) as exc:
            if isinstance(exc, OutputError):
                raise
            raise OutputError(
                f"{identity_file}: unreadable cache identity ({exc}). Delete {self.folder} and run again."
            ) from None

    def load(self) -> dict[str, np.ndarray]:
        """Every cached key → its float32 logits; unreadable chunks are skipped with a warning."""
        cached: dict[str, np.ndarray] = {}
        chunks = sorted(self.folder.glob("chunk-*.npz"))
        for chunk in chunks:
            try:
                with chunk.open("rb") as fh, np.load(fh, allow_pickle=False) as npz:
                    keys, logits = npz["keys"], npz["logits"]
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
                logger.warning("logit cache: skipped unreadable chunk %s (%s)", chunk.name, exc)
                continue
            if logits.ndim != 2 or logits.shape != (len(keys), self.n_classes):
                logger.warning("logit cache: skipped chunk %s of shape %s", chunk.name, logits.shape)
                continue
            cached.update(zip(keys.tolist(), logits.astype(np.float32), strict=True))
        if len(chunks) > _MERGE_ABOVE:
            self._merge(cached, chunks)
        return cached

    def store(self, keys: Sequence[str], logits: np.ndarray) -> None:
        """Add one batch's logits (one chunk, written atomically)."""
        if not len(keys):
            return
        buffer = io.BytesIO()
        np.savez(buffer, keys=np.asarray(list(keys), dtype=str), logits=np.asarray(logits, dtype=np.float32))
        write_bytes_atomic(self.folder / f"chunk-{secrets.token_hex(8)}.npz", buffer.getvalue())

    def _merge(self, cached: dict[str, np.ndarray], chunks: list[Path]) -> None:
        keys = sorted(cached)
        self.store(keys, np.stack([cached[k] for k in keys]))  # the merged chunk first, then the parts
        for chunk in chunks:
            chunk.unlink(missing_ok=True)
