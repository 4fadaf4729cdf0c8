"""Cohort + model → logits, through a MONAI ``Dataset`` and ``DataLoader`` that lose no study silently.

Faults are isolated per study: an image that cannot be read, that a transform cannot take or whose values
are not finite after the transforms, a forward pass that raises for one study, and a row of non-finite
logits each become that study's exclusion reason, and the run goes on. Only a model that fails on every
study in the same way stops it (:class:`~sitecal.errors.ModelError`): then the model is broken, not the data.
Reasons hold no identifier: messages from MONAI, PyTorch and the model pass through
:func:`sitecal._scrub.safe_text`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from monai.data import DataLoader
from monai.transforms import Compose
from tqdm import tqdm

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
    """Run the model on each image after the transform chain.

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
        Studies per forward pass. ``"auto"``: on a CUDA device the largest power of two up to 256 whose
        forward pass fits in its memory, probed on the first studies that load; elsewhere 32 (see
        :mod:`sitecal.inference._batch_size`).
    num_workers : int
        DataLoader workers, which load and transform ahead of the model.
    device : str or torch.device
        Where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...). On CUDA, batches are loaded into
        pinned memory and copied to the device asynchronously.
    progress : bool
        Show a progress bar.
    cache : LogitCache, optional
        Logits already computed for this model and transform chain are taken from it (their images are
        not read) and the finite logits of every batch are added to it as it completes; needs ``keys``.
        It is the float32 logits' cache (:func:`~sitecal.inference.cache_identity` without ``precision``);
        a run in another precision uses ``cache.for_precision(...)`` instead.
    keys : sequence of str, optional
        The cache key of each entry of ``files`` (:func:`sitecal.inference.cache.image_key`).
    raise_if_broken : bool
        Raise :class:`~sitecal.errors.ModelError` when the model failed on every study with one error
        (``False``: a shard of a larger run, judged with the others; see ``model_errors``).
    precision : {"float32", "float16", "bfloat16"}, default "float32"
        Anything but float32 runs the model under :func:`torch.autocast`, once the first 32 studies that
        load show that it moves no class probability (at temperatures 0.25 to 4) by more than
        ``precision_tolerance`` against float32; otherwise, or where the device cannot run it, the run is in
        float32, with a logged warning (:mod:`sitecal.inference._precision`). Cached logits of one
        precision are never taken for another's.
    precision_tolerance : float, default 1e-3
        The largest change of a class probability the check accepts.
    precision_check : PrecisionCheck, optional
        A check already made on this model and chain (:func:`~sitecal.inference.settle_inference`; a shard of
        a larger run): its ``used`` precision is taken as it is, and ``precision`` and
        ``precision_tolerance`` are ignored.

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
    target = torch.device(device)
    module = model.module
    was_training = module.training
    if cache is not None and check.used != "float32":  # mixed-precision logits have a cache of their own
        cache = cache.for_precision(check.used)
    cached = cache.load() if cache is not None else {}
    # a non-finite row in the cache (written before such rows were refused) is computed again
    hits = {i: cached[k] for i, k in enumerate(keys or ()) if k in cached and np.isfinite(cached[k]).all()}
    todo = [i for i in range(len(files)) if i not in hits]
    dataset = _SafeDataset(data=[_item(files[i]) for i in todo], transform=transforms)
    loader = DataLoader(
        dataset,
        batch_size=size,
        num_workers=num_workers,
        collate_fn=_collate,
        shuffle=False,
        pin_memory=_cuda(target),
    )
    run = _Forward(module, n_classes=n_classes, name=model.name, device=target, precision=check.used)
    failures: list[tuple[int, str]] = []
    if todo:
        module.eval()
        module.to(target)
    try:
        with (
            torch.inference_mode(),
            tqdm(
                total=len(files), initial=len(hits), desc="Inference", unit="study", disable=not progress
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
    if raise_if_broken:
        run.raise_if_broken()
    failures.extend(run.failures)
    if cache is not None and hits:
        logger.info("logit cache: %d of %d images already computed (%s)", len(hits), len(files), cache.folder)
    if run.failures:
        logger.warning(
            "the model failed on %d studies and returned non-finite logits for %d; they are excluded",
            run.n_failed,
            run.n_non_finite,
        )
    ok = sorted({*hits, *run.computed})
    stacked = (
        np.stack([hits[i] if i in hits else run.computed[i] for i in ok]).astype(np.float32)
        if ok
        else np.zeros((0, n_classes), dtype=np.float32)
    )
    return InferenceResult(
        logits=stacked,
        ok=np.asarray(ok, dtype=np.int64),
        failures=tuple(sorted(failures)),
        n_cached=len(hits),
        n_model_failed=run.n_failed,
        n_non_finite=run.n_non_finite,
        model_errors=tuple(sorted(run.errors)),
        batch_size=size,
        precision_check=check,
    )
