"""The per-scanner table of ``verify.py``, from the logits of a scored cohort (radiographs or CT).

``verify.py`` reads a cohort's DICOM files and runs the bundled model; what it then reports is the same
for both demos: per scanner, accuracy, mean confidence and top-label ECE, and on a patient-level 50/50
split the held-out ECE before and after a temperature fitted on the other half.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from _local_metrics import ece, fit_temperature
from numpy.typing import NDArray

__all__ = ["ScannerCheck", "format_table", "scanner_checks"]


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


def scanner_checks(
    logits: NDArray[np.float64],
    labels: NDArray[np.int64],
    scanners: Sequence[str],
    patient_ids: Sequence[str],
    *,
    scanner_order: Sequence[str],
    reference: str,
    split_seed: int,
) -> list[ScannerCheck]:
    """Per-scanner accuracy, confidence, ECE and held-out temperature-scaling effect.

    Parameters
    ----------
    logits : ndarray, shape (N, C)
        The model's logits, one row per study.
    labels : ndarray of int, shape (N,)
        True classes.
    scanners, patient_ids : sequence of str, length N
        Each study's scanner (ManufacturerModelName) and patient.
    scanner_order : sequence of str
        The scanners to report, in this order.
    reference : str
        The scanner the model was trained on (flagged in the table).
    split_seed : int
        Seed of the patient-level fit/held-out split: half the sorted patients, permuted, fit T.

    Returns
    -------
    list of ScannerCheck
        One per scanner of ``scanner_order``.
    """
    scanner_of = np.asarray(scanners)
    patients = sorted(set(patient_ids))
    fit_patients = set(np.random.default_rng(split_seed).permutation(patients)[: len(patients) // 2].tolist())
    fit = np.array([p in fit_patients for p in patient_ids])
    probs = torch.softmax(torch.from_numpy(logits), 1).numpy()
    out = []
    for scanner in scanner_order:
        m = scanner_of == scanner
        t = fit_temperature(torch.from_numpy(logits[m & fit]), torch.from_numpy(labels[m & fit]))
        held = m & ~fit
        after = torch.softmax(torch.from_numpy(logits[held] / t), 1).numpy()
        out.append(
            ScannerCheck(
                scanner=scanner,
                reference=scanner == reference,
                n=int(m.sum()),
                accuracy=float((probs[m].argmax(1) == labels[m]).mean()),
                mean_confidence=float(probs[m].max(1).mean()),
                ece=ece(probs[m], labels[m]),
                heldout_n=int(held.sum()),
                temperature=t,
                heldout_ece_before=ece(probs[held], labels[held]),
                heldout_ece_after=ece(after, labels[held]),
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
