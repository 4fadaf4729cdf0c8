"""The refit bootstrap's temperatures start from the split's fold fits instead of fitting each again."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sitecal.calibration import BatchedTemperatureSolver, fit_temperature
from sitecal.evaluation._disparities import refit_temperatures
from sitecal.evaluation._split import Split, crossfit_folds, fold_fits, split_patients
from sitecal.metrics import softmax
from sitecal.stats import BootstrapSpec
from sitecal.stats._disparity_refit import TemperatureReplicates


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


def _replicates(*, shared: bool) -> tuple[TemperatureReplicates, np.ndarray, np.ndarray, np.ndarray]:
    """Cross-fitted refits of the cohort's temperatures: fold temperatures sharing surrogates, or not."""
    z, y, groups, patients = _cohort()
    split = Split("crossfit", crossfit_folds(patients, groups, folds=4, seed=2), 4)
    policy = {"min_group_size": 100, "fallback": "global"}
    spec = BootstrapSpec(n_resamples=20, seed=3)
    rep = refit_temperatures(split, z, y, groups, patients, policy, spec)
    assert rep is not None
    if not shared:  # the same temperatures, each with a surrogate of its own
        fits = [dataclasses.replace(f, family=None) for f in rep.fits]
        rep = TemperatureReplicates(z, y, patients, patients, fits, shared=True, spec=spec)
    return rep, z, y, np.unique(patients, return_inverse=True)[1]


def test_a_groups_fold_temperatures_share_one_surrogate_and_refit_within_the_certified_error() -> None:
    """Cross-fitting fits a group's temperature in each fold on the other folds' patients: one surrogate
    serves them all, each patient's coefficients summed once per family, and every refit stays within
    the certified 1e-9 of the exact weighted fit."""
    shared, z, y, patient = _replicates(shared=True)
    alone, *_ = _replicates(shared=False)
    n = shared.patients.shape[0]
    indices = np.random.default_rng(8).integers(0, n, (10, n))
    s_shared = shared.solvers.solve(indices, np.arange(n))
    s_alone = alone.solvers.solve(indices, np.arange(n))
    assert not np.array_equal(s_shared, s_alone)  # other surrogates ...
    np.testing.assert_allclose(s_shared, s_alone, rtol=0, atol=2e-9)  # ... both certified
    # a patient's row once per family (its group's folds; the global ones), not once per temperature
    assert shared.solvers.table_rows < 0.5 * alone.solvers.table_rows
    checked = 0
    for b in (0, 7):  # a loop over resamples: the exact fit of every temperature on the drawn rows
        count = np.bincount(indices[b], minlength=n)
        for i, fit in enumerate(shared.fits):  # a loop over temperatures
            repeat = np.where(fit.fit_rows, count[patient], 0)
            exact = fit_temperature(np.repeat(z, repeat, axis=0), np.repeat(y, repeat), tol=1e-12)
            solver = int(shared.solver_of_row[np.flatnonzero(fit.eval_rows)[0]])
            assert abs(s_shared[b, solver] - exact.log_temperature) <= 1e-9 + 1e-11, (b, i)
            checked += 1
    assert checked >= 2 * 8


def test_temperatures_not_on_whole_patients_keep_surrogates_of_their_own() -> None:
    """A family one of whose temperatures holds part of a patient's rows is not shared: its refits are
    those of surrogates of their own, bit for bit (the other families still share theirs)."""
    rep, z, y, _ = _replicates(shared=True)
    patients = np.array([f"p{i // 2:04d}" for i in range(z.shape[0])], dtype=object)
    fits = list(rep.fits)
    first = fits[0].fit_rows.copy()
    first[np.flatnonzero(first)[0]] = False  # one row of a patient left out of this temperature
    fits[0] = dataclasses.replace(fits[0], fit_rows=first, fit=fit_temperature(z[first], y[first]))
    family = fits[0].family
    assert family is not None and sum(f.family == family for f in fits) >= 2
    own = [dataclasses.replace(f, family=None) if f.family == family else f for f in fits]
    cut = TemperatureReplicates(z, y, patients, patients, fits, shared=True, spec=rep.spec)
    apart = TemperatureReplicates(z, y, patients, patients, own, shared=True, spec=rep.spec)
    assert cut.solvers.table_rows == apart.solvers.table_rows
    n = cut.patients.shape[0]
    indices = np.random.default_rng(1).integers(0, n, (4, n))
    assert np.array_equal(
        cut.solvers.solve(indices, np.arange(n)), apart.solvers.solve(indices, np.arange(n))
    )
