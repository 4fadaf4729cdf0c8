"""How the evaluation orders groups and stratifies patients (shared by its parts)."""

from __future__ import annotations

import numpy as np

__all__ = ["OVERALL", "UNKNOWN", "ordered_groups", "patient_codes", "patient_strata"]

OVERALL = "overall"
UNKNOWN = "unknown"


def ordered_groups(values: np.ndarray) -> list[str]:
    """Distinct group values sorted, with ``unknown`` last."""
    unique = sorted({str(v) for v in values.tolist()})
    return [v for v in unique if v != UNKNOWN] + ([UNKNOWN] if UNKNOWN in unique else [])


def patient_codes(patient_keys: np.ndarray) -> np.ndarray:
    """Each row's patient as an integer, numbered in the keys' sorted order, shape (N,).

    Cluster plans number patients in sorted order, so every resample and every sum over patients is the
    same for these codes as for the keys; sorting integers is some twenty times faster than sorting the
    keys' text, which every plan, stratification and patient count would otherwise repeat.
    """
    _, codes = np.unique(np.asarray(patient_keys), return_inverse=True)
    out: np.ndarray = codes.reshape(-1).astype(np.int64)
    return out


def patient_strata(patient_keys: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """Per row, the stratum of the row's patient (their first row in key order): constant within a cluster."""
    keys = np.asarray(patient_keys)
    order = np.argsort(keys, kind="stable")
    _, first, inverse = np.unique(keys[order], return_index=True, return_inverse=True)
    out = np.empty(keys.shape[0], dtype=object)
    out[order] = np.asarray(strata)[order][first][inverse.reshape(-1)]
    return np.array([str(v) for v in out.tolist()])
