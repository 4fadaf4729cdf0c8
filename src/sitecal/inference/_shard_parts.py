"""A shard's part: the file a Dask worker writes for its shard, read back and merged with the others.

A part is an ``.npz`` of plain arrays (positions, float32 logits; failures and errors as UTF-8 JSON;
nothing pickled) written atomically, with its layout and the shard's signature, so that a part cut short,
of another layout or of another shard reads as absent.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sitecal._io import write_bytes_atomic
from sitecal.inference._forward import broken_model_error
from sitecal.inference.predict import InferenceResult, _in_index_order

__all__ = ["PART_LAYOUT", "Part", "merge_parts", "read_part", "write_part"]

#: The layout a part records; a part of another layout is not read.
PART_LAYOUT = "sitecal-shard-part/1"


@dataclass(frozen=True)
class Part:
    """One shard's outcome: its studies' logits, the failures, and the model's errors."""

    positions: np.ndarray
    logits: np.ndarray
    failures: tuple[tuple[int, str], ...]
    errors: tuple[tuple[str, str], ...]
    n_model_failed: int
    n_non_finite: int


def write_part(path: Path, part: Part, signature: str) -> None:
    """The part as an ``.npz`` of plain arrays (text as UTF-8 bytes; nothing pickled), written atomically."""

    def text(value: object) -> np.ndarray:
        return np.frombuffer(
            json.dumps(value).encode() if not isinstance(value, str) else value.encode(), np.uint8
        )

    buffer = io.BytesIO()
    np.savez(
        buffer,
        layout=text(PART_LAYOUT),
        signature=text(signature),
        positions=part.positions,
        logits=part.logits,
        failures=text([list(f) for f in part.failures]),
        errors=text([list(e) for e in part.errors]),
        counts=np.asarray([part.n_model_failed, part.n_non_finite], dtype=np.int64),
    )
    write_bytes_atomic(path, buffer.getvalue())


def read_part(path: Path, signature: str) -> Part | None:
    """The part at ``path`` when it is whole and is the shard's (its signature); else ``None``."""
    try:
        with np.load(io.BytesIO(path.read_bytes()), allow_pickle=False) as data:
            if (
                bytes(data["layout"]).decode() != PART_LAYOUT
                or bytes(data["signature"]).decode() != signature
            ):
                return None
            failures = json.loads(bytes(data["failures"]).decode())
            counts = data["counts"]
            part = Part(
                positions=np.asarray(data["positions"], dtype=np.int64),
                logits=np.asarray(data["logits"], dtype=np.float32),
                failures=tuple((int(i), str(reason)) for i, reason in failures),
                errors=tuple((str(k), str(m)) for k, m in json.loads(bytes(data["errors"]).decode())),
                n_model_failed=int(counts[0]),
                n_non_finite=int(counts[1]),
            )
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError, zipfile.BadZipFile):
        return None  # absent, cut short or not a part (UnicodeDecodeError is a ValueError)
    if part.logits.shape != (len(part.positions), part.logits.shape[1] if part.logits.ndim == 2 else -1):
        return None
    return part


def merge_parts(
    hits: dict[int, np.ndarray], parts: Sequence[Part], n_classes: int, model_name: str
) -> InferenceResult:
    """The cached logits ``hits`` and the parts, in shard order, as one process's result.

    Raises the broken-model ModelError when the model failed on every study with one error, as one
    process judges it.
    """
    computed = {int(i): row for part in parts for i, row in zip(part.positions, part.logits, strict=True)}
    failures = sorted(f for part in parts for f in part.failures)
    n_model_failed = sum(part.n_model_failed for part in parts)
    n_non_finite = sum(part.n_non_finite for part in parts)
    errors = sorted({error for part in parts for error in part.errors})
    if not computed and not n_non_finite and len(errors) == 1:  # as one process judges it
        raise broken_model_error(model_name, n_model_failed, errors[0])
    ok, logits = _in_index_order(hits, computed, n_classes)
    return InferenceResult(
        logits=logits,
        ok=np.asarray(ok, dtype=np.int64),
        failures=tuple(failures),
        n_cached=len(hits),
        n_model_failed=n_model_failed,
        n_non_finite=n_non_finite,
        model_errors=tuple(errors),
    )
