"""Many batched temperature fits over one set of patients, refitted together from each resample's draws."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels import membership_sums
from sitecal.calibration import BatchedTemperatureSolver

__all__ = ["SolverSet"]


class SolverSet:
    """Temperatures fitted on overlapping sets of patients, all refitted under each resample's draws.

    Parameters
    ----------
    solvers : sequence of (BatchedTemperatureSolver, numpy.ndarray of int64)
        Each solver and the patient (an index in ``[0, n_patients)``) of each of its clusters, in its
        cluster order, ascending (as ``numpy.unique`` gives them).
    n_patients : int

    Notes
    -----
    A resample's fit of every temperature needs, per solver, the sums of its clusters' surrogate terms
    weighted by how often the resample drew each patient (:meth:`BatchedTemperatureSolver.solve_summed`).
    Those sums are taken for all solvers in one pass over the patients
    (:func:`~sitecal._kernels.membership_sums`), patient by patient in ascending order, instead of one
    (resamples x clusters) weight matrix per solver.
    """

    def __init__(
        self, solvers: Sequence[tuple[BatchedTemperatureSolver, NDArray[np.int64]]], n_patients: int
    ):
        self.solvers = [solver for solver, _ in solvers]
        self._patients = [np.asarray(used, dtype=np.int64) for _, used in solvers]
        self._n_patients = n_patients
        tables = [solver.cluster_terms for solver in self.solvers]
        self._width = max((t.shape[1] for t in tables), default=1)
        owner = np.concatenate([np.full(u.shape[0], s, dtype=np.int64) for s, u in enumerate(self._patients)])
        patient = np.concatenate(self._patients) if self._patients else np.zeros(0, dtype=np.int64)
        table = np.zeros((patient.shape[0], self._width))
        at = 0
        for t in tables:  # a loop over solvers: each its own degree, the error bound last
            table[at : at + t.shape[0], : t.shape[1] - 1] = t[:, :-1]
            table[at : at + t.shape[0], -1] = t[:, -1]
            at += t.shape[0]
        order = np.lexsort((owner, patient))  # patient by patient, solvers in order within a patient
        self._block = owner[order]
        self._table = np.ascontiguousarray(table[order])
        self._ptr = np.concatenate([[0], np.cumsum(np.bincount(patient, minlength=n_patients))]).astype(
            np.int64
        )

    def solve(self, indices: NDArray[np.int64], patient_of_cluster: NDArray[np.int64]) -> NDArray[np.float64]:
        """Every solver's log temperature in each resample: (R, n_solvers).

        ``indices`` (R, D): each resample's drawn clusters; ``patient_of_cluster``: each cluster's patient.
        """
        summed = membership_sums(
            indices, patient_of_cluster, self._ptr, self._block, self._table, len(self.solvers)
        )

        def patient_weights(rows: NDArray[np.intp]) -> NDArray[np.float64]:
            """How often resamples ``rows`` drew each patient, (len(rows), n_patients)."""
            drawn = patient_of_cluster[indices[rows]]
            flat = (drawn + (np.arange(rows.shape[0]) * self._n_patients)[:, None]).reshape(-1)
            counts = np.bincount(flat, minlength=rows.shape[0] * self._n_patients)
            return counts.reshape(rows.shape[0], self._n_patients).astype(np.float64)

        out = np.empty((indices.shape[0], len(self.solvers)))
        for s, (solver, used) in enumerate(zip(self.solvers, self._patients, strict=True)):  # solvers
            terms = np.concatenate([summed[:, s, : solver.degree], summed[:, s, -1:]], axis=1)
            out[:, s] = solver.solve_summed(
                terms, functools.partial(_columns, patient_weights, used)
            ).log_temperature
        return out


def _columns(
    weights: Callable[[NDArray[np.intp]], NDArray[np.float64]],
    used: NDArray[np.int64],
    rows: NDArray[np.intp],
) -> NDArray[np.float64]:
    """The columns ``used`` of ``weights(rows)``."""
    return weights(rows)[:, used]
