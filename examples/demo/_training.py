"""How both demo models are trained: checks, seeding, the loop, the folded temperature, weights and card.

``_radiograph.py`` (2-D) and ``_ct.py`` (3-D) make their own data and model; everything from the seed to
the model card is shared here, so the two stay deterministic the same way: the global torch seed is set
just before the model is built, batches come from a ``torch.Generator`` seeded alike, deterministic
algorithms are on and the thread count is fixed (and all of it restored).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import torch
import torch.nn.functional as F
from _local_metrics import ece, fit_temperature
from torch import nn

from sitecal.errors import DataError

__all__ = [
    "FoldedScores",
    "TrainingResult",
    "TrainingSettings",
    "check_config",
    "deterministic_threads",
    "fit_classifier",
    "fold_temperature",
    "model_card",
    "training_result",
    "write_card",
    "write_weights",
]

logger = logging.getLogger(__name__)

ModelT = TypeVar("ModelT", bound=nn.Module)
#: Augments one training batch, drawing only from the loop's generator.
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


class TrainingSettings(Protocol):
    """What a demo's ``TrainingConfig`` holds (each demo has its own defaults)."""

    @property
    def seed(self) -> int: ...
    @property
    def scanner(self) -> str: ...
    @property
    def n_train(self) -> int: ...
    @property
    def n_val(self) -> int: ...
    @property
    def epochs(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def threads(self) -> int: ...


@dataclass(frozen=True)
class TrainingResult(Generic[ModelT]):
    """A trained demo model (eval mode, temperature folded in) and its record."""

    model: ModelT
    train_accuracy: float
    val_accuracy: float
    val_ece: float
    folded_temperature: float
    seconds: float
    config: Any  # the demo's TrainingConfig (a TrainingSettings)


def training_result(
    model: ModelT, scores: FoldedScores, seconds: float, config: TrainingSettings
) -> TrainingResult[ModelT]:
    """Log the end of a training run and return its :class:`TrainingResult`."""
    logger.info(
        "Trained in %.1f s: train accuracy %.3f, val accuracy %.3f, val ECE %.3f, folded T %.3f",
        seconds,
        scores.train_accuracy,
        scores.val_accuracy,
        scores.val_ece,
        scores.temperature,
    )
    return TrainingResult(
        model, scores.train_accuracy, scores.val_accuracy, scores.val_ece, scores.temperature, seconds, config
    )


def check_config(config: TrainingSettings, scanner_by_key: Callable[[str], object]) -> None:
    """Raise :class:`DataError` naming the first out-of-range setting of ``config``."""
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


@contextmanager
def deterministic_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch threads and deterministic algorithms; restore both after."""
    threads_before = torch.get_num_threads()
    deterministic_before = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads_before)
        torch.use_deterministic_algorithms(deterministic_before)


def fit_classifier(
    build: Callable[[], ModelT],
    x: torch.Tensor,
    y: torch.Tensor,
    config: TrainingSettings,
    *,
    augment: Augment | None = None,
) -> ModelT:
    """Build a model under ``torch.manual_seed(config.seed)`` and train it with cross-entropy.

    AdamW with a one-cycle learning rate (peak ``config.lr``), ``config.epochs`` epochs of
    ``n_train // batch_size`` batches each, in an order drawn from a generator seeded with ``config.seed``;
    ``augment``, when given, draws from that generator too.

    Returns
    -------
    torch.nn.Module
        The model, still in training mode and in whatever memory format ``build`` gave it.
    """
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    model = build()
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
            xb = x[batch]
            if augment is not None:
                xb = augment(xb, generator)
            loss = F.cross_entropy(model(xb), y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            schedule.step()
            total += float(loss.detach())
        logger.info("epoch %d: mean training loss %.4f", epoch + 1, total / steps_per_epoch)
    return model


@dataclass(frozen=True)
class FoldedScores:
    """The temperature folded into a model and its scores afterwards."""

    temperature: float
    train_accuracy: float
    val_accuracy: float
    val_ece: float


def _predict(model: nn.Module, x: torch.Tensor, chunk: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i : i + chunk]) for i in range(0, len(x), chunk)])


def fold_temperature(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor],
    *,
    chunk: int,
) -> FoldedScores:
    """Fit T on the validation set, divide the last layer (``model.classifier``) by it, then score.

    ``model`` must be in eval mode. Logits / T then need no extra layer: a vendor ships the model
    calibrated on its development data. ``chunk`` is the inference batch size.
    """
    x_val, y_val = val
    temperature = fit_temperature(_predict(model, x_val, chunk), y_val)
    classifier = model.classifier
    assert isinstance(classifier, nn.Linear)
    with torch.no_grad():
        classifier.weight.div_(temperature)
        classifier.bias.div_(temperature)
    train_acc = float((_predict(model, train[0], chunk).argmax(1) == train[1]).float().mean())
    val_logits = _predict(model, x_val, chunk)
    val_acc = float((val_logits.argmax(1) == y_val).float().mean())
    val_ece = ece(torch.softmax(val_logits.double(), 1).numpy(), y_val.numpy())
    return FoldedScores(temperature, train_acc, val_acc, val_ece)


def model_card(
    result: TrainingResult[Any],
    *,
    head: Mapping[str, Any],
    reference_scanner: Mapping[str, str],
    extra_training: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The model card: ``head`` (model, weights, sha256 ...), then the parameter count and the record.

    ``head`` keys up to ``weights_sha256`` come first, then ``n_parameters``, then the rest of ``head``,
    then ``training`` (``extra_training`` after the optimizer): the key order of the shipped cards.
    """
    config = result.config
    items = list(head.items())
    cut = [k for k, _ in items].index("weights_sha256") + 1
    training: dict[str, Any] = {
        "seed": config.seed,
        "reference_scanner": dict(reference_scanner),
        "n_train": config.n_train,
        "n_val": config.n_val,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "optimizer": f"AdamW(lr={config.lr}, weight_decay={config.weight_decay}), OneCycleLR",
        **(extra_training or {}),
        "threads": config.threads,
        "torch": torch.__version__,
        "seconds": round(result.seconds, 1),
        "train_accuracy": round(result.train_accuracy, 4),
        "val_accuracy": round(result.val_accuracy, 4),
        "val_ece": round(result.val_ece, 4),
        "folded_temperature": round(result.folded_temperature, 4),
    }
    return {
        **dict(items[:cut]),
        "n_parameters": int(sum(p.numel() for p in result.model.parameters())),
        **dict(items[cut:]),
        "training": training,
    }


def write_card(card: Mapping[str, Any], path: Path) -> None:
    """Write a model card as JSON (2-space indent, final newline)."""
    path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")


def write_weights(model: nn.Module, out: Path) -> str:
    """Write ``model``'s state dict to ``out`` as safetensors, readable by all; return its sha256.

    The file holds one metadata key only: safetensors writes its metadata map in arbitrary order, and
    the file must be byte-identical from run to run.
    """
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out), metadata={"format": "pt"})
    out.chmod(0o644)  # safetensors writes 0600; the file ships in the package
    return hashlib.sha256(out.read_bytes()).hexdigest()
