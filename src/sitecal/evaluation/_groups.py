"""How the evaluation orders groups and stratifies patients (shared by its parts)."""

from __future__ import annotations

import numpy as np

__all__ = ["OVERALL", "UNKNOWN", "ordered_groups", "patient_strata"]

OVERALL = "overall"
UNKNOWN = "unknown"


def ordered_groups(values: np.ndarray) -> list[str]:
    """Distinct group values sorted, with ``unknown`` last."""
    unique = sorted({str(v) for v in values.tolist()})
    return [v for v in unique if v != UNKNOWN] + ([UNKNOWN] if UNKNOWN in unique else [])


def patient_strata(patient_keys: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """Per row, the stratum of the row's patient (their first row in key order): constant within a cluster."""
    first: dict[str, str] = {}
    for i in np.argsort(patient_keys, kind="stable"):
        first.setdefault(str(patient_keys[i]), str(strata[i]))
    return np.array([first[str(p)] for p in patient_keys])
