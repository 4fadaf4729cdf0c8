"""Which studies fit the temperatures and which are evaluated: one patient split, or K cross-fitted folds.

- ``split.by: patient``: patients fall in a fit part (temperatures) and an evaluation part (metrics).
- ``split.by: crossfit``: patients fall in K folds; the temperatures for fold k are fitted on the other
  K - 1 folds, so every study is evaluated once, with temperatures that never saw it. The temperatures
  deployed (``calibration.json``) are fitted on every study; the evaluation measures the procedure that
  made them (Chernozhukov et al. 2018, cross-fitting; Hastie et al., cross-validation).

Both assign patients by their sorted keys and the protocol's seed, so the split depends only on the data
and the protocol, not on file order or the pseudonym key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sitecal.calibration import GroupTemperatures, fit_group_methods, fit_group_temperatures

__all__ = ["Split", "crossfit_folds", "make_split", "split_patients"]


def _patients_by_stratum(patient_keys: np.ndarray, strata: np.ndarray) -> dict[str, np.ndarray]:
    """Each stratum's patients, sorted; a patient belongs to the stratum of their first row in key order."""
    order = np.argsort(patient_keys, kind="stable")
    first_stratum: dict[str, str] = {}
    for i in order:
        first_stratum.setdefault(str(patient_keys[i]), str(strata[i]))
    return {
        stratum: np.array(sorted(p for p, s in first_stratum.items() if s == stratum))
        for stratum in sorted(set(first_stratum.values()))
    }


def split_patients(
    patient_keys: np.ndarray, strata: np.ndarray, *, fit_fraction: float, seed: int
) -> np.ndarray:
    """Seeded patient-level split, stratified: a boolean mask of the rows in the fit part.

    Each patient belongs to the stratum of their first row (in key order). Within each stratum (sorted),
    patients are sorted by key, permuted by ``numpy.random.default_rng(seed)`` and the first
    ``round(fit_fraction * n)`` go to the fit part, so the split depends only on the keys and the seed, not
    on file order.
    """
    rng = np.random.default_rng(seed)
    fit_patients: set[str] = set()
    for members in _patients_by_stratum(patient_keys, strata).values():
        permuted = members[rng.permutation(len(members))]
        fit_patients.update(permuted[: round(fit_fraction * len(members))].tolist())
    return np.array([str(p) in fit_patients for p in patient_keys], dtype=bool)


def crossfit_folds(patient_keys: np.ndarray, strata: np.ndarray, *, folds: int, seed: int) -> np.ndarray:
    """Seeded patient-level folds, stratified: the fold (0 to ``folds`` - 1) of each row, shape (N,).

    Within each stratum (sorted), patients are sorted by key, permuted by
    ``numpy.random.default_rng(seed)`` and dealt to the folds in turn, the deal continuing from one stratum
    to the next, so fold sizes differ by at most one patient overall and within each stratum.

    Examples
    --------
    >>> keys = np.array(["p1", "p2", "p3", "p4", "p1"])
    >>> f = crossfit_folds(keys, np.array(["a"] * 5), folds=2, seed=0)
    >>> int(f[0]) == int(f[4]), sorted(np.bincount(f[:4]).tolist())
    (True, [2, 2])
    """
    rng = np.random.default_rng(seed)
    fold_of: dict[str, int] = {}
    dealt = 0
    for members in _patients_by_stratum(patient_keys, strata).values():
        for patient in members[rng.permutation(len(members))].tolist():
            fold_of[patient] = dealt % folds
            dealt += 1
    return np.array([fold_of[str(p)] for p in patient_keys], dtype=np.int64)


