"""What the size-matched flag tests share: their options, checked once, and the rows laid out by patient.

:func:`~sitecal.stats.size_matched_flags` (and its forms for several cases and attributes) and
:func:`~sitecal.stats.refit_size_matched_flags` permute whole patients the same way: the rows are taken
in patient order, each permutation draws a random order of the patients (``rng.permutation``) and lays
the rows out in it, and the original sequence of group labels (in patient order) is assigned to the new
sequence of rows. Every group keeps its number of rows exactly, and a patient's studies stay together
(only a patient at the boundary between two groups' runs is split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._kernels import assign_rows, layout_starts
from sitecal._validation import check_float, check_int, check_option
from sitecal.stats._resample import make_plan

__all__ = ["PatientLayout", "PermutationOptions"]


@dataclass(frozen=True)
class PermutationOptions:
    """A flag test's options, checked: how many permutations, the level, the seed and the alternative."""

    n_permutations: int
    level: float
    seed: int
    alternative: Literal["worse", "two-sided"]

    @classmethod
    def checked(
        cls,
        n_permutations: int,
        level: float,
        seed: int,
        alternative: Literal["worse", "two-sided"],
        *,
        func: str,
    ) -> PermutationOptions:
        """The options as given, after checking each (errors name ``func``)."""
        n_perm = check_int(n_permutations, name="n_permutations", func=func, minimum=1)
        lvl = check_float(level, name="level", func=func, low=0.0, high=1.0)
        rng_seed = check_int(seed, name="seed", func=func, minimum=0)
        check_option(alternative, name="alternative", func=func, options=("worse", "two-sided"))
        return cls(n_perm, lvl, rng_seed, alternative)


@dataclass(frozen=True)
class PatientLayout:
    """Rows in patient order (then row order within a patient): the layout every permutation reshuffles.

    Attributes
    ----------
    patient : numpy.ndarray, shape (N,)
        Each row's patient, ``0 .. n_patients - 1``.
    n_patients : int
    within : numpy.ndarray, shape (N,)
        Each row's place among its patient's rows.
    by_patient : numpy.ndarray, shape (N,)
        The rows in patient order: ``codes[by_patient]`` is the sequence of group labels to assign.
    size : numpy.ndarray, shape (n_patients,)
        Rows of each patient.
    """

    patient: NDArray[np.int64]
    n_patients: int
    within: NDArray[np.int64]
    by_patient: NDArray[np.intp]
    size: NDArray[np.int64]

    @classmethod
    def of(cls, n: int, clusters: ArrayLike | None, *, func: str) -> PatientLayout:
        """The layout of ``n`` rows whose patients are ``clusters`` (None: each row its own patient)."""
        plan = make_plan(n, clusters, None, func=func)
        patient = plan.cluster_of_row
        by_patient = np.lexsort((np.arange(n), patient))
        within = np.empty(n, dtype=np.int64)
        first = np.searchsorted(patient[by_patient], patient[by_patient])
        within[by_patient] = np.arange(n) - first
        size = np.bincount(patient, minlength=plan.n_clusters)
        return cls(patient, plan.n_clusters, within, by_patient, size)

    def starts(self, rng: np.random.Generator) -> NDArray[np.int64]:
        """One permutation's layout: the patients in a random order, where each one's rows start."""
        return layout_starts(rng.permutation(self.n_patients), self.size)

    def assign(self, starts: NDArray[np.int64], sequence: NDArray[np.integer]) -> NDArray[np.integer]:
        """Each row's group in the layout ``starts``: ``sequence`` laid over the rows in their new order."""
        return assign_rows(starts, self.patient, self.within, sequence)
