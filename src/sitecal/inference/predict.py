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
import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from monai.data import DataLoader, Dataset
from monai.transforms import Compose
from tqdm import tqdm

from sitecal._scrub import safe_text
from sitecal.errors import DicomError, ModelError
from sitecal.inference._batch_size import DEFAULT_BATCH_SIZE
from sitecal.inference._precision import Precision, PrecisionCheck, autocast
from sitecal.inference.cache import LogitCache
from sitecal.inference.models import LoadedModel

__all__ = ["InferenceResult", "broken_model_error", "predict_files"]

logger = logging.getLogger(__name__)

#: The exclusion reason of a study whose logits hold NaN or infinity.
NON_FINITE_LOGITS = "the model returned non-finite logits"
#: Longest message, from a library or the model, copied into a reason.


@dataclass(frozen=True)
class InferenceResult:
    """Logits for the files that loaded, and the reason for each that did not.

    ``logits`` has one row per entry of ``ok`` (ascending indices into the input list), float32 ``(n, C)``,
    all finite; ``n_cached`` of them came from the logit cache, ``n_computed`` were computed by the model.
    ``failures`` holds ``(index, reason)`` for every other entry; ``n_model_failed`` of them are studies
    on which the model's forward pass raised, ``n_non_finite`` studies for which it returned NaN or
    infinity (:data:`NON_FINITE_LOGITS`), so that the report can count the model's faults apart from the
    images'. ``batch_size`` is the batch the model ran on (``inputs.batch_size: auto`` resolved; 0 when
    not recorded) and ``precision_check`` the precision its logits were computed in, with the check that
    chose it (:class:`~sitecal.inference.PrecisionCheck`).
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


class _SafeDataset(Dataset):
    """A MONAI Dataset whose items carry their index, and an error reason instead of raising."""

    def _transform(self, index: int) -> dict[str, Any]:
        try:
            image = _load(self.transform, self.data[index])
        except _Unusable as exc:  # each failure becomes an exclusion; the run goes on
            return {"index": index, "error": str(exc)}
        return {"index": index, "image": image}


class _Unusable(Exception):
    """An image the transform chain cannot turn into a model input; the message is the reason."""


def _load(transform: Any, item: Any) -> torch.Tensor:
    """Run the chain on one study, one transform at a time, so that a failure names its transform."""
    steps = list(transform.transforms) if isinstance(transform, Compose) else [transform]
    data = item
    for i, step in enumerate(steps):
        try:
            data = transform(data, start=i, end=i + 1) if isinstance(transform, Compose) else step(data)
        except Exception as exc:  # MONAI wraps the transform's own error; _transform_reason unwraps it
            raise _Unusable(_transform_reason(exc, type(step).__name__, data if i else None)) from None
    try:
        image = torch.as_tensor(data.as_tensor() if hasattr(data, "as_tensor") else data, dtype=torch.float32)
    except Exception:  # a custom chain may end in something that is not an array
        raise _Unusable(
            f"the transforms returned {type(data).__name__}, not an image array: end inputs.transforms with "
            "array transforms."
        ) from None
    if not torch.isfinite(image).all():
        raise _Unusable(
            "image values are not finite (NaN or infinity) after the transforms: check inputs.transforms "
            "(e.g. an intensity range of zero width)."
        )
    return image


def _transform_reason(exc: BaseException, name: str, image: Any) -> str:
    """The exclusion reason for ``exc``, raised by transform ``name`` applied to ``image``."""
    chain = _causes(exc)
    for cause in chain:
        if isinstance(cause, DicomError):  # the reader's reasons are written to be exclusion reasons
            return str(cause)
    kind = _describe(image)
    prefix = f"{kind} that the transforms cannot take" if kind else "a transform failed"
    return f"{prefix}: {name}: {_innermost(chain)[1]}"


def _describe(image: Any) -> str:
    """What kind of image the reader made of a study, or "" for a single greyscale image.

    ``colour image (3 samples per pixel)``, ``3-frame image`` or ``colour 3-frame image (...)``, from the
    metadata :class:`sitecal.inference.DicomImageReader` attaches.
    """
    meta = getattr(image, "meta", None)
    if not isinstance(meta, dict):
        return ""
    samples, frames = meta.get("samples_per_pixel", 1), meta.get("number_of_frames", 1)
    if not isinstance(samples, int) or not isinstance(frames, int):  # not sitecal's reader
        return ""
    colour = f"({samples} samples per pixel)" if samples > 1 else ""
    if frames > 1:
        return f"colour {frames}-frame image {colour}" if colour else f"{frames}-frame image"
    return f"colour image {colour}" if colour else ""


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and its explicit causes (``raise ... from``), outermost first; a cycle ends the walk."""
    chain = [exc]
    while (cause := chain[-1].__cause__) is not None and cause not in chain and len(chain) < 32:
        chain.append(cause)
    return chain