@dataclass(frozen=True)
class Split:
    """The rows that fit temperatures and the rows evaluated, for either split method.

    Attributes
    ----------
    method : {"patient", "crossfit"}
    fold : numpy.ndarray of int, shape (N,)
        ``patient``: 0 for the fit part, 1 for the evaluation part. ``crossfit``: the row's fold.
    folds : int
        2 for ``patient`` (the two parts), K for ``crossfit``.
    """

    method: Literal["patient", "crossfit"]
    fold: np.ndarray
    folds: int

    @property
    def held(self) -> np.ndarray:
        """Rows evaluated: the evaluation part, or every row under cross-fitting."""
        return self.fold == 1 if self.method == "patient" else np.ones(self.fold.shape[0], dtype=bool)

    @property
    def fit(self) -> np.ndarray:
        """Rows some temperature is fitted on: the fit part, or every row under cross-fitting."""
        return self.fold == 0 if self.method == "patient" else np.ones(self.fold.shape[0], dtype=bool)

    @classmethod
    def from_fit_mask(cls, fit: np.ndarray) -> Split:
        """The one-split form of a boolean mask of fit rows (True: fit part)."""
        return cls("patient", np.where(np.asarray(fit, dtype=bool), 0, 1).astype(np.int64), 2)

    def row_labels(self) -> np.ndarray:
        """Each row's part as ``cohort.csv`` writes it: ``fit``, ``evaluation`` or ``fold 1`` to ``K``."""
        if self.method == "patient":
            return np.where(self.fold == 0, "fit", "evaluation").astype(object)
        return np.array([f"fold {k + 1}" for k in self.fold.tolist()], dtype=object)

    def pairs(self, keep: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """(rows fitted on, rows evaluated with that fit) for each fit, among ``keep`` rows (default all)."""
        kept = np.ones(self.fold.shape[0], dtype=bool) if keep is None else keep
        if self.method == "patient":
            return [(kept & (self.fold == 0), kept & (self.fold == 1))]
        return [(kept & (self.fold != k), kept & (self.fold == k)) for k in range(self.folds)]


def make_split(calibration: Any, patient_keys: np.ndarray, strata: np.ndarray) -> Split:
    """The protocol's split (``calibration.split``) of these rows."""
    settings = calibration.split
    if settings.by == "crossfit":
        fold = crossfit_folds(patient_keys, strata, folds=settings.folds, seed=settings.seed)
        return Split("crossfit", fold, settings.folds)
    fit = split_patients(patient_keys, strata, fit_fraction=settings.fit_fraction, seed=settings.seed)
    return Split.from_fit_mask(fit)


def fold_fits(
    split: Split,
    logits: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    patients: np.ndarray,
    policy: Mapping[str, Any],
    keep: np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray, GroupTemperatures]]:
    """Each fit that calibrates some rows: (rows fitted on, rows evaluated with it, its temperatures).

    ``patients``: each row's patient (the clusters of an empirical-Bayes variance). ``policy``:
    ``min_group_size`` and ``fallback`` of :func:`~sitecal.calibration.fit_group_temperatures`. A fold
    without fit rows or without evaluated rows is left out (its rows get no temperature).
    """
    out = []
    for fit, held in split.pairs(keep):  # a loop over folds
        if not held.any() or not fit.any():
            continue
        temps = fit_group_temperatures(
            logits[fit], labels[fit], groups[fit], clusters=patients[fit], **policy
        )
        out.append((fit, held, temps))
    return out


def applied_temperatures(
    split: Split,
    logits: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    patients: np.ndarray,
    policy: Mapping[str, Any],
    keep: np.ndarray | None = None,
    fits: list[tuple[np.ndarray, np.ndarray, GroupTemperatures]] | None = None,
) -> np.ndarray:
    """The temperature each evaluated row (among ``keep``) gets from a fit that did not see it: shape (N,).

    Rows not evaluated get NaN, and so do a fold's rows when the fold has no fit rows (:func:`fold_fits`).
    ``fits``: :func:`fold_fits` of these arguments, where the caller has them.
    """
    out = np.full(labels.shape[0], np.nan)
    if fits is None:
        fits = fold_fits(split, logits, labels, groups, patients, policy, keep)
    for _, held, temps in fits:  # a loop over the split's fits
        out[held] = temps.temperatures_for(groups[held])
    return out


def applied_probabilities(
    split: Split,
    logits: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    method: str,
    min_group_size: int,
    keep: np.ndarray | None = None,
) -> np.ndarray:
    """Each evaluated row's (among ``keep``) probabilities after ``method`` fitted without it: (N, C).

    One split: the method's fits per group on the fit part; cross-fitting: each fold's on the other folds
    (the global fit for a group below ``min_group_size`` there). Rows not evaluated, and a fold's rows when
    the fold has no fit rows, get NaN.
    """
    out = np.full(logits.shape, np.nan)
    for fit, held in split.pairs(keep):  # a loop over folds
        if not held.any() or not fit.any():
            continue
        fitted = fit_group_methods(
            method, logits[fit], labels[fit], groups[fit], min_group_size=min_group_size
        )
        out[held] = fitted.probabilities(logits[held], groups[held])[0]
    return out


def deployed_temperatures(
    split: Split,
    logits: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    patients: np.ndarray,
    policy: Mapping[str, Any],
) -> GroupTemperatures:
    """The temperatures ``calibration.json`` holds: fitted on the fit part, or on every row (crossfit)."""
    fit = split.fit
    return fit_group_temperatures(logits[fit], labels[fit], groups[fit], clusters=patients[fit], **policy)
