"""The CT demo model: its training data, training run and model card, and the check through the DICOM files.

Training volumes come from the package's generator code (:func:`sitecal.demo.ct.synthesize_volumes`, the
primary series of single-series studies, as the pipeline's reader returns them) and go through the
protocol's own transform chain (:func:`sitecal.demo.ct.ct_transforms`): one code path for training and
validation. Like the 2-D model, a temperature fitted on the reference scanner's validation set is folded
into the last layer: calibrated there, over-confident on the other scanners.

The check reads each study's selected series with pydicom and orders the slices by the projection of
ImagePositionPatient on the normal (row x column cosines of ImageOrientationPatient), with its own small
functions on purpose: an independent check of the demo data, not a use of the pipeline's cohort code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
import torch
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

from sitecal.demo.ct import (
    CLASS_NAMES,
    CT_INPUT_SHAPE,
    CT_TRANSFORMS,
    REFERENCE_SCANNER,
    CtDemoManifest,
    CtScanner,
    CtStudy,
    DemoNet3D,
    ct_transforms,
    load_demo_ct_model,
    scanner_by_key,
    synthesize_volumes,
)
from sitecal.inference.reader import presentation_values

__all__ = [
    "TrainingConfig",
    "TrainingResult",
    "check_cohort",
    "model_inputs",
    "read_volume",
    "slice_order",
    "train_model",
    "write_model",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingConfig:
    """Settings of one training run (all recorded in the model card); the defaults made the shipped model."""

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


def model_inputs(volumes: Sequence[NDArray[np.float32]]) -> torch.Tensor:
    """Stack of ``ct_transforms()(v)`` for each HU volume: (N, 1, 16, 48, 48)."""
    chain = ct_transforms()
    out = [torch.as_tensor(chain(v)).as_subclass(torch.Tensor) for v in volumes]
    return torch.stack(out) if out else torch.empty((0, *CT_INPUT_SHAPE))


def _data(n: int, scanner: CtScanner, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    volumes, labels = synthesize_volumes(n, scanner, rng)
    return model_inputs(volumes), torch.from_numpy(labels)


def _mirror(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    # Mirror left-right at random: the anatomy is near-symmetric and the finding can be in either lung,
    # so this doubles the variety of a small training set.
    return x.flip(-1) if float(torch.rand(1, generator=generator)) < 0.5 else x


def train_model(config: TrainingConfig | None = None) -> TrainingResult:
    """Train :class:`sitecal.demo.ct.DemoNet3D` on one scanner's volumes, deterministically.

    Parameters
    ----------
    config : TrainingConfig, optional
        Defaults: seed 0, the reference scanner, 2,000 training and 500 validation studies, 12 epochs of
        AdamW with a one-cycle learning rate, 2 threads (about 10 minutes on 2 CPU cores).

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


def slice_order(datasets: Sequence[pydicom.Dataset]) -> NDArray[np.intp]:
    """Indices that sort a series' slices by ascending projection of ImagePositionPatient on the normal."""
    o = np.asarray(datasets[0].ImageOrientationPatient, dtype=np.float64)
    normal = np.cross(o[:3], o[3:])
    projection = np.array([np.dot(np.asarray(ds.ImagePositionPatient, float), normal) for ds in datasets])
    order: NDArray[np.intp] = np.argsort(projection, kind="stable")
    return order


def read_volume(dicom_dir: Path, files: Sequence[str]) -> NDArray[np.float32]:
    """HU volume (n_slices, Rows, Columns) of one series' files, in slice order."""
    datasets = [pydicom.dcmread(dicom_dir / f) for f in files]
    return np.stack([presentation_values(datasets[i]) for i in slice_order(datasets)]).astype(np.float32)


def _score(manifest: CtDemoManifest, model: torch.nn.Module) -> tuple[list[CtStudy], NDArray[np.float64]]:
    chain = ct_transforms()
    pairs = [(s, s.selected) for s in manifest.studies if s.selected is not None]
    inputs = []
    for _, series in pairs:
        # Sorted file names on purpose: the files are not in slice order, slice_order must fix that.
        volume = read_volume(manifest.dicom_dir, sorted(series.slice_files))
        inputs.append(torch.as_tensor(chain(volume)).as_subclass(torch.Tensor))
    x = torch.stack(inputs)
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + 128]) for i in range(0, len(x), 128)])
    return [study for study, _ in pairs], logits.double().numpy()


def check_cohort(
    manifest: CtDemoManifest, *, model: torch.nn.Module | None = None, split_seed: int = 0
) -> list[ScannerCheck]:
    """Per-scanner accuracy, confidence, ECE and the held-out effect of a per-scanner temperature.

    Parameters
    ----------
    manifest : CtDemoManifest
        A cohort written by :func:`sitecal.demo.ct.generate_ct_demo`.
    model : torch.nn.Module, optional
        Default: the bundled model.
    split_seed : int, default 0
        Seed of the patient-level fit/held-out split.

    Returns
    -------
    list of ScannerCheck
        One per scanner, in the manifest's scanner order.
    """
    model = load_demo_ct_model() if model is None else model
    studies, logits = _score(manifest, model)
    return scanner_checks(
        logits,
        np.array([CLASS_NAMES.index(s.label) for s in studies]),
        [s.scanner for s in studies],
        [s.patient_id for s in studies],
        scanner_order=manifest.scanners,
        reference=manifest.reference_scanner,
        split_seed=split_seed,
    )
