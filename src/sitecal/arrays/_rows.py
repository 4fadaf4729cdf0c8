"""The arrays checked and put in the command line's order, as the evaluation's data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from sitecal._split_key import split_key
from sitecal.cohort.attributes import UNKNOWN, attribute_value, suppress_rare_values
from sitecal.cohort.mapping import UNMAPPED
from sitecal.errors import DataError
from sitecal.evaluation import EvaluationData
from sitecal.metrics import log_probabilities

__all__ = ["array_data", "checked_rows", "flow", "row_order", "scores_of"]


def checked_rows(
    scores: np.ndarray, labels: ArrayLike, class_names: Sequence[str], groups: Mapping[str, ArrayLike] | None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The labels as class indices and the group columns as text, each checked against the scores."""
    y = np.asarray(labels)
    n = len(y)
    if scores.ndim != 2 or scores.shape != (n, len(class_names)):
        raise DataError(
            f"scores of shape {scores.shape} for {n} labels and {len(class_names)} class names: give one row "
            "per label and one column per class."
        )
    if not np.all(np.isfinite(scores)):
        raise DataError("scores hold NaN or infinity: every score must be a finite number.")
    if y.dtype.kind not in "iu" or (n and (y.min() < 0 or y.max() >= len(class_names))):
        raise DataError(f"labels must be class indices 0..{len(class_names) - 1}.")
    columns = {name: np.asarray(value).astype(str) for name, value in (groups or {}).items()}
    for column, value in columns.items():
        if value.shape != (n,):
            raise DataError(f"groups['{column}'] has shape {value.shape}; give one value per label ({n}).")
    return y.astype(np.int64), columns


def array_data(
    scores: np.ndarray,
    labels: np.ndarray,
    patient_keys: np.ndarray,
    order: np.ndarray,
    columns: Mapping[str, np.ndarray],
    class_names: Sequence[str],
    min_count_shown: int,
) -> EvaluationData:
    """The rows in split-key order (``order``, :func:`row_order`) as the evaluation's data.

    Subgroup values as a run has a predictions file's columns: normalised as a column subgroup's, rare
    ones pooled.
    """
    n = len(labels)
    rows = [{k: attribute_value(k, {k: str(v[i])}) for k, v in columns.items()} for i in range(n)]
    shown = suppress_rare_values(rows, min_count_shown, keep=(UNKNOWN, UNMAPPED))
    return EvaluationData(
        logits=scores[order],
        labels=labels[order],
        # in memory only: the split keys order the split and the resamples, as the command line's do
        patient_keys=patient_keys[order],
        study_keys=np.array([f"row {i}" for i in order.tolist()]),
        attributes={k: np.array([shown[i][k] for i in order.tolist()], dtype=object) for k in columns},
        class_names=list(class_names),
    )


def flow(n: int) -> dict[str, Any]:
    """The cohort flow of ``n`` rows given as arrays (a predictions file with every row usable)."""
    return {
        "files_found": 0,
        "dicom_instances": 0,
        "studies": n,
        "labelled": n,
        "analysed": n,
        "exclusions": [],
        "source": "predictions_file",
    }


def row_order(
    patients: ArrayLike | None, studies: ArrayLike | None, n: int, *, key: str
) -> tuple[np.ndarray, np.ndarray]:
    """The rows in the command line's order, and each row's patient split key (:mod:`sitecal._split_key`).

    As ``sitecal evaluate`` reads a predictions file: a study's order is the split key of its id (of
    kind ``study`` for a StudyInstanceUID, else the key's name); a patient's, the split key of their id,
    or their study's for a study without a patient; rows are sorted by (patient, study). Returns the
    permutation, shape (N,), and the split keys in the arrays' order, shape (N,).
    """
    if key not in ("StudyInstanceUID", "AccessionNumber"):
        raise DataError(
            "The 'key' parameter of evaluate_arrays must be 'StudyInstanceUID' or 'AccessionNumber'. "
            f"Got {key!r}."
        )
    study_ids = [str(i) for i in range(n)] if studies is None else _ids(studies, n, "studies")
    if any(not s for s in study_ids) or len(set(study_ids)) != n:
        raise DataError(
            "studies must hold a distinct, non-empty id per label (a predictions file's key column); "
            "leave it out to order studies by their row."
        )
    kind = "study" if key == "StudyInstanceUID" else key
    study_orders = [split_key(kind, s) for s in study_ids]
    patient_ids = [""] * n if patients is None else _ids(patients, n, "patients")
    patient_orders = [
        split_key("patient", p) if p else study for p, study in zip(patient_ids, study_orders, strict=True)
    ]
    order = sorted(range(n), key=lambda i: (patient_orders[i], study_orders[i]))
    return np.array(order, dtype=np.int64), np.array(patient_orders)


def _ids(values: ArrayLike, n: int, name: str) -> list[str]:
    """Ids as a file's trimmed cells, one per label."""
    ids = np.asarray(values).astype(str)
    if ids.shape != (n,):
        raise DataError(f"{name} has shape {ids.shape}; give one id per label ({n}).")
    return [s.strip() for s in ids.tolist()]


def scores_of(logits: ArrayLike | None, probabilities: ArrayLike | None) -> np.ndarray:
    if (logits is None) == (probabilities is None):
        raise DataError("give exactly one of logits= or probabilities=.")
    if logits is not None:
        return np.asarray(logits, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim == 2 and (np.any(p < 0) or np.any(p > 1) or np.any(np.abs(p.sum(axis=1) - 1) > 1e-3)):
        raise DataError("probabilities must lie in [0, 1] and each row must sum to 1 (within 0.001).")
    return log_probabilities(p)