def _innermost(chain: Sequence[BaseException]) -> tuple[str, str]:
    """The type and safe message of the innermost exception of ``chain`` that says something.

    MONAI's ``RuntimeError("applying transform <...>")`` wrappers say nothing, so they are passed over; a
    TorchScript error's text is the script's traceback, whose last line holds the original type and
    message (``builtins.ValueError: ...``).
    """
    for exc in reversed(chain):
        text = str(exc).strip()
        if not text or text.startswith("applying transform"):
            continue
        kind = type(exc).__name__
        if "Traceback of TorchScript" in text:
            last = text.splitlines()[-1].strip()
            found = re.match(r"(?:builtins\.)?([A-Za-z_][\w.]*?(?:Error|Exception)):\s*(.*)", last)
            kind, text = (found.group(1).rsplit(".", 1)[-1], found.group(2)) if found else (kind, last)
        return kind, safe_text(text)
    return type(chain[-1]).__name__, "no message"


#: What may identify a patient or a site in a library's message, and what it is replaced with. Paths go
#: first (a folder name can hold a patient's name, birth date or record number), then any word with a
#: file name extension, a DICOM person name (``^``), UID-like runs of digits and dots, dates, and runs
#: of six or more digits (record and accession numbers). Memory addresses are dropped as noise.
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
    from sitecal.inference._settle import settle_inference

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


def _cuda(device: torch.device) -> bool:
    return device.type == "cuda"


class _Forward:
    """The model's forward passes over a run, with each study's fault kept apart.

    A batch whose forward pass raises is run again one study at a time, so that one study the model
    cannot take costs only that study; a row of non-finite logits is that study's exclusion.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        *,
        n_classes: int,
        name: str,
        device: torch.device,
        precision: Precision = "float32",
    ):
        self.module, self.n_classes, self.name, self.device = module, n_classes, name, device
        self.precision = precision
        #: a pinned batch is copied to a GPU asynchronously; the logits' copy back waits for it
        self.non_blocking = _cuda(device)
        self.computed: dict[int, np.ndarray] = {}
        self.failures: list[tuple[int, str]] = []
        self.n_failed = 0
        self.n_non_finite = 0
        #: (type, message) of each study's failure, and the first traceback (text: an exception object
        #: would keep its frames, and the batch on the device, alive)
        self.errors: set[tuple[str, str]] = set()
        self._first: str | None = None

    def batch(self, indices: list[int], images: torch.Tensor) -> list[int]:
        """Run the model on ``images`` (the studies ``indices``); return the indices that got logits."""
        rows = self._rows(images)
        done = []
        for index, row in zip(indices, rows, strict=True):
            if isinstance(row, tuple):
                self.errors.add(row)
                self.n_failed += 1
                self.failures.append((index, f"the model failed on this study ({row[0]}: {row[1]})"))
            elif not np.isfinite(row).all():
                self.n_non_finite += 1
                self.failures.append((index, NON_FINITE_LOGITS))
            else:
                self.computed[index] = row
                done.append(index)
        return done

    def _rows(self, images: torch.Tensor) -> list[np.ndarray | tuple[str, str]]:
        """A row of logits per image, or the (type, message) of the error its forward pass raised."""
        try:
            return list(self._logits(images))
        except _ForwardFailed as failed:
            if len(images) == 1:
                return [failed.signature]
        rows: list[np.ndarray | tuple[str, str]] = []
        for j in range(len(images)):
            try:
                rows.append(self._logits(images[j : j + 1])[0])
            except _ForwardFailed as failed:
                rows.append(failed.signature)
        return rows

    def _logits(self, images: torch.Tensor) -> np.ndarray:
        try:
            inputs = images.to(device=self.device, dtype=torch.float32, non_blocking=self.non_blocking)
            with autocast(self.precision, self.device):
                out = self.module(inputs)
        except Exception as exc:  # the model's own failure on these inputs; the caller isolates it
            self._first = self._first or "".join(traceback.format_exception(exc))
            raise _ForwardFailed(_innermost(_causes(exc))) from None
        return _as_logits(out, self.n_classes, self.name)  # a wrong output shape is the model's contract

    def raise_if_broken(self) -> None:
        """Raise ModelError when every study the model was run on failed, all with one error."""
        if self.computed or self.n_non_finite or len(self.errors) != 1:
            return
        logger.info("the model's first failure:\n%s", self._first)
        raise broken_model_error(self.name, self.n_failed, next(iter(self.errors)))


def broken_model_error(name: str, n_failed: int, error: tuple[str, str]) -> ModelError:
    """The error of a model that failed on every study it was given, each time with ``error``."""
    kind, message = error
    return ModelError(
        f"model '{name}' failed on every study it was given ({n_failed}), each time with "
        f"{kind}: {message}. The model is broken, not the data: check model.architecture, its "
        "arguments and weights, and the input shape inputs.transforms produce."
    )


class _ForwardFailed(Exception):
    def __init__(self, signature: tuple[str, str]) -> None:
        super().__init__(*signature)
        self.signature = signature


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
