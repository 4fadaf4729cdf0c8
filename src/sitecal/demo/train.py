"""Train the bundled demo CNN on the reference scanner only, deterministically, in about a minute on 2 CPUs.

Run ``python -m sitecal.demo.train [--out src/sitecal/demo/demo_cnn.safetensors]``. It writes the
weights (safetensors, no pickle) and a model card ``demo_cnn.json`` next to them.

The images are made by the same code as the DICOM generator (:mod:`sitecal.demo._synthesis`), turned into
presentation values by the same arithmetic as :func:`sitecal.demo.presentation_values` (driven by the
scanner profile instead of a header) and into model inputs by :func:`preprocess_batch`, the batched twin
of the protocol's MONAI transforms; ``tests/demo`` checks both equalities.

After training, a temperature is fitted on the reference scanner's validation set and folded into the
last layer, as a vendor would ship a model calibrated on its development data. The model is therefore
calibrated on the reference scanner; on the other scanners it is less accurate but about as confident:
over-confident, which is what per-scanner temperature scaling is there to fix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from numpy.typing import NDArray

from ._preprocess import DEMO_TRANSFORMS, preprocess_batch
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, ScannerProfile, scanner_by_key
from ._synthesis import acquire, render_scenes, sample_anatomy, sample_labels, stored_to_presentation
from ._training import TrainingResult as _TrainingResult
from ._training import (
    check_config,
    deterministic_threads,
    fit_classifier,
    fold_temperature,
    model_card,
    training_cli,
    training_result,
    write_card,
)
from ._weights import write_weights
from .model import DEMO_INPUT_SHAPE, DemoNet, demo_weights_path

__all__ = [
    "TrainingConfig",
    "TrainingResult",
    "main",
    "model_inputs",
    "synthesize_stored",
    "train_demo_model",
    "write_model",
]

logger = logging.getLogger(__name__)

_CHUNK = 64


@dataclass(frozen=True)
class TrainingConfig:
    """Settings of one training run (all recorded in the model card)."""

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


def synthesize_stored(
    n: int, scanner: ScannerProfile, rng: np.random.Generator
) -> tuple[NDArray[np.uint16], NDArray[np.int64]]:
    """Synthesise the stored pixel values and labels of ``n`` studies on one scanner, one patient each.

    Parameters
    ----------
    n : int
        Number of images.
    scanner : ScannerProfile
        The scanner that acquires them.
    rng : numpy.random.Generator
        Source of every random choice.

    Returns
    -------
    stored : ndarray of uint16, shape (n, 128, 128)
        What the scanner would write to Pixel Data.
    labels : ndarray of int64, shape (n,)
        Class indices into :data:`sitecal.demo.CLASS_NAMES`.
    """
    sex = rng.choice(np.array(["F", "M"]), size=n)
    anatomy = sample_anatomy(rng, sex)
    labels = sample_labels(rng, n)
    stored = np.empty((n, 128, 128), dtype=np.uint16)
    for start in range(0, n, _CHUNK):
        idx = np.arange(start, min(start + _CHUNK, n))
        stored[idx] = acquire(render_scenes(rng, labels[idx], anatomy.take(idx)), scanner, rng)
    return stored, labels


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


def train_demo_model(config: TrainingConfig | None = None) -> TrainingResult:
    """Train :class:`DemoNet` on images of one scanner, deterministically.

    Parameters
    ----------
    config : TrainingConfig, optional
        Defaults: seed 0, the reference scanner, 6,000 training and 1,500 validation images, 10 epochs
        of AdamW with a one-cycle learning rate, 2 threads.

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


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m sitecal.demo.train [--out PATH] [--seed N] [--epochs N]``."""
    args = training_cli(
        argv,
        prog="python -m sitecal.demo.train",
        description=__doc__.splitlines()[0],
        default_out=demo_weights_path(),
        defaults=TrainingConfig(),
    )
    result = train_demo_model(
        TrainingConfig(seed=args.seed, epochs=args.epochs, n_train=args.n_train, threads=args.threads)
    )
    weights, card = write_model(result, args.out)
    logger.info("Wrote %s and %s", weights, card)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
