"""Check the demo's central phenomenon on a freshly generated cohort, through the DICOM files.

``python -m sitecal.demo.verify [--n-studies 2000] [--seed 2024]`` generates a cohort in a temporary
folder, reads every intact file with pydicom, applies :func:`sitecal.demo.presentation_values` and the
protocol's MONAI transforms, runs the bundled model, and reports per scanner: accuracy, mean confidence and
top-label ECE (15 equal-width bins), then, on a patient-level 50/50 split, the held-out ECE before and after
a temperature fitted on the other half.

The ECE and the temperature fit here are small local functions on purpose: this is an independent check
of the demo data, not a use of :mod:`sitecal.metrics` or :mod:`sitecal.calibration`.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
import torch
from numpy.typing import NDArray

from ._preprocess import demo_transforms
from ._scanners import CLASS_NAMES
from .generate import DemoManifest, generate_demo, presentation_values
from .model import load_demo_model
from .train import _ece, _fit_temperature

__all__ = ["ScannerCheck", "check_cohort", "main"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScannerCheck:
    """Calibration of the bundled model on one scanner's studies."""

    scanner: str
    reference: bool
    n: int
    accuracy: float
    mean_confidence: float
    ece: float
    heldout_n: int
    temperature: float
    heldout_ece_before: float
    heldout_ece_after: float


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
    """Per-scanner accuracy, confidence, ECE and held-out temperature-scaling effect.

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
    labels = np.array([CLASS_NAMES.index(s.label) for s in studies])
    patients = sorted({s.patient_id for s in studies})
    fit_patients = set(np.random.default_rng(split_seed).permutation(patients)[: len(patients) // 2].tolist())
    fit = np.array([s.patient_id in fit_patients for s in studies])
    probs = torch.softmax(torch.from_numpy(logits), 1).numpy()
    out = []
    for scanner in manifest.scanners:
        m = np.array([s == scanner for s in scanners])
        t = _fit_temperature(torch.from_numpy(logits[m & fit]), torch.from_numpy(labels[m & fit]))
        held = m & ~fit
        after = torch.softmax(torch.from_numpy(logits[held] / t), 1).numpy()
        out.append(
            ScannerCheck(
                scanner=scanner,
                reference=scanner == manifest.reference_scanner,
                n=int(m.sum()),
                accuracy=float((probs[m].argmax(1) == labels[m]).mean()),
                mean_confidence=float(probs[m].max(1).mean()),
                ece=_ece(probs[m], labels[m]),
                heldout_n=int(held.sum()),
                temperature=t,
                heldout_ece_before=_ece(probs[held], labels[held]),
                heldout_ece_after=_ece(after, labels[held]),
            )
        )
    return out


def format_table(rows: Sequence[ScannerCheck]) -> str:
    """Format the checks as a fixed-width text table."""
    head = (
        f"{'scanner':<22}{'n':>6}{'acc':>7}{'conf':>7}{'ECE':>7}{'T':>7}{'held ECE before':>17}{'after':>7}"
    )
    lines = [head]
    for r in rows:
        name = r.scanner + (" (ref)" if r.reference else "")
        lines.append(
            f"{name:<22}{r.n:>6}{r.accuracy:>7.3f}{r.mean_confidence:>7.3f}{r.ece:>7.3f}{r.temperature:>7.2f}"
            f"{r.heldout_ece_before:>17.3f}{r.heldout_ece_after:>7.3f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m sitecal.demo.verify [--n-studies N] [--seed S] [--weights PATH]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sitecal.demo.verify", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--n-studies", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--weights", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = generate_demo(Path(tmp), n_studies=args.n_studies, seed=args.seed)
        rows = check_cohort(manifest, model=load_demo_model(args.weights))
    logger.info("%s", format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
