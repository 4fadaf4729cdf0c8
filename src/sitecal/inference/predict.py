"""Cohort + model → logits, through a MONAI ``Dataset`` and ``DataLoader`` that lose no study silently.

Faults are isolated per study: an image that cannot be read, that a transform cannot take or whose values
are not finite after the transforms, a forward pass that raises for one study, and a row of non-finite
logits each become that study's exclusion reason, and the run goes on. Only a model that fails on every
study in the same way stops it (:class:`~sitecal.errors.ModelError`): then the model is broken, not the data.
Reasons hold no identifier: messages from MONAI, PyTorch and the model pass through
:func:`sitecal._scrub.safe_text`.

Notes
-----
How :func:`predict_files` batches, caches and chooses a precision:

- ``batch_size="auto"``: on a CUDA device the largest power of two up to 256 whose forward pass fits in
  its memory, probed on the first studies that load; elsewhere 32 (see
  :mod:`sitecal.inference._batch_size`). On CUDA, batches are loaded into pinned memory and copied to
  the device asynchronously.
- ``cache``: logits already computed for this model and transform chain are taken from it (their images
  are not read) and the finite logits of every batch are added to it as it completes. It is the float32
  logits' cache (:func:`~sitecal.inference.cache_identity` without ``precision``); a run in another
  precision uses ``cache.for_precision(...)`` instead. Cached logits of one precision are never taken
  for another's.
- ``precision`` other than float32 runs the model under :func:`torch.autocast`, once the first 32
  studies that load show that it moves no class probability (at temperatures 0.25 to 4) by more than
  ``precision_tolerance`` against float32; otherwise, or where the device cannot run it, the run is in
  float32, with a logged warning (:mod:`sitecal.inference._precision`). A ``precision_check`` already
  made on this model and chain (:func:`~sitecal.inference.settle_inference`; a shard of a larger run)
  is taken as it is: its ``used`` precision, with ``precision`` and ``precision_tolerance`` ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from monai.data import DataLoader
from monai.transforms import Compose

from sitecal._progress import progress_bar
from sitecal._text import plural
from sitecal.inference._batch_size import DEFAULT_BATCH_SIZE
from sitecal.inference._forward import _cuda, _Forward, _item, _SafeDataset
from sitecal.inference._precision import Precision, PrecisionCheck
from sitecal.inference._settle import settle_inference
from sitecal.inference.cache import LogitCache
from sitecal.inference.models import LoadedModel

__all__ = ["InferenceResult", "predict_files"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InferenceResult:
    """Logits for the files that loaded, and the reason for each that did not.

    ``logits`` has one row per entry of ``ok`` (ascending indices into the input list), float32 ``(n, C)``,
    all finite; ``n_cached`` of them came from the logit cache, ``n_computed`` were computed by the model.
    ``failures`` holds ``(index, reason)`` for every other entry; ``n_model_failed`` of them are studies
    on which the model's forward pass raised, ``n_non_finite`` studies for which it returned NaN or
    infinity (:data:`sitecal.inference._forward.NON_FINITE_LOGITS`), so that the report can count the
    model's faults apart from the images'. ``batch_size`` is the batch the model ran on
    (``inputs.batch_size: auto`` resolved; 0 when not recorded) and ``precision_check`` the precision its
    logits were computed in, with the check that chose it (:class:`~sitecal.inference.PrecisionCheck`).
    """

    logits: np.ndarray
    ok: np.ndarray
    failures: tuple[tuple[int, str], ...]
    n_cached: int = 0
    n_model_failed: int = 0
    n_non_finite: int = 0
    #: The distinct (type, message) of the model's failures (sharded runs judge a broken model from them).
    model_errors: tuple[tuple[str, str], ...] = ()
    batch_size: int = 0
    precision_check: PrecisionCheck = field(default_factory=PrecisionCheck)

    @property
    def n_computed(self) -> int:
        """Logits the model computed in this call."""
        return len(self.ok) - self.n_cached


def _collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    # images of one shape are stacked together: a chain without Resize gives the model each size apart,
    # instead of a batch that cannot be stacked
    groups: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for item in items:
        if "image" in item:
            groups.setdefault(tuple(item["image"].shape), []).append(item)
    return {
        "groups": [
            ([item["index"] for item in group], torch.stack([item["image"] for item in group]))
            for group in groups.values()
        ],
        "failed": [(item["index"], item["error"]) for item in items if "error" in item],
    }


def predict_files(
    model: LoadedModel,
    files: Sequence[Path | Sequence[Path]],
    transforms: Compose,
    *,
    n_classes: int,
    batch_size: int | Literal["auto"] = DEFAULT_BATCH_SIZE,
    num_workers: int = 0,
    device: str | torch.device = "cpu",
    progress: bool = False,
    cache: LogitCache | None = None,
    keys: Sequence[str] | None = None,
    raise_if_broken: bool = True,
    precision: Precision = "float32",
    precision_tolerance: float = 1e-3,
    precision_check: PrecisionCheck | None = None,
) -> InferenceResult:
    """Run the model on each image after the transform chain (batching, cache and precision: see Notes).

    Parameters
    ----------
    model : LoadedModel
        The model (kept in eval mode; restored if it was training).
    files : sequence of Path, or of sequences of Path
        One image per study: a file, or the files of a series (a volume).
    transforms : monai.transforms.Compose
        Loading and preprocessing, from :func:`sitecal.inference.transforms.build_transforms`.
    n_classes : int
        Expected number of logits per study; a single logit is read as a binary model ``[0, z]``.
    batch_size : int or "auto", default 32
        Studies per forward pass; ``"auto"`` probes a CUDA device's memory.
    num_workers : int
        DataLoader workers, which load and transform ahead of the model.
    device : str or torch.device
        Where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...).
    progress : bool
        Show a progress bar.
    cache : LogitCache, optional
        The float32 logits' cache, read before and written after each batch; needs ``keys``.
    keys : sequence of str, optional
        The cache key of each entry of ``files`` (:func:`sitecal.inference.cache.image_key`).
    raise_if_broken : bool
        Raise :class:`~sitecal.errors.ModelError` when the model failed on every study with one error
        (``False``: a shard of a larger run, judged with the others; see ``model_errors``).
    precision : {"float32", "float16", "bfloat16"}, default "float32"
        The precision to run in under :func:`torch.autocast`, if the check against float32 accepts it.
    precision_tolerance : float, default 1e-3
        The largest change of a class probability the check accepts.
    precision_check : PrecisionCheck, optional
        A check already made on this model and chain, taken as it is.

    Returns
    -------
    InferenceResult
        A study that cannot be read or transformed, on which the model raises, or for which it returns a
        non-finite logit is in ``failures`` with its reason; the run goes on.

    Raises
    ------
    ModelError
        When the model returns something other than ``(batch, n_classes)`` logits, or fails on every study
        it is given with the same error.
    """
    if cache is not None and (keys is None or len(keys) != len(files)):
        raise ValueError("a logit cache needs one key per entry of files")
    size, check = settle_inference(
        model,
        files,
        transforms,
        n_classes=n_classes,
        batch_size=batch_size,
        precision=precision,
        tolerance=precision_tolerance,
        device=device,
        given=precision_check,
    )
    cache, hits = _cached_logits(cache, keys, check.used)
    target = torch.device(device)
    run = _Forward(model.module, n_classes=n_classes, name=model.name, device=target, precision=check.used)
    todo, loader = _loader(files, hits, transforms, size, num_workers=num_workers, device=target)
    failures = _run_batches(run, loader, todo, cache, keys, n_cached=len(hits), progress=progress)
    if raise_if_broken:
        run.raise_if_broken()
    _log_outcome(run, len(hits), len(files), cache)
    return _result(hits, run, failures, n_classes=n_classes, batch_size=size, check=check)


def _cached_logits(
    cache: LogitCache | None, keys: Sequence[str] | None, precision: Precision
) -> tuple[LogitCache | None, dict[int, np.ndarray]]:
    """The cache of ``precision``'s logits, and the finite logits it holds by position in ``keys``."""
    if cache is not None and precision != "float32":  # mixed-precision logits have a cache of their own
        cache = cache.for_precision(precision)
    cached = cache.load() if cache is not None else {}
    # a non-finite row in the cache (written before such rows were refused) is computed again
    hits = {i: cached[k] for i, k in enumerate(keys or ()) if k in cached and np.isfinite(cached[k]).all()}
    return cache, hits


