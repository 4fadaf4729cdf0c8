"""The 2-D demo model: its training data, training run and model card, and the check through the DICOM files.

Training images are made by the package's generator code (:func:`sitecal.demo.synthesize_stored`, the
in-memory twin of :func:`sitecal.demo.generate_demo`), turned into presentation values by
:func:`sitecal.demo.stored_to_presentation` (the arithmetic of :func:`sitecal.demo.presentation_values`,
driven by the scanner profile instead of a header) and into model inputs by :func:`preprocess_batch`, the
batched twin of the protocol's MONAI transforms; ``tests/demo`` checks both equalities.

After training, a temperature is fitted on the reference scanner's validation set and folded into the
last layer, as a vendor would ship a model calibrated on its development data. The model is therefore
calibrated on the reference scanner; on the other scanners it is less accurate but about as confident:
over-confident, which is what per-scanner temperature scaling is there to fix.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
import torch
import torch.nn.functional as F
from _checks import ScannerCheck, scanner_checks
from _training import TrainingResult as _TrainingResult
from _training import (
    check_config,
    deterministic_threads,
    fit_classifier,
    fold_temperature,
    model_card,
    training_result,
    write_card,
    write_weights,
)
from numpy.typing import NDArray

from sitecal.demo import (
    CLASS_NAMES,
    DEMO_INPUT_SHAPE,
    DEMO_SPATIAL_SIZE,
    DEMO_TRANSFORMS,
    REFERENCE_SCANNER,
    DemoManifest,
    DemoNet,
    ScannerProfile,
    demo_transforms,
    load_demo_model,
    presentation_values,
    scanner_by_key,
    stored_to_presentation,
    synthesize_stored,
)

__all__ = [
    "TrainingConfig",
    "TrainingResult",
    "check_cohort",
    "model_inputs",
    "preprocess_batch",
    "train_model",
    "write_model",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingConfig:
    """Settings of one training run (all recorded in the model card); the defaults made the shipped model."""

    seed: int = 0
    scanner: str = REFERENCE_SCANNER
    n_train: int = 6000
    n_val: int = 1500
    epochs: int = 10
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    threads: int = 2


TrainingResult = _TrainingResult[DemoNet]
"""The trained model (eval mode, temperature folded in) and its record."""


def preprocess_batch(images: NDArray[np.floating] | torch.Tensor) -> torch.Tensor:
    """Batched equivalent of :func:`sitecal.demo.demo_transforms` applied to each image.

    MONAI's ``Resize`` defaults to ``mode="area"`` without anti-aliasing, and ``NormalizeIntensity``
    divides by the population standard deviation (``unbiased=False``), replacing a zero deviation by 1;
    this does the same arithmetic on a whole batch at once (MONAI's per-image overhead would dominate
    training time). A test keeps the two equal.

    Parameters
    ----------
    images : array or tensor, shape (N, Rows, Columns)
        Presentation values, as :func:`sitecal.demo.presentation_values` returns them.

    Returns
    -------
    torch.Tensor of float32, shape (N, 1, 64, 64)
        Area-resized, then each image shifted to mean 0 and divided by its population standard deviation
        (left undivided where that deviation is 0).
    """
    x = torch.as_tensor(images, dtype=torch.float32)[:, None]
    x = F.interpolate(x, size=DEMO_SPATIAL_SIZE, mode="area")
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    std = x.std(dim=(1, 2, 3), keepdim=True, unbiased=False)
    std = torch.where(std == 0.0, torch.ones_like(std), std)
    return (x - mean) / std


def model_inputs(stored: NDArray[np.uint16], scanner: ScannerProfile) -> torch.Tensor:
    """Model inputs (N, 1, 64, 64) from stored values: presentation values, then the demo transforms.

    Equal to ``demo_transforms()(presentation_values(ds))`` for each image written as DICOM by the
    generator (tested in ``tests/demo``).
    """
    out = [
        preprocess_batch(stored_to_presentation(stored[i : i + 512], scanner))
        for i in range(0, len(stored), 512)
    ]
    return torch.cat(out) if out else torch.empty((0, *DEMO_INPUT_SHAPE))


def _data(n: int, scanner: ScannerProfile, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for start in range(0, n, 512):  # bounded memory: stored arrays are dropped chunk by chunk
        stored, labels = synthesize_stored(min(512, n - start), scanner, rng)
        xs.append(model_inputs(stored, scanner))
        ys.append(torch.from_numpy(labels))
    return torch.cat(xs), torch.cat(ys)


def train_model(config: TrainingConfig | None = None) -> TrainingResult:
    """Train :class:`sitecal.demo.DemoNet` on images of one scanner, deterministically.

    Parameters
    ----------
    config : TrainingConfig, optional
        Defaults: seed 0, the reference scanner, 6,000 training and 1,500 validation images, 10 epochs
        of AdamW with a one-cycle learning rate, 2 threads (about a minute on 2 CPU cores).

    Returns
    -------
    TrainingResult
        The model in eval mode with the validation temperature folded into its last layer.
    """
    config = config or TrainingConfig()
    check_config(config, scanner_by_key)
    scanner = scanner_by_key(config.scanner)
    with deterministic_threads(config.threads):
        started = time.perf_counter()
        seeds = np.random.SeedSequence([config.seed, 0x7A1]).spawn(2)
        x_train, y_train = _data(config.n_train, scanner, np.random.default_rng(seeds[0]))
        x_val, y_val = _data(config.n_val, scanner, np.random.default_rng(seeds[1]))
        logger.info(
            "Synthesised %d + %d images in %.1f s", len(x_train), len(x_val), time.perf_counter() - started
        )
        x_train = x_train.contiguous(memory_format=torch.channels_last)
        model = fit_classifier(
            lambda: DemoNet().to(memory_format=torch.channels_last),  # type: ignore[call-overload]
            x_train,
            y_train,
            config,
        )
        model = model.to(memory_format=torch.contiguous_format).eval()
        scores = fold_temperature(model, (x_train, y_train), (x_val, y_val), chunk=1024)
        seconds = time.perf_counter() - started
    return training_result(model, scores, seconds, config)


def write_model(result: TrainingResult, out: Path) -> tuple[Path, Path]:
    """Write ``out`` (safetensors state dict) and the model card ``out.with_suffix('.json')``.

    Returns
    -------
    tuple of pathlib.Path
        The weights path and the model card path.
    """
    out = Path(out)
    digest = write_weights(result.model, out)
    scanner = scanner_by_key(result.config.scanner)
    head = {
        "model": "sitecal.demo.model.DemoNet",
        "weights": out.name,
        "weights_sha256": digest,
        "class_names": list(CLASS_NAMES),
        "input_shape": list(DEMO_INPUT_SHAPE),
        "input": "presentation values (sitecal.demo.presentation_values), then the transforms",
        "transforms": [dict(t) for t in DEMO_TRANSFORMS],
    }
    reference = {"key": scanner.key, "manufacturer": scanner.manufacturer, "model_name": scanner.model_name}
    card = model_card(result, head=head, reference_scanner=reference)
    card_path = out.with_suffix(".json")
    write_card(card, card_path)
    return out, card_path


def _logits_of(manifest: DemoManifest, model: torch.nn.Module) -> tuple[NDArray[np.float64], list[str]]:
    transforms = demo_transforms()
    inputs, scanners = [], []
    studies = [s for s in manifest.studies if s.intact]
    for study in studies:
        ds = pydicom.dcmread(manifest.dicom_dir / study.relative_path)
        inputs.append(torch.as_tensor(transforms(presentation_values(ds))).as_subclass(torch.Tensor))
        scanners.append(str(ds.ManufacturerModelName))
    x = torch.stack(inputs)
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + 512]) for i in range(0, len(x), 512)])
    return logits.double().numpy(), scanners


def check_cohort(
    manifest: DemoManifest, *, model: torch.nn.Module | None = None, split_seed: int = 0
) -> list[ScannerCheck]:
    """Per-scanner accuracy, confidence, ECE and held-out temperature-scaling effect, through the files.

    Reads every intact file with pydicom, applies :func:`sitecal.demo.presentation_values` and the
    protocol's MONAI transforms, and runs the model.

    Parameters
    ----------
    manifest : DemoManifest
        A cohort written by :func:`sitecal.demo.generate_demo`.
    model : torch.nn.Module, optional
        Default: the bundled model.
    split_seed : int, default 0
        Seed of the patient-level fit/held-out split.

    Returns
    -------
    list of ScannerCheck
        One per scanner, in the manifest's scanner order.
    """
    model = load_demo_model() if model is None else model
    logits, scanners = _logits_of(manifest, model)
    studies = [s for s in manifest.studies if s.intact]
    return scanner_checks(
        logits,
        np.array([CLASS_NAMES.index(s.label) for s in studies]),
        scanners,
        [s.patient_id for s in studies],
        scanner_order=manifest.scanners,
        reference=manifest.reference_scanner,
        split_seed=split_seed,
    )
