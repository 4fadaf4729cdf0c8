"""Before a run: the batch size (``auto`` probed on a CUDA GPU) and the precision (checked against float32).

:func:`settle` is what :func:`~sitecal.inference.predict_files` does first; :func:`settle_inference` does it
alone, for a run split into shards that must all compute in one precision and the same batches. Both read
the first studies that load (:func:`first_studies`) and run the model on them in eval mode; neither touches
the logit cache. See :mod:`sitecal.inference._precision` and :mod:`sitecal.inference._batch_size`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from monai.transforms import Compose

from sitecal._text import plural
from sitecal.inference._batch_size import AUTO_BATCH_CAP, DEFAULT_BATCH_SIZE, largest_batch
from sitecal.inference._forward import (
    NON_FINITE_LOGITS,
    _as_logits,
    _cuda,
    _Forward,
    _item,
    _SafeDataset,
)
from sitecal.inference._precision import (
    CHECK_STUDIES,
    PRECISIONS,
    Precision,
    PrecisionCheck,
    autocast,
    max_probability_change,
    supported,
)
from sitecal.inference.models import LoadedModel

__all__ = ["check_options", "first_studies", "needs_sample", "settle", "settle_inference"]

logger = logging.getLogger(__name__)


def settle_inference(
    model: LoadedModel,
    files: Sequence[Path | Sequence[Path]],
    transforms: Compose,
    *,
    n_classes: int,
    batch_size: int | Literal["auto"] = DEFAULT_BATCH_SIZE,
    precision: Precision = "float32",
    tolerance: float = 1e-3,
    device: str | torch.device = "cpu",
    given: PrecisionCheck | None = None,
) -> tuple[int, PrecisionCheck]:
    """The batch size and precision :func:`~sitecal.inference.predict_files` would settle on, and its check.

    For a run split into shards, which must all compute in one precision and in the same batches: settle
    once, then give each shard ``predict_files(batch_size=size, precision_check=check)``. The first
    :data:`~sitecal.inference._precision.CHECK_STUDIES` studies of ``files`` that load (in order, of the
    first one's shape) are read when there is something to probe or check.

    Returns
    -------
    (int, PrecisionCheck)
        The batch size (``"auto"`` resolved) and the precision check.
    """
    check_options(batch_size, precision, tolerance)
    target = torch.device(device)
    module = model.module
    was_training = module.training
    # a check already made (a shard of a larger run) is taken as it is: only ``auto`` may need studies
    checked = "float32" if given else precision
    sample = first_studies(files, transforms) if needs_sample(batch_size, checked, target) else []
    try:
        if sample:
            module.eval()
            module.to(target)
        return settle(
            model,
            sample,
            n_classes=n_classes,
            device=target,
            batch_size=batch_size,
            precision=precision,
            tolerance=tolerance,
            given=given,
        )
    finally:
        module.train(was_training)


def needs_sample(batch_size: int | Literal["auto"], precision: Precision, device: torch.device) -> bool:
    """Whether settling reads studies: a precision to check, or ``auto`` to probe on a GPU."""
    return (precision != "float32" and supported(precision, device)) or (
        batch_size == "auto" and _cuda(device)
    )


def check_options(batch_size: object, precision: object, tolerance: object) -> None:
    if batch_size != "auto" and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(
            f"The 'batch_size' parameter of predict_files must be an int >= 1 or 'auto'. Got {batch_size!r}."
        )
    if precision not in PRECISIONS:
        raise ValueError(
            f"The 'precision' parameter of predict_files must be one of {', '.join(map(repr, PRECISIONS))}. "
            f"Got {precision!r}."
        )
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
        raise ValueError(
            "The 'precision_tolerance' parameter of predict_files must be a number in (0, 1). "
            f"Got {tolerance!r}."
        )


def first_studies(
    files: Sequence[Path | Sequence[Path]], transforms: Compose
) -> list[tuple[int, torch.Tensor]]:
    """The first CHECK_STUDIES studies that load, of the first one's shape, as (index, image).

    At most four times as many studies are read: a folder whose first studies mostly fail is checked on
    fewer (the run excludes those studies with their reasons).
    """
    dataset = _SafeDataset(data=[_item(f) for f in files[: 4 * CHECK_STUDIES]], transform=transforms)
    sample: list[tuple[int, torch.Tensor]] = []
    for j in range(len(dataset)):
        item = dataset[j]
        if "image" in item and (not sample or item["image"].shape == sample[0][1].shape):
            sample.append((j, item["image"]))
            if len(sample) == CHECK_STUDIES:
                break
    return sample


def settle(
    model: LoadedModel,
    sample: list[tuple[int, torch.Tensor]],
    *,
    n_classes: int,
    device: torch.device,
    batch_size: int | Literal["auto"],
    precision: Precision,
    tolerance: float,
    given: PrecisionCheck | None = None,
) -> tuple[int, PrecisionCheck]:
    """The batch size and precision of a run: ``auto`` probed, the precision checked (model in eval mode).

    ``given``: a check made before (a shard's), taken as it is.
    """
    if given is not None:
        if not supported(given.used, device):
            raise ValueError(
                f"The 'precision_check' parameter of predict_files says {given.used}, which {device} cannot "
                "run: check on a device of the same kind."
            )
        return _batch_size(model, sample, n_classes, device, batch_size, given.used), given
    if precision == "float32":
        check = PrecisionCheck(tolerance=tolerance)
        return _batch_size(model, sample, n_classes, device, batch_size, "float32"), check
    if not supported(precision, device):
        logger.warning(
            "inputs.precision %s cannot run on %s (float16 needs a CUDA GPU; bfloat16 a CPU or a GPU that "
            "has it): the model runs in float32",
            precision,
            device.type,
        )
        check = PrecisionCheck(precision, "float32", "unsupported", tolerance=tolerance)
        return _batch_size(model, sample, n_classes, device, batch_size, "float32"), check
    size = _batch_size(model, sample, n_classes, device, batch_size, precision)
    check = _compare(
        model,
        sample,
        n_classes=n_classes,
        device=device,
        batch_size=size,
        precision=precision,
        tolerance=tolerance,
    )
    if check.used != precision:  # float32 may need a smaller batch than the precision probed
        size = _batch_size(model, sample, n_classes, device, batch_size, check.used)
    return size, check


def _batch_size(
    model: LoadedModel,
    sample: list[tuple[int, torch.Tensor]],
    n_classes: int,
    device: torch.device,
    batch_size: int | Literal["auto"],
    precision: Precision,
) -> int:
    if batch_size != "auto":
        return batch_size
    if not _cuda(device) or not sample:
        logger.info("inputs.batch_size auto: %d on %s", DEFAULT_BATCH_SIZE, device)
        return DEFAULT_BATCH_SIZE
    images = torch.stack([image for _, image in sample]).to(device)

    def run(size: int) -> None:
        # the real inputs, repeated to ``size`` on the device, as the run's batch will be there
        batch = images[torch.arange(size, device=device) % len(images)]
        with torch.inference_mode(), autocast(precision, device):
            _as_logits(model.module(batch), n_classes, model.name)

    size = largest_batch(run, fallback=DEFAULT_BATCH_SIZE)
    logger.info(
        "inputs.batch_size auto: %d on %s (the largest power of two up to %d whose forward pass in %s fits)",
        size,
        device,
        AUTO_BATCH_CAP,
        precision,
    )
    return size


def _compare(
    model: LoadedModel,
    sample: list[tuple[int, torch.Tensor]],
    *,
    n_classes: int,
    device: torch.device,
    batch_size: int,
    precision: Precision,
    tolerance: float,
) -> PrecisionCheck:
    """Run ``sample`` in float32 and in ``precision``; the check's outcome and measured change."""
    requested = precision
    runs = {
        p: _Forward(model.module, n_classes=n_classes, name=model.name, device=device, precision=p)
        for p in ("float32", requested)
    }
    with torch.inference_mode():
        for start in range(0, len(sample), batch_size):
            part = sample[start : start + batch_size]
            for forward in runs.values():
                forward.batch([j for j, _ in part], torch.stack([image for _, image in part]))
    reference, other = runs["float32"], runs[requested]
    common = sorted(reference.computed)
    if not common:
        logger.warning(
            "inputs.precision %s could not be checked: no study of the first %d loaded and ran in float32; "
            "the model runs in float32",
            requested,
            len(sample),
        )
        return PrecisionCheck(requested, "float32", "no_studies", tolerance=tolerance)
    failed = [j for j in common if j not in other.computed]
    raised = [j for j in failed if any(k == j and r != NON_FINITE_LOGITS for k, r in other.failures)]
    if raised:
        kind, message = sorted(other.errors)[0]
        logger.warning(
            "the model failed under inputs.precision %s on %d of %d %s it runs in float32 (%s: %s): "
            "it runs in float32",
            requested,
            len(raised),
            len(common),
            plural(len(common), "study", "studies"),
            kind,
            message,
        )
        return PrecisionCheck(
            requested, "float32", "model_failed", tolerance=tolerance, n_studies=len(common)
        )
    change = (
        float("inf")
        if failed
        else max_probability_change(
            np.stack([reference.computed[j] for j in common]), np.stack([other.computed[j] for j in common])
        )
    )
    if change <= tolerance:
        logger.info(
            "inputs.precision %s: class probabilities within %.2g of float32 at temperatures 0.25 to 4 on "
            "%d %s (inputs.precision_tolerance %.2g)",
            requested,
            change,
            len(common),
            plural(len(common), "study", "studies"),
            tolerance,
        )
        return PrecisionCheck(requested, requested, "passed", change, tolerance, len(common))
    logger.warning(
        "inputs.precision %s changed a class probability by up to %.3g against float32 (temperatures 0.25 "
        "to 4, %d %s), above inputs.precision_tolerance %.2g: the model runs in float32",
        requested,
        change,
        len(common),
        plural(len(common), "study", "studies"),
        tolerance,
    )
    return PrecisionCheck(requested, "float32", "exceeded", change, tolerance, len(common))
