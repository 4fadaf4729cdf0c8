"""The size-matched flags' layouts: the patients laid out in a permutation's order, rows given groups."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels._compile import compiled

__all__ = ["assign_rows", "layout_starts"]


def _layout_starts(
    rank: NDArray[np.int64],
    patient_size: NDArray[np.int64],
    by_rank: NDArray[np.int64],
    before: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    for c in range(rank.shape[0]):
        by_rank[rank[c]] = c
    total = 0
    for r in range(by_rank.shape[0]):  # rows of the patients ranked before
        c = by_rank[r]
        before[c] = total
        total += patient_size[c]


def _assign_rows(
    before: NDArray[np.int64],
    patient: NDArray[np.int64],
    within: NDArray[np.int64],
    label_sequence: NDArray[np.int64],
    out: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    for i in range(patient.shape[0]):
        out[i] = label_sequence[before[patient[i]] + within[i]]


def layout_starts(rank: NDArray[np.int64], patient_size: NDArray[np.int64]) -> NDArray[np.int64]:
    """Where each patient's rows start when the patients are laid out in ``rank`` order: shape (K,).

    Patient ``c`` goes to place ``rank[c]``; its rows start after the rows of the patients placed before.

    Examples
    --------
    >>> layout_starts(np.array([1, 0]), np.array([1, 2])).tolist()
    [2, 0]
    """
    k = rank.shape[0]
    before = np.empty(k, dtype=np.int64)
    compiled(_layout_starts)(rank, patient_size, np.empty(k, np.int64), before)
    return before


def assign_rows(
    before: NDArray[np.int64],
    patient: NDArray[np.int64],
    within: NDArray[np.int64],
    label_sequence: NDArray[np.int64],
) -> NDArray[np.int64]:
    """Each row's group in a layout (:func:`layout_starts`), shape (N,).

    The group ``label_sequence`` holds at the row's new position: its patient's start plus its place
    ``within`` the patient.

    Examples
    --------
    >>> before = layout_starts(np.array([1, 0]), np.array([1, 2]))  # patient 1 (two rows) placed first
    >>> assign_rows(before, np.array([0, 1, 1]), np.array([0, 0, 1]), np.array([5, 6, 7])).tolist()
    [7, 5, 6]
    """
    out = np.empty(patient.shape[0], dtype=np.int64)
    compiled(_assign_rows)(before, patient, within, label_sequence, out)
    return out
