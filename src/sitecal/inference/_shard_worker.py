"""A shard's task on a Dask worker: its description (:class:`ShardJob`) and what the worker does with it.

:func:`run_shard` loads the model (once per worker process, checking its sha256 against the one the run
recorded), computes the shard's logits with :func:`~sitecal.inference.predict.predict_files` on the
worker's own device, and writes them as the shard's part. How shards are cut, submitted and merged is
:mod:`sitecal.inference._sharded`'s.
"""

from __future__ import annotations

import hashlib
import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sitecal.errors import ModelError
from sitecal.inference._precision import PrecisionCheck
from sitecal.inference._shard_parts import Part, write_part
from sitecal.protocol import InputSettings, ModelSettings

__all__ = ["ShardJob", "run_shard"]


@dataclass(frozen=True, repr=False)
class ShardJob:
    """One shard: what a worker needs to compute its logits and where to write its part."""

    index: int
    positions: tuple[int, ...]  # the studies' places in the run's list
    items: tuple[str | tuple[str, ...], ...]  # a file, or a series' files, per study (never in a repr)
    model: ModelSettings
    model_path: Path
    model_sha256: str
    inputs: InputSettings
    n_classes: int
    device: str
    part: Path
    signature: str
    batch_size: int
    precision_check: PrecisionCheck

    def __repr__(self) -> str:  # Dask logs a failed task's arguments: paths can hold names
        return f"ShardJob(shard {self.index}, {len(self.positions)} studies)"


def run_shard(job: ShardJob) -> str:
    """A worker's task: the shard's logits, written as its part; returns the part's file name."""
    from sitecal.inference.predict import predict_files

    loaded, transforms = _worker_model(job)
    result = predict_files(
        loaded,
        [Path(i) if isinstance(i, str) else [Path(f) for f in i] for i in job.items],
        transforms,
        n_classes=job.n_classes,
        batch_size=job.batch_size,
        # a Dask worker is a daemonic process, which may not start DataLoader processes: it loads its
        # shard itself (the cluster's workers are the parallel loaders; the logits are the same)
        num_workers=0 if multiprocessing.current_process().daemon else job.inputs.num_workers,
        device=_worker_device(job.device),
        progress=False,
        raise_if_broken=False,  # whether the model is broken is judged over every shard together
        precision_check=job.precision_check,  # the run's, settled once: no shard checks again
    )
    part = Part(
        positions=np.asarray([job.positions[i] for i in result.ok], dtype=np.int64),
        logits=result.logits.astype(np.float32),
        failures=tuple((job.positions[i], reason) for i, reason in result.failures),
        errors=result.model_errors,
        n_model_failed=result.n_model_failed,
        n_non_finite=result.n_non_finite,
    )
    write_part(job.part, part, job.signature)
    return job.part.name


def _worker_device(device: str) -> str:
    """A LocalCluster worker's own GPU for ``"cuda"`` (worker ``i`` on ``cuda:i``); else ``device``."""
    if device != "cuda":
        return device
    import torch

    count = torch.cuda.device_count()
    try:
        from distributed import get_worker

        name = get_worker().name
    except (ImportError, ValueError):
        return device
    return f"cuda:{name % count}" if isinstance(name, int) and count > 1 else device


#: The model and transforms a worker process has loaded, by (model sha256, inputs): loaded once per worker.
_LOADED: dict[str, tuple[Any, Any]] = {}


def _worker_model(job: ShardJob) -> tuple[Any, Any]:
    from sitecal.inference.models import load_model
    from sitecal.inference.transforms import build_transforms

    token = hashlib.sha256(
        f"{job.model_sha256}\0{job.model.model_dump_json()}\0{job.inputs.model_dump_json()}".encode()
    ).hexdigest()
    if token not in _LOADED:
        loaded = load_model(job.model, job.model_path)
        if loaded.sha256 != job.model_sha256:
            raise ModelError(
                f"model.path: the model a worker read (sha256 {loaded.sha256[:12]}...) is not the one this "
                f"run started with ({job.model_sha256[:12]}...): was the file replaced during the run, or "
                "does the worker see another file at that path?"
            )
        transforms = build_transforms(
            job.inputs.transforms, voi=job.inputs.voi, max_values=job.inputs.max_pixels_per_image
        )
        _LOADED.clear()
        _LOADED[token] = (loaded, transforms)
    return _LOADED[token]
