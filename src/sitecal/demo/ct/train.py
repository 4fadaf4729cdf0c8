"""Train the bundled CT demo model on the reference scanner only, deterministically, on 2 CPUs.

Run ``python -m sitecal.demo.ct.train [--out src/sitecal/demo/ct/demo_ct.safetensors]``. It writes the
weights (safetensors, no pickle) and the model card ``demo_ct.json`` next to them.

Training volumes are made by the generator's own code (:func:`sitecal.demo.ct._study.simulate_study`, the
primary series), turned into HU exactly as the pipeline's reader does (stored + RescaleIntercept, slices in
ascending normal projection, which is the order the simulation holds them in) and into model inputs by
the protocol's transforms through :func:`sitecal.inference.build_transforms`. A temperature fitted on the
reference scanner's validation set is folded into the last layer: calibrated there, over-confident on the
other scanners.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .._training import TrainingResult as _TrainingResult
from .._training import (
    check_config,
    deterministic_threads,
    fit_classifier,
    fold_temperature,
    model_card,
    training_cli,
    training_result,
    write_card,
)
from .._weights import write_weights
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, CtScanner, scanner_by_key
from ._study import simulate_study
from ._synthesis import INTERCEPT
from ._transforms import CT_TRANSFORMS, ct_transforms
from .model import CT_INPUT_SHAPE, DemoNet3D, demo_ct_weights_path

__all__ = [
    "TrainingConfig",
    "TrainingResult",
    "main",
    "model_inputs",
    "synthesize",
    "train_ct_model",
    "write_model",
]

logger = logging.getLogger(__name__)

_PREVALENCE = 0.4


@dataclass(frozen=True)
class TrainingConfig:
    """Settings of one training run (all recorded in the model card)."""

    seed: int = 0
    scanner: str = REFERENCE_SCANNER
    n_train: int = 2000
    n_val: int = 500
    epochs: int = 12
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 1e-4
    threads: int = 2


TrainingResult = _TrainingResult[DemoNet3D]
"""The trained model (eval mode, temperature folded in) and its record."""


def synthesize(n: int, scanner: CtScanner, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """HU volumes (as the pipeline's reader returns them) and labels of ``n`` single-series studies.

    Parameters
    ----------
    n : int
        Number of studies.
    scanner : CtScanner
        The scanner that acquires them.
    rng : numpy.random.Generator
        Source of the labels and of each study's own stream.

    Returns
    -------
    volumes : list of ndarray of float32, each (n_slices, 48, 48)
        HU = stored + RescaleIntercept, slices in ascending projection on the normal.
    labels : ndarray of int64, shape (n,)
    """
    labels = (rng.uniform(size=n) < _PREVALENCE).astype(np.int64)
    seeds = rng.integers(0, 2**63, n)
    volumes = []
    for label, s in zip(labels, seeds, strict=True):
        study = simulate_study(
            np.random.default_rng(int(s)), scanner, nodule=bool(label), with_localizers=False
        )
        volumes.append(study.primary.stored.astype(np.float32) + np.float32(INTERCEPT))
    return volumes, labels


def model_inputs(volumes: Sequence[np.ndarray]) -> torch.Tensor:
    """Stack of ``ct_transforms()(v)`` for each HU volume: (N, 1, 16, 48, 48)."""
    chain = ct_transforms()
    out = [torch.as_tensor(chain(v)).as_subclass(torch.Tensor) for v in volumes]
    return torch.stack(out) if out else torch.empty((0, *CT_INPUT_SHAPE))


def _data(n: int, scanner: CtScanner, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    volumes, labels = synthesize(n, scanner, rng)
    return model_inputs(volumes), torch.from_numpy(labels)


def _mirror(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    # Mirror left-right at random: the anatomy is near-symmetric and the finding can be in either lung,
    # so this doubles the variety of a small training set.
    return x.flip(-1) if float(torch.rand(1, generator=generator)) < 0.5 else x


def train_ct_model(config: TrainingConfig | None = None) -> TrainingResult:
    """Train :class:`DemoNet3D` on one scanner's volumes, deterministically.

    Parameters
    ----------
    config : TrainingConfig, optional
        Defaults: seed 0, the reference scanner, 2,000 training and 500 validation studies, 12 epochs of
        AdamW with a one-cycle learning rate, 2 threads.

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
        seeds = np.random.SeedSequence([config.seed, 0xC7A1]).spawn(2)
        x_train, y_train = _data(config.n_train, scanner, np.random.default_rng(seeds[0]))
        x_val, y_val = _data(config.n_val, scanner, np.random.default_rng(seeds[1]))
        logger.info(
            "Synthesised %d + %d volumes in %.1f s", len(x_train), len(x_val), time.perf_counter() - started
        )
        model = fit_classifier(DemoNet3D, x_train, y_train, config, augment=_mirror).eval()
        scores = fold_temperature(model, (x_train, y_train), (x_val, y_val), chunk=256)
        seconds = time.perf_counter() - started
    return training_result(model, scores, seconds, config)


def write_model(result: TrainingResult, out: Path) -> tuple[Path, Path]:
    """Write ``out`` (safetensors state dict) and the model card ``out.with_suffix('.json')``."""
    out = Path(out)
    digest = write_weights(result.model, out)
    scanner = scanner_by_key(result.config.scanner)
    head = {
        "model": "sitecal.demo.ct.model.DemoNet3D",
        "weights": out.name,
        "weights_sha256": digest,
        "class_names": list(CLASS_NAMES),
        "input_shape": list(CT_INPUT_SHAPE),
        "input": (
            "HU volume (n_slices, Rows, Columns): stored * RescaleSlope + RescaleIntercept, slices in "
            "ascending projection of ImagePositionPatient on row x column cosines; then the transforms"
        ),
        "transforms": [dict(t) for t in CT_TRANSFORMS],
    }
    reference = {
        "key": scanner.key,
        "manufacturer": scanner.manufacturer,
        "model_name": scanner.model_name,
        "series_description": scanner.primary.description,
    }
    extra = {"augmentation": "left-right flip with probability 0.5"}
    card = model_card(result, head=head, reference_scanner=reference, extra_training=extra)
    card_path = out.with_suffix(".json")
    write_card(card, card_path)
    return out, card_path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m sitecal.demo.ct.train [--out PATH] [--seed N] [--epochs N]``."""
    args = training_cli(
        argv,
        prog="python -m sitecal.demo.ct.train",
        description=__doc__.splitlines()[0],
        default_out=demo_ct_weights_path(),
        defaults=TrainingConfig(),
    )
    result = train_ct_model(
        TrainingConfig(seed=args.seed, epochs=args.epochs, n_train=args.n_train, threads=args.threads)
    )
    weights, card = write_model(result, args.out)
    logger.info("Wrote %s and %s", weights, card)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
