"""Cohort + model → logits, through a MONAI ``Dataset`` and ``DataLoader`` that lose no study silently."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.data import DataLoader, Dataset
from monai.transforms import Compose
from tqdm import tqdm

from sitecal.errors import DicomError, ModelError
from sitecal.inference.cache import LogitCache
from sitecal.inference.models import LoadedModel

__all__ = ["InferenceResult", "predict_files"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InferenceResult:
    """Logits for the files that loaded, and the reason for each that did not.

    ``logits`` has one row per entry of ``ok`` (ascending indices into the input list), float32 ``(n, C)``;
    ``n_cached`` of them came from the logit cache, ``n_computed`` were computed by the model.
    """

    logits: np.ndarray
    ok: np.ndarray
    failures: tuple[tuple[int, str], ...]
    n_cached: int = 0

    @property
    def n_computed(self) -> int:
        """Logits the model computed in this call."""
        return len(self.ok) - self.n_cached


class _SafeDataset(Dataset):
    """A MONAI Dataset whose items carry their index, and an error reason instead of raising."""

    def _transform(self, index: int) -> dict[str, Any]:
        try:
            image = super()._transform(index)
        except Exception as exc:  # each failure becomes an exclusion; the run goes on
            return {"index": index, "error": _reason(exc)}
        return {"index": index, "image": image}


def _reason(exc: BaseException) -> str:
    # the reader names every read and decode failure (a DicomError); MONAI's Compose may wrap it
    for cause in (exc, exc.__cause__, exc.__context__):
        if isinstance(cause, DicomError):
            return str(cause)
    return f"image cannot be loaded: a transform failed ({type(exc).__name__})"


def _collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    good = [item for item in items if "image" in item]
    return {
        "index": [item["index"] for item in good],
        "image": torch.stack([torch.as_tensor(item["image"]) for item in good]) if good else None,
        "failed": [(item["index"], item["error"]) for item in items if "error" in item],
    }


def predict_files(
    model: LoadedModel,
    files: Sequence[Path | Sequence[Path]],
    transforms: Compose,
    *,
    n_classes: int,
    batch_size: int = 32,
    num_workers: int = 0,
    device: str | torch.device = "cpu",
    progress: bool = False,
    cache: LogitCache | None = None,
    keys: Sequence[str] | None = None,
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
    batch_size, num_workers : int
        DataLoader settings; workers load and transform ahead of the model.
    device : str or torch.device
        Where the model runs.
    progress : bool
        Show a progress bar.
    cache : LogitCache, optional
        Logits already computed for this model and transform chain are taken from it (their images are
        not read) and every batch computed is added to it as it completes; needs ``keys``.
    keys : sequence of str, optional
        The cache key of each entry of ``files`` (:func:`sitecal.inference.cache.image_key`).

    Returns
    -------
    InferenceResult
    """
    if cache is not None and (keys is None or len(keys) != len(files)):
        raise ValueError("a logit cache needs one key per entry of files")
    cached = cache.load() if cache is not None else {}
    hits = {i: cached[k] for i, k in enumerate(keys or ()) if k in cached}
    todo = [i for i in range(len(files)) if i not in hits]
    dataset = _SafeDataset(data=[_item(files[i]) for i in todo], transform=transforms)
    loader = DataLoader(
        dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=_collate, shuffle=False
    )
    module = model.module
    was_training = module.training
    computed: dict[int, np.ndarray] = {}
    failures: list[tuple[int, str]] = []
    if todo:
        module.eval()
        module.to(device)
    try:
        with (
            torch.inference_mode(),
            tqdm(
                total=len(files), initial=len(hits), desc="Inference", unit="study", disable=not progress
            ) as bar,
        ):
            for batch in loader:
                failures.extend((todo[j], reason) for j, reason in batch["failed"])
                if batch["image"] is not None:
                    out = module(batch["image"].to(device=device, dtype=torch.float32))
                    rows = _as_logits(out, n_classes, model.name)
                    indices = [todo[j] for j in batch["index"]]
                    computed.update(zip(indices, rows, strict=True))
                    if cache is not None and keys is not None:
                        cache.store([keys[i] for i in indices], rows)
                bar.update(len(batch["index"]) + len(batch["failed"]))
    finally:
        module.train(was_training)
    if cache is not None and hits:
        logger.info("logit cache: %d of %d images already computed (%s)", len(hits), len(files), cache.folder)
    ok = sorted({*hits, *computed})
    stacked = (
        np.stack([hits[i] if i in hits else computed[i] for i in ok]).astype(np.float32)
        if ok
        else np.zeros((0, n_classes), dtype=np.float32)
    )
    return InferenceResult(
        logits=stacked,
        ok=np.asarray(ok, dtype=np.int64),
        failures=tuple(sorted(failures)),
        n_cached=len(hits),
    )


def _item(entry: Path | Sequence[Path]) -> str | list[str]:
    return str(entry) if isinstance(entry, (str, Path)) else [str(f) for f in entry]


def _as_logits(out: Any, n_classes: int, name: str) -> np.ndarray:
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise ModelError(f"model '{name}' returned {type(out).__name__}, expected a tensor of logits.")
    array = out.detach().float().cpu().numpy()
    if array.ndim == 2 and array.shape[1] == 1 and n_classes == 2:
        array = np.concatenate([np.zeros_like(array), array], axis=1)
    if array.ndim != 2 or array.shape[1] != n_classes:
        raise ModelError(
            f"model '{name}' returned logits of shape {tuple(array.shape)}; expected (batch, {n_classes}) "
            "for the protocol's model.class_names."
        )
    return array.astype(np.float32)
