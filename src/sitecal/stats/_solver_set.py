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
    families : sequence of sequences of int, optional
        Groups of solvers (indices into ``solvers``) that share one surrogate
        (:func:`~sitecal.calibration.family_surrogates`): a patient's coefficients are the same in every
        member that holds it. Solvers in no family are each their own.

    Notes
    -----
    A resample's fit of every temperature needs, per solver, the sums of its clusters' surrogate terms
    weighted by how often the resample drew each patient (:meth:`BatchedTemperatureSolver.solve_summed`).
    Those sums are taken for all solvers in one pass over the patients
    (:func:`~sitecal._kernels.membership_sums`), patient by patient in ascending order, instead of one
    (resamples x clusters) weight matrix per solver. A family's patients are summed once, in bins of the
    patients held by the same members (cross-fitting: a fold's patients, held by every other fold's
    fit); a member's sum adds its bins in bin order.
    """

    def __init__(
        self,
        solvers: Sequence[tuple[BatchedTemperatureSolver, NDArray[np.int64]]],
        n_patients: int,
        families: Sequence[Sequence[int]] = (),
    ):
        self.solvers = [solver for solver, _ in solvers]
        self._patients = [np.asarray(used, dtype=np.int64) for _, used in solvers]
        self._n_patients = n_patients
        grouped = {i for family in families for i in family}
        groups = [list(f) for f in families] + [[i] for i in range(len(self.solvers)) if i not in grouped]
        self._width = max((s.cluster_terms.shape[1] for s in self.solvers), default=1)
        rows, owners, patients = [], [], []
        self._bins: list[list[int]] = [[] for _ in self.solvers]  # each solver's bins, ascending
        n_bins = 0
        for members in groups:  # a loop over families: a row per patient, in the bin of its members
            held = np.zeros((len(members), n_patients), dtype=bool)
            for m, i in enumerate(members):
                held[m, self._patients[i]] = True
            family = np.flatnonzero(held.any(axis=0))
            signatures, bin_of = np.unique(held[:, family].T, axis=0, return_inverse=True)
            for b, signature in enumerate(signatures):  # a loop over the family's bins
                for m in np.flatnonzero(signature).tolist():
                    self._bins[members[m]].append(n_bins + b)
            first = held[:, family].argmax(axis=0)  # a member holding each patient: its row of terms
            table = np.zeros((family.shape[0], self._width))
            for m, i in enumerate(members):  # a loop over members: the patients taken from it
                mine = first == m
                terms = self.solvers[i].cluster_terms
                at = np.searchsorted(self._patients[i], family[mine])
                table[mine, : terms.shape[1] - 1] = terms[at, :-1]
                table[mine, -1] = terms[at, -1]
            rows.append(table)
            owners.append(n_bins + bin_of.reshape(-1))
            patients.append(family)
            n_bins += signatures.shape[0]
        self._n_bins = n_bins
        owner = np.concatenate(owners) if owners else np.zeros(0, dtype=np.int64)
        patient = np.concatenate(patients) if patients else np.zeros(0, dtype=np.int64)
        table = np.concatenate(rows) if rows else np.zeros((0, self._width))
        order = np.lexsort((owner, patient))  # patient by patient, bins in order within a patient
        self._block = np.ascontiguousarray(owner[order], dtype=np.int64)
        self._table = np.ascontiguousarray(table[order])
        self._ptr = np.concatenate([[0], np.cumsum(np.bincount(patient, minlength=n_patients))]).astype(
            np.int64
        )

    @property
    def table_rows(self) -> int:
        """Rows of the coefficients' table: one per patient and family (or solver of its own)."""
        return int(self._table.shape[0])

    def solve(self, indices: NDArray[np.int64], patient_of_cluster: NDArray[np.int64]) -> NDArray[np.float64]:
        """Every solver's log temperature in each resample: (R, n_solvers).

        ``indices`` (R, D): each resample's drawn clusters; ``patient_of_cluster``: each cluster's patient.
        """
        summed = membership_sums(
            indices, patient_of_cluster, self._ptr, self._block, self._table, self._n_bins
        )

        def patient_weights(rows: NDArray[np.intp]) -> NDArray[np.float64]:
            """How often resamples ``rows`` drew each patient, (len(rows), n_patients)."""
            drawn = patient_of_cluster[indices[rows]]
            flat = (drawn + (np.arange(rows.shape[0]) * self._n_patients)[:, None]).reshape(-1)
            counts = np.bincount(flat, minlength=rows.shape[0] * self._n_patients)
            return counts.reshape(rows.shape[0], self._n_patients).astype(np.float64)

        out = np.empty((indices.shape[0], len(self.solvers)))
        for s, (solver, used) in enumerate(zip(self.solvers, self._patients, strict=True)):  # solvers
            total = np.zeros((indices.shape[0], self._width))  # a solver without patients sums nothing
            for n, b in enumerate(self._bins[s]):  # a loop over the solver's bins, in bin order
                total = summed[:, b] if n == 0 else total + summed[:, b]
            terms = np.concatenate([total[:, : solver.degree], total[:, -1:]], axis=1)
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
