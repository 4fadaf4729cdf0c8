"""Check the CT demo's phenomenon on a freshly generated cohort, through the DICOM files.

``python -m sitecal.demo.ct.verify [--n-studies 600] [--seed 2024]`` generates a cohort in a temporary
folder; for every study with a qualifying series it reads that series' files with pydicom, orders the
slices by the projection of ImagePositionPatient on the normal (row x column cosines of
ImageOrientationPatient), stacks their HU (:func:`sitecal.inference.presentation_values`), applies the
protocol's transforms and runs the bundled model. It reports per scanner: accuracy, mean confidence and
top-label ECE (15 equal-width bins), then, on a patient-level 50/50 split, the held-out ECE before and
after a temperature fitted on the other half.

The slice ordering here, and the ECE and temperature fit of :mod:`sitecal.demo._local_metrics`, are the
demo's own small functions on purpose: an independent check of the demo data, not a use of the
pipeline's cohort, metrics or calibration code.
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

from ...inference.reader import presentation_values
from .._checks import ScannerCheck, format_table, scanner_checks
from ._scanners import CLASS_NAMES
from ._transforms import ct_transforms
from .generate import CtDemoManifest, CtStudy, generate_ct_demo
from .model import load_demo_ct_model

__all__ = ["ScannerCheck", "check_ct_cohort", "main", "read_volume", "slice_order"]

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class _Scored:
    studies: list[CtStudy]
    logits: NDArray[np.float64]


def _score(manifest: CtDemoManifest, model: torch.nn.Module) -> _Scored:
    chain = ct_transforms()
    pairs = [(s, s.selected) for s in manifest.studies if s.selected is not None]
    studies = [study for study, _ in pairs]
    inputs = []
    for _, series in pairs:
        # Sorted file names on purpose: the files are not in slice order, slice_order must fix that.
        volume = read_volume(manifest.dicom_dir, sorted(series.slice_files))
        inputs.append(torch.as_tensor(chain(volume)).as_subclass(torch.Tensor))
    x = torch.stack(inputs)
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + 128]) for i in range(0, len(x), 128)])
    return _Scored(studies, logits.double().numpy())


def check_ct_cohort(
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
    scored = _score(manifest, model)
    return scanner_checks(
        scored.logits,
        np.array([CLASS_NAMES.index(s.label) for s in scored.studies]),
        [s.scanner for s in scored.studies],
        [s.patient_id for s in scored.studies],
        scanner_order=manifest.scanners,
        reference=manifest.reference_scanner,
        split_seed=split_seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m sitecal.demo.ct.verify [--n-studies N] [--seed S] [--weights PATH]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sitecal.demo.ct.verify", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--n-studies", type=int, default=600)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--weights", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = generate_ct_demo(Path(tmp), n_studies=args.n_studies, seed=args.seed)
        rows = check_ct_cohort(manifest, model=load_demo_ct_model(args.weights))
    logger.info("%s", format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
