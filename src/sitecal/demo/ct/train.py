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

import argparse
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import DataError
from ..train import _ece, _fit_temperature
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


@dataclass(frozen=True)
class TrainingResult:
    """The trained model (eval mode, temperature folded in) and its record."""

    model: DemoNet3D
    train_accuracy: float
    val_accuracy: float
    val_ece: float
    folded_temperature: float
    seconds: float
    config: TrainingConfig


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


def _predict(model: DemoNet3D, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i : i + 256]) for i in range(0, len(x), 256)])


def _validate(config: TrainingConfig) -> None:
    checks = [
        ("batch_size", config.batch_size >= 1, "an int >= 1"),
        ("n_train", config.n_train >= config.batch_size, f"an int >= batch_size ({config.batch_size})"),
        ("n_val", config.n_val >= 1, "an int >= 1"),
        ("epochs", config.epochs >= 1, "an int >= 1"),
        ("threads", config.threads >= 1, "an int >= 1"),
        ("lr", config.lr > 0, "a float > 0"),
    ]
    for name, ok, allowed in checks:
        if not ok:
            raise DataError(
                f"The '{name}' parameter of TrainingConfig must be {allowed}. Got {getattr(config, name)!r}."
            )
    try:
        scanner_by_key(config.scanner)
    except KeyError as exc:
        raise DataError(f"The 'scanner' parameter of TrainingConfig is unknown: {exc.args[0]}") from None


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
    _validate(config)
    scanner = scanner_by_key(config.scanner)
    threads_before = torch.get_num_threads()
    deterministic_before = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True)
    try:
        started = time.perf_counter()
        seeds = np.random.SeedSequence([config.seed, 0xC7A1]).spawn(2)
        x_train, y_train = _data(config.n_train, scanner, np.random.default_rng(seeds[0]))
        x_val, y_val = _data(config.n_val, scanner, np.random.default_rng(seeds[1]))
        logger.info(
            "Synthesised %d + %d volumes in %.1f s", len(x_train), len(x_val), time.perf_counter() - started
        )
        torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        model = DemoNet3D()
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        steps_per_epoch = config.n_train // config.batch_size
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=config.lr, total_steps=config.epochs * steps_per_epoch
        )
        for epoch in range(config.epochs):
            model.train()
            order = torch.randperm(config.n_train, generator=generator)
            total = 0.0
            for step in range(steps_per_epoch):
                batch = order[step * config.batch_size : (step + 1) * config.batch_size]
                x = x_train[batch]
                # Mirror left-right at random: the anatomy is near-symmetric and the finding can be in
                # either lung, so this doubles the variety of a small training set.
                if float(torch.rand(1, generator=generator)) < 0.5:
                    x = x.flip(-1)
                loss = F.cross_entropy(model(x), y_train[batch])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                schedule.step()
                total += float(loss.detach())
            logger.info("epoch %d: mean training loss %.4f", epoch + 1, total / steps_per_epoch)

        model.eval()
        temperature = _fit_temperature(_predict(model, x_val), y_val)
        with torch.no_grad():  # fold 1/T into the classifier
            model.classifier.weight.div_(temperature)
            model.classifier.bias.div_(temperature)
        train_acc = float((_predict(model, x_train).argmax(1) == y_train).float().mean())
        val_logits = _predict(model, x_val)
        val_acc = float((val_logits.argmax(1) == y_val).float().mean())
        val_ece = _ece(torch.softmax(val_logits.double(), 1).numpy(), y_val.numpy())
        seconds = time.perf_counter() - started
    finally:
        torch.set_num_threads(threads_before)
        torch.use_deterministic_algorithms(deterministic_before)
    logger.info(
        "Trained in %.1f s: train accuracy %.3f, val accuracy %.3f, val ECE %.3f, folded T %.3f",
        seconds,
        train_acc,
        val_acc,
        val_ece,
        temperature,
    )
    return TrainingResult(model, train_acc, val_acc, val_ece, temperature, seconds, config)


def write_model(result: TrainingResult, out: Path) -> tuple[Path, Path]:
    """Write ``out`` (safetensors state dict) and the model card ``out.with_suffix('.json')``."""
    from safetensors.torch import save_file

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in result.model.state_dict().items()}
    save_file(state, str(out), metadata={"format": "pt"})  # one key: byte-identical from run to run
    out.chmod(0o644)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    scanner = scanner_by_key(result.config.scanner)
    c = result.config
    card: dict[str, Any] = {
        "model": "sitecal.demo.ct.model.DemoNet3D",
        "weights": out.name,
        "weights_sha256": digest,
        "n_parameters": int(sum(p.numel() for p in result.model.parameters())),
        "class_names": list(CLASS_NAMES),
        "input_shape": list(CT_INPUT_SHAPE),
        "input": (
            "HU volume (n_slices, Rows, Columns): stored * RescaleSlope + RescaleIntercept, slices in "
            "ascending projection of ImagePositionPatient on row x column cosines; then the transforms"
        ),
        "transforms": [dict(t) for t in CT_TRANSFORMS],
        "training": {
            "seed": c.seed,
            "reference_scanner": {
                "key": scanner.key,
                "manufacturer": scanner.manufacturer,
                "model_name": scanner.model_name,
                "series_description": scanner.primary.description,
            },
            "n_train": c.n_train,
            "n_val": c.n_val,
            "epochs": c.epochs,
            "batch_size": c.batch_size,
            "optimizer": f"AdamW(lr={c.lr}, weight_decay={c.weight_decay}), OneCycleLR",
            "augmentation": "left-right flip with probability 0.5",
            "threads": c.threads,
            "torch": torch.__version__,
            "seconds": round(result.seconds, 1),
            "train_accuracy": round(result.train_accuracy, 4),
            "val_accuracy": round(result.val_accuracy, 4),
            "val_ece": round(result.val_ece, 4),
            "folded_temperature": round(result.folded_temperature, 4),
        },
    }
    card_path = out.with_suffix(".json")
    card_path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    return out, card_path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m sitecal.demo.ct.train [--out PATH] [--seed N] [--epochs N]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sitecal.demo.ct.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=demo_ct_weights_path(), help="weights file to write")
    parser.add_argument("--seed", type=int, default=TrainingConfig.seed)
    parser.add_argument("--epochs", type=int, default=TrainingConfig.epochs)
    parser.add_argument("--n-train", type=int, default=TrainingConfig.n_train)
    parser.add_argument("--threads", type=int, default=TrainingConfig.threads)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = train_ct_model(
        TrainingConfig(seed=args.seed, epochs=args.epochs, n_train=args.n_train, threads=args.threads)
    )
    weights, card = write_model(result, args.out)
    logger.info("Wrote %s and %s", weights, card)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