def _loader(
    files: Sequence[Path | Sequence[Path]],
    hits: Mapping[int, np.ndarray],
    transforms: Compose,
    batch_size: int,
    *,
    num_workers: int,
    device: torch.device,
) -> tuple[list[int], DataLoader]:
    """The studies not in ``hits`` (indices into ``files``), and their batches in order.

    Batches are loaded into pinned memory for a CUDA device.
    """
    todo = [i for i in range(len(files)) if i not in hits]
    return todo, DataLoader(
        _SafeDataset(data=[_item(files[i]) for i in todo], transform=transforms),
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=_collate,
        shuffle=False,
        pin_memory=_cuda(device),
    )


def _run_batches(
    run: _Forward,
    loader: DataLoader,
    todo: list[int],
    cache: LogitCache | None,
    keys: Sequence[str] | None,
    *,
    n_cached: int,
    progress: bool,
) -> list[tuple[int, str]]:
    """Run the model on every batch of ``loader`` in eval mode, storing each batch's logits in ``cache``.

    ``todo`` maps a position in the loader's data to the study's index; the progress bar counts the
    ``n_cached`` studies whose logits came from the cache besides. Returns the studies that could not be
    read or transformed, with their reasons; the model's own failures stay on ``run``. The module is put
    back in training mode if it was in it, whatever happens.
    """
    module = run.module
    was_training = module.training
    failures: list[tuple[int, str]] = []
    if todo:
        module.eval()
        module.to(run.device)
    try:
        with (
            torch.inference_mode(),
            progress_bar(
                total=n_cached + len(todo),
                initial=n_cached,
                desc="Inference",
                unit="study",
                disable=not progress,
            ) as bar,
        ):
            for batch in loader:
                failures.extend((todo[j], reason) for j, reason in batch["failed"])
                for positions, images in batch["groups"]:
                    indices = [todo[j] for j in positions]
                    stored = run.batch(indices, images)
                    if cache is not None and keys is not None and stored:
                        cache.store([keys[i] for i in stored], np.stack([run.computed[i] for i in stored]))
                    bar.update(len(indices))
                bar.update(len(batch["failed"]))
    finally:
        module.train(was_training)
    return failures


