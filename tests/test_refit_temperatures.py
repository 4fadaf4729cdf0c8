"""The refit bootstrap's temperatures start from the split's fold fits instead of fitting each again."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.calibration import BatchedTemperatureSolver
from sitecal.evaluation._disparities import refit_temperatures
from sitecal.evaluation._split import Split, crossfit_folds, fold_fits, split_patients
from sitecal.metrics import softmax
from sitecal.stats import BootstrapSpec


def _cohort() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    n = 1500
    groups = np.array(["a", "b", "c"], dtype=object)[rng.choice(3, n, p=[0.6, 0.37, 0.03])]
    z = rng.normal(size=(n, 3)) * 2.0
    p = softmax(z / np.where(groups == "a", 1.5, 0.8)[:, None])
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1).clip(0, 2)
    patients = np.array([f"p{i // 2:04d}" for i in range(n)], dtype=object)
    return z, y, groups, patients


@pytest.mark.parametrize("method", ["crossfit", "patient"])
def test_a_fold_fit_taken_over_is_the_fit_the_solver_makes_of_its_own_rows(method: str) -> None:
    """Each fold's own and global fits, given to the batched solver, equal the fits it makes itself."""
    z, y, groups, patients = _cohort()
    if method == "crossfit":
        split = Split("crossfit", crossfit_folds(patients, groups, folds=3, seed=4), 3)
    else:
        split = Split.from_fit_mask(split_patients(patients, groups, fit_fraction=0.5, seed=4))
    policy = {"min_group_size": 100, "fallback": "global"}  # group "c" falls back to the global T
    fits = fold_fits(split, z, y, groups, patients, policy)
    assert any(t.groups["c"].source == "global_fallback" for _, _, t in fits)
    checked = 0
    for fit, _, temps in fits:  # a loop over the split's fits
        for group, known in temps.groups.items():  # a loop over groups: own fits, then the global one
            rows = fit & (groups == group) if known.source == "own" else fit
            given = known.fit if known.source == "own" else temps.global_fit
            clusters = np.unique(patients[rows], return_inverse=True)[1]
            k = int(clusters.max()) + 1
            taken = BatchedTemperatureSolver(z[rows], y[rows], clusters, k, fit=given)
            own = BatchedTemperatureSolver(z[rows], y[rows], clusters, k)
            assert taken.fit == own.fit
            assert taken.interval == own.interval and np.array_equal(taken.cluster_terms, own.cluster_terms)
            checked += 1
    assert checked >= 3


def test_refits_from_given_fold_fits_equal_refits_from_fits_made_again() -> None:
    z, y, groups, patients = _cohort()
    split = Split("crossfit", crossfit_folds(patients, groups, folds=3, seed=4), 3)
    policy = {"min_group_size": 100, "fallback": "global"}
    spec = BootstrapSpec(n_resamples=20, seed=3)
    fits = fold_fits(split, z, y, groups, patients, policy)
    given = refit_temperatures(split, z, y, groups, patients, policy, spec, fits=fits)
    again = refit_temperatures(split, z, y, groups, patients, policy, spec)
    assert given is not None and again is not None
    assert np.array_equal(given.s0_solvers, again.s0_solvers)
    assert np.array_equal(given.solver_of_row, again.solver_of_row)
    indices = np.random.default_rng(5).integers(0, given.patients.shape[0], (6, given.patients.shape[0]))
    identity = np.arange(given.patients.shape[0])
    assert np.array_equal(given.solvers.solve(indices, identity), again.solvers.solve(indices, identity))
