"""Sharded inference on Dask: one task per shard of studies, each writing its part atomically.

``sitecal predict --dask-workers N`` (a ``LocalCluster`` of N worker processes) or ``--scheduler ADDRESS``
(a cluster already running, e.g. one dask-jobqueue started on a hospital's Slurm) runs the model here
instead of in one process. Scheduling, placement, retries and progress are Dask's:

- the studies still to compute (those the logit cache does not hold) are cut, in the order a single
  process would run them, into shards of ``shard_size`` studies, a multiple of ``inputs.batch_size``, so
  that every shard's batches are the single process's batches and its logits the same bit for bit (a
  model's float32 output can move in the last bits with the batch it is computed in);
- each shard is one Dask task (:func:`run_shard`): the worker loads the model (once per worker process,
  checking its sha256 against the one the run recorded), runs
  :func:`~sitecal.inference.predict.predict_files` on the shard and writes ``shard-<index>.npz`` (no
  pickle: positions, float32 logits, failures) atomically into the parts folder, which must be on a file
  system the workers share with the process that submits (for a ``LocalCluster``, any folder);
- a worker that dies mid-shard (killed, out of memory, its node lost) has its shard run again on another
  worker by the scheduler (up to ``distributed.scheduler.allowed-failures`` times, 3 by default); a shard
  whose task raises is retried :data:`TASK_RETRIES` times;
- a part already written for the same shard (same model, transforms, batch size and studies: its
  signature) is taken as it is, so a submitting process killed half-way loses only the shards under way;
- the parts merge, in shard order, into one :class:`~sitecal.inference.predict.InferenceResult` equal to a
  single process's; the parts folder is removed once merged and the logits are in the logit cache.

A shard's task description holds file paths; its ``repr`` (what Dask writes in a log when a task fails)
names only the shard's number and size. With ``device="cuda"`` on a ``LocalCluster``, worker ``i`` runs on
``cuda:i`` (one worker per GPU, ``--dask-workers`` defaulting to the number of GPUs); on another cluster each
worker uses the device it is given (dask-cuda's workers each see one GPU as ``cuda``).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sitecal._text import plural
from sitecal.errors import DataError, ModelError
from sitecal.inference._precision import PrecisionCheck
from sitecal.inference._shard_parts import PART_LAYOUT, Part, merge_parts, read_part
from sitecal.inference._shard_worker import ShardJob, run_shard
from sitecal.inference.cache import LogitCache
from sitecal.inference.predict import InferenceResult, _cached_logits
from sitecal.protocol import InputSettings, ModelSettings

__all__ = [
    "TASK_RETRIES",
    "Placement",
    "ShardJob",
    "predict_sharded",
    "run_shard",
    "scheduler_problem",
    "shard_size_for",
]

logger = logging.getLogger(__name__)

#: Times a shard whose task raised is submitted again (a worker's death is counted by the scheduler).
TASK_RETRIES = 2
#: Studies per shard when none is asked for (rounded up to a multiple of the batch size).
DEFAULT_SHARD_SIZE = 256


@dataclass(frozen=True)
class Placement:
    """Where shards run: a new ``LocalCluster`` of ``n_workers`` processes, or the cluster ``scheduler``."""

    n_workers: int | None = None
    scheduler: str | None = None
    shard_size: int = DEFAULT_SHARD_SIZE

    def __post_init__(self) -> None:
        if self.n_workers is not None and self.n_workers < 1:
            raise DataError(f"--dask-workers {self.n_workers}: give at least 1 worker.")
        if self.shard_size < 1:
            raise DataError(f"--shard-size {self.shard_size}: give at least 1 study per shard.")


def shard_size_for(requested: int, batch_size: int) -> int:
    """``requested`` rounded up to a multiple of ``batch_size``: shards then hold whole batches."""
    return max(1, -(-requested // batch_size)) * batch_size


def predict_sharded(
    *,
    model: ModelSettings,
    model_path: Path,
    model_sha256: str,
    inputs: InputSettings,
    items: Sequence[Path | Sequence[Path]],
    keys: Sequence[str],
    n_classes: int,
    identity_sha256: str,
    cache: LogitCache | None,
    parts_dir: Path,
    placement: Placement,
    batch_size: int,
    precision_check: PrecisionCheck,
    device: str = "cpu",
    progress: bool = True,
) -> InferenceResult:
    """Logits of every study, computed shard by shard on Dask workers; equal to one process's run.

    ``identity_sha256`` names the model and transform chain (the logit cache identity's sha256): with the
    batch size, the precision and the shard's keys it makes the part's signature. ``batch_size`` and
    ``precision_check`` are settled once for the whole run
    (:func:`~sitecal.inference._settle.settle_inference`), so that every shard computes as one process.
    """
    if len(keys) != len(items):
        raise ValueError("sharded inference needs one key per entry of items")
    cache, hits = _cached_logits(cache, keys, precision_check.used)
    todo = [i for i in range(len(items)) if i not in hits]
    size = shard_size_for(placement.shard_size, batch_size)
    jobs = [
        _job(
            index,
            todo[start : start + size],
            items=items,
            keys=keys,
            model=model,
            model_path=model_path,
            model_sha256=model_sha256,
            inputs=inputs,
            n_classes=n_classes,
            device=device,
            parts_dir=parts_dir,
            identity_sha256=identity_sha256,
            batch_size=batch_size,
            precision_check=precision_check,
        )
        for index, start in enumerate(range(0, len(todo), size))
    ]
    parts = _parts_left(jobs)
    missing = [job for job in jobs if job.index not in parts]
    if missing:
        parts |= _run_on_dask(missing, placement, device, cache, keys, n_done=len(parts), progress=progress)
    result = replace(
        merge_parts(hits, [parts[job.index] for job in jobs], n_classes, model.name),
        batch_size=batch_size,
        precision_check=precision_check,
    )
    shutil.rmtree(parts_dir, ignore_errors=True)
    return result


def _parts_left(jobs: Sequence[ShardJob]) -> dict[int, Part]:
    """The parts a killed run left for these shards (same signature), by shard index: taken as they are."""
    parts: dict[int, Part] = {}
    for job in jobs:
        part = read_part(job.part, job.signature)
        if part is not None:
            parts[job.index] = part
    if len(parts):
        logger.info(
            "sharded inference: %d of %d %s already computed",
            len(parts),
            len(jobs),
            plural(len(jobs), "shard"),
        )
    return parts


def _run_on_dask(
    missing: Sequence[ShardJob],
    placement: Placement,
    device: str,
    cache: LogitCache | None,
    keys: Sequence[str],
    *,
    n_done: int,
    progress: bool,
) -> dict[int, Part]:
    """Run the shards ``missing`` on Dask; their parts by shard index, each stored in ``cache`` as it comes.

    The progress bar counts ``n_done`` shards already written besides. A shard's error is raised here,
    once its retries are spent.
    """
    from sitecal._progress import progress_bar

    parts: dict[int, Part] = {}
    with (
        _DaskClient(placement, device) as client,
        progress_bar(
            total=n_done + len(missing),
            initial=n_done,
            desc="Inference shards",
            unit="shard",
            disable=not progress,
        ) as bar,
    ):
        from distributed import as_completed

        futures = {
            client.submit(
                run_shard,
                job,
                key=f"sitecal-shard-{job.index:05d}-{job.signature[:12]}",
                retries=TASK_RETRIES,
                pure=False,
            ): job
            for job in missing
        }
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            job = futures[future]
            _result(future, job)  # re-raises a shard's error here, after its retries
            part = _written_part(job)
            parts[job.index] = part
            if cache is not None and len(part.positions):
                cache.store([keys[i] for i in part.positions], part.logits)
            bar.update(1)
    return parts


def _written_part(job: ShardJob) -> Part:
    """The part a worker reported written; ModelError when it cannot be read here."""
    part = read_part(job.part, job.signature)
    if part is None:
        raise ModelError(
            f"shard {job.index}: its worker reported it written, but the part "
            f"{job.part.name} in {job.part.parent} cannot be read. Is the parts folder on a file "
            "system every worker shares with this machine?"
        )
    return part


def _result(future: Any, job: ShardJob) -> None:
    from distributed import KilledWorker

    try:
        future.result()
    except KilledWorker:
        n = len(job.positions)
        raise DataError(
            f"shard {job.index} ({n} {plural(n, 'study', 'studies')}): the workers running it died each "
            "time it was tried (distributed.scheduler.allowed-failures), most often from lack of memory. "
            "Lower --shard-size or inputs.batch_size, or give the workers more memory, and run again: the "
            "shards already written are kept and not computed again."
        ) from None


def scheduler_problem(address: str) -> str | None:
    """Why no Dask scheduler answers at ``address`` (checked before the scan), or ``None``."""
    try:
        _connect(address).close()
    except DataError as exc:
        return str(exc)
    return None


def _connect(address: str) -> Any:
    """A client of the scheduler at ``address``; DataError naming the address when none answers."""
    from distributed import Client

    try:
        return Client(address, timeout="15s")  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as exc:
        raise DataError(
            f"--scheduler {address}: no Dask scheduler answered ({type(exc).__name__}). Check the address "
            "(tcp://host:8786) and that the scheduler is running."
        ) from None


def _job(
    index: int,
    positions: list[int],
    *,
    items: Sequence[Path | Sequence[Path]],
    keys: Sequence[str],
    model: ModelSettings,
    model_path: Path,
    model_sha256: str,
    inputs: InputSettings,
    n_classes: int,
    device: str,
    parts_dir: Path,
    identity_sha256: str,
    batch_size: int,
    precision_check: PrecisionCheck,
) -> ShardJob:
    digest = hashlib.sha256(
        f"{PART_LAYOUT}\0{identity_sha256}\0{batch_size}\0{precision_check.used}".encode()
    )
    for i in positions:
        digest.update(b"\0" + keys[i].encode())
    return ShardJob(
        index=index,
        positions=tuple(positions),
        items=tuple(_item(items[i]) for i in positions),
        model=model,
        model_path=model_path,
        model_sha256=model_sha256,
        inputs=inputs,
        n_classes=n_classes,
        device=device,
        part=parts_dir / f"shard-{index:05d}.npz",
        signature=digest.hexdigest(),
        batch_size=batch_size,
        precision_check=precision_check,
    )


def _item(entry: Path | Sequence[Path]) -> str | tuple[str, ...]:
    return str(entry) if isinstance(entry, (str, Path)) else tuple(str(f) for f in entry)


class _DaskClient:
    """A Dask client on the cluster at ``placement.scheduler``, or on a new ``LocalCluster`` it closes."""

    def __init__(self, placement: Placement, device: str) -> None:
        self.placement, self.device = placement, device
        self.cluster: Any = None
        self.client: Any = None

    def __enter__(self) -> Any:
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - a dependency of the package
            raise DataError(
                "sharded inference needs dask.distributed: pip install 'dask[distributed]'"
            ) from None
        if self.placement.scheduler is not None:
            self.client = _connect(self.placement.scheduler)
            return self._quiet(self.client)
        self.cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=self.placement.n_workers or _default_workers(self.device),
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        self.client = Client(self.cluster)  # type: ignore[no-untyped-call]
        return self._quiet(self.client)

    @staticmethod
    def _quiet(client: Any) -> Any:
        from sitecal._worker_logs import QuietWorkerLogs

        client.register_plugin(QuietWorkerLogs())
        return client

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _default_workers(device: str) -> int:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.device_count()
    return 2
