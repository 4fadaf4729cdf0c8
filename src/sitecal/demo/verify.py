"""Check the demo's central phenomenon on a freshly generated cohort, through the DICOM files.

``python -m sitecal.demo.verify [--n-studies 2000] [--seed 2024]`` generates a cohort in a temporary
folder, reads every intact file with pydicom, applies :func:`sitecal.demo.presentation_values` and the
protocol's MONAI transforms, runs the bundled model, and reports per scanner: accuracy, mean confidence and
top-label ECE (15 equal-width bins), then, on a patient-level 50/50 split, the held-out ECE before and after
a temperature fitted on the other half.

The ECE and the temperature fit are the demos' own small functions (:mod:`sitecal.demo._local_metrics`)
on purpose: this is an independent check of the demo data, not a use of :mod:`sitecal.metrics` or
:mod:`sitecal.calibration`. The table is the CT demo's too (:mod:`sitecal.demo._checks`).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pydicom
import torch
from numpy.typing import NDArray

from ._checks import ScannerCheck, format_table, scanner_checks
from ._preprocess import demo_transforms
from ._scanners import CLASS_NAMES
from .generate import DemoManifest, generate_demo, presentation_values
from .model import load_demo_model

__all__ = ["ScannerCheck", "check_cohort", "format_table", "main"]

logger = logging.getLogger(__name__)


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
    return scanner_checks(
        logits,
        np.array([CLASS_NAMES.index(s.label) for s in studies]),
        scanners,
        [s.patient_id for s in studies],
        scanner_order=manifest.scanners,
        reference=manifest.reference_scanner,
        split_seed=split_seed,
    )


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