def _log_outcome(run: _Forward, n_hits: int, n_files: int, cache: LogitCache | None) -> None:
    """Log how many logits came from the cache and how many studies the model failed on."""
    if cache is not None and n_hits:
        logger.info(
            "logit cache: %d of %d %s already computed (%s)",
            n_hits,
            n_files,
            plural(n_files, "image"),
            cache.folder,
        )
    if run.failures:
        logger.warning(
            "the model failed on %d %s and returned non-finite logits for %d; they are excluded",
            run.n_failed,
            plural(run.n_failed, "study", "studies"),
            run.n_non_finite,
        )


def _result(
    hits: dict[int, np.ndarray],
    run: _Forward,
    failures: list[tuple[int, str]],
    *,
    n_classes: int,
    batch_size: int,
    check: PrecisionCheck,
) -> InferenceResult:
    """The logits of the cached and computed studies in index order, float32, and every failure.

    ``failures`` are the studies that could not be read or transformed; the model's are on ``run``.
    """
    ok, stacked = _in_index_order(hits, run.computed, n_classes)
    return InferenceResult(
        logits=stacked,
        ok=np.asarray(ok, dtype=np.int64),
        failures=tuple(sorted([*failures, *run.failures])),
        n_cached=len(hits),
        n_model_failed=run.n_failed,
        n_non_finite=run.n_non_finite,
        model_errors=tuple(sorted(run.errors)),
        batch_size=batch_size,
        precision_check=check,
    )


def _in_index_order(
    hits: Mapping[int, np.ndarray], computed: Mapping[int, np.ndarray], n_classes: int
) -> tuple[list[int], np.ndarray]:
    """The indices that have logits, ascending, and their rows (cached or computed) as float32 ``(n, C)``."""
    ok = sorted({*hits, *computed})
    stacked = (
        np.stack([hits[i] if i in hits else computed[i] for i in ok]).astype(np.float32)
        if ok
        else np.zeros((0, n_classes), dtype=np.float32)
    )
    return ok, stacked
