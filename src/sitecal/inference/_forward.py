"""One study at a time where it matters: the transform chain and the model's forward passes, each fault kept.

What :func:`~sitecal.inference.predict_files` and the batch-size and precision checks
(:mod:`sitecal.inference._settle`) both run: a MONAI ``Dataset`` whose items carry an exclusion reason
instead of raising (:class:`_SafeDataset`), and the forward passes that rerun a failing batch study by
study (:class:`_Forward`). Reasons hold no identifier: messages from MONAI, PyTorch and the model pass
through :func:`sitecal._scrub.safe_text`.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.data import Dataset
from monai.transforms import Compose

from sitecal._scrub import safe_text
from sitecal.errors import DicomError, ModelError
from sitecal.inference._precision import Precision, autocast

__all__ = ["NON_FINITE_LOGITS", "broken_model_error"]

logger = logging.getLogger(__name__)

#: The exclusion reason of a study whose logits hold NaN or infinity.
NON_FINITE_LOGITS = "the model returned non-finite logits"


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
