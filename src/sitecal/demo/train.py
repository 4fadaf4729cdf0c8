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
from numpy.typing import NDArray
from scipy.optimize import minimize_scalar

from ..errors import DataError
from ._preprocess import DEMO_TRANSFORMS, preprocess_batch
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, ScannerProfile, scanner_by_key
from ._synthesis import acquire, render_scenes, sample_anatomy, sample_labels, stored_to_presentation
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


@dataclass(frozen=True)
class TrainingResult:
    """The trained model (eval mode, temperature folded in) and its record."""

    model: DemoNet
    train_accuracy: float
    val_accuracy: float
    val_ece: float
    folded_temperature: float
    seconds: float
    config: TrainingConfig


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


def _ece(probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int = 15) -> float:
    # Top-label ECE, equal-width bins on (lo, hi], weighted by bin size (Guo et al., 2017).
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    count = np.bincount(bins, minlength=n_bins)
    gap = np.abs(np.bincount(bins, correct, n_bins) - np.bincount(bins, conf, n_bins))
    return float(gap.sum() / max(count.sum(), 1))


def _fit_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    z = logits.double()

    def nll(log_t: float) -> float:
        return float(F.cross_entropy(z / np.exp(log_t), labels))

    res = minimize_scalar(nll, bounds=(-3.0, 3.0), method="bounded", options={"xatol": 1e-6})
    return float(np.exp(res.x))


def _predict(model: DemoNet, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i : i + 1024]) for i in range(0, len(x), 1024)])


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
    _validate(config)
    scanner = scanner_by_key(config.scanner)
    threads_before = torch.get_num_threads()
    deterministic_before = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True)
    try:
        started = time.perf_counter()
        seeds = np.random.SeedSequence([config.seed, 0x7A1]).spawn(2)
        x_train, y_train = _data(config.n_train, scanner, np.random.default_rng(seeds[0]))
        x_val, y_val = _data(config.n_val, scanner, np.random.default_rng(seeds[1]))
        logger.info(
            "Synthesised %d + %d images in %.1f s", len(x_train), len(x_val), time.perf_counter() - started
        )

        torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        model = DemoNet().to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        x_train = x_train.contiguous(memory_format=torch.channels_last)
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
                loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                schedule.step()
                total += float(loss.detach())
            logger.info("epoch %d: mean training loss %.4f", epoch + 1, total / steps_per_epoch)

        model = model.to(memory_format=torch.contiguous_format).eval()
        val_logits = _predict(model, x_val)
        temperature = _fit_temperature(val_logits, y_val)
        with torch.no_grad():  # fold 1/T into the classifier: logits / T with no extra layer
            model.classifier.weight /= temperature
            model.classifier.bias /= temperature
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
    """Write ``out`` (safetensors state dict) and the model card ``out.with_suffix('.json')``.

    Returns
    -------
    tuple of pathlib.Path
        The weights path and the model card path.
    """
    from safetensors.torch import save_file

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in result.model.state_dict().items()}
    # One metadata key only: safetensors writes a map in arbitrary order, and the file must be
    # byte-identical from run to run.
    save_file(state, str(out), metadata={"format": "pt"})
    out.chmod(0o644)  # safetensors writes 0600; the file ships in the package
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    scanner = scanner_by_key(result.config.scanner)
    card: dict[str, Any] = {
        "model": "sitecal.demo.model.DemoNet",
        "weights": out.name,
        "weights_sha256": digest,
        "n_parameters": int(sum(p.numel() for p in result.model.parameters())),
        "class_names": list(CLASS_NAMES),
        "input_shape": list(DEMO_INPUT_SHAPE),
        "input": "presentation values (sitecal.demo.presentation_values), then the transforms",
        "transforms": [dict(t) for t in DEMO_TRANSFORMS],
        "training": {
            "seed": result.config.seed,
            "reference_scanner": {
                "key": scanner.key,
                "manufacturer": scanner.manufacturer,
                "model_name": scanner.model_name,
            },
            "n_train": result.config.n_train,
            "n_val": result.config.n_val,
            "epochs": result.config.epochs,
            "batch_size": result.config.batch_size,
            "optimizer": (
                f"AdamW(lr={result.config.lr}, weight_decay={result.config.weight_decay}), OneCycleLR"
            ),
            "threads": result.config.threads,
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
    """Command line: ``python -m sitecal.demo.train [--out PATH] [--seed N] [--epochs N]``."""
    parser = argparse.ArgumentParser(prog="python -m sitecal.demo.train", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=demo_weights_path(), help="weights file to write")
    parser.add_argument("--seed", type=int, default=TrainingConfig.seed)
    parser.add_argument("--epochs", type=int, default=TrainingConfig.epochs)
    parser.add_argument("--n-train", type=int, default=TrainingConfig.n_train)
    parser.add_argument("--threads", type=int, default=TrainingConfig.threads)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = train_demo_model(
        TrainingConfig(seed=args.seed, epochs=args.epochs, n_train=args.n_train, threads=args.threads)
    )
    weights, card = write_model(result, args.out)
    logger.info("Wrote %s and %s", weights, card)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
