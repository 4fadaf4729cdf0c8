"""Recalibration methods: invariants (hypothesis), degenerate resamples, errors, groups and round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sitecal.calibration import METHODS, FittedMethod, GroupMethods, fit_group_methods, fit_method
from sitecal.errors import DataError
from sitecal.metrics import softmax


def sample(n: int, k: int, seed: int, *, scale: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    z = rng.normal(0.0, 1.0, (n, k))
    z[np.arange(n), y] += 1.2
    return scale * z, y


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(METHODS),
    k=st.integers(2, 4),
    n=st.integers(2, 30),
    seed=st.integers(0, 10_000),
    scale=st.floats(0.01, 30.0),
)
def test_probabilities_are_distributions(method: str, k: int, n: int, seed: int, scale: float) -> None:
    if method == "beta":
        k = 2
    z, y = sample(n, k, seed, scale=scale)
    w = np.random.default_rng(seed).integers(0, 3, (3, n))
    p = fit_method(method, z, y, w).probabilities(sample(20, k, seed + 1, scale=scale)[0])
    assert p.shape == (3, 20, k)
    assert np.isfinite(p).all() and (p >= 0).all()
    np.testing.assert_allclose(p.sum(axis=2), 1.0, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 10_000))
def test_isotonic_is_monotone_in_the_score(n: int, seed: int) -> None:
    z, y = sample(n, 2, seed)
    w = np.random.default_rng(seed).uniform(0, 2, (2, n))
    probe = np.stack([np.zeros(200), np.linspace(-10, 10, 200)], axis=1)
    q = fit_method("isotonic", z, y, w).probabilities(probe)[:, :, 1]
    assert (np.diff(q, axis=1) >= -1e-15).all()


def test_calibrated_sample_leaves_temperature_and_vector_scaling_at_identity() -> None:
    # labels drawn from softmax(z) itself: the identity map is the truth
    rng = np.random.default_rng(0)
    n = 40_000
    z = rng.normal(0, 2.0, (n, 3))
    p = softmax(z)
    y = (rng.uniform(size=(n, 1)) > np.cumsum(p, axis=1)).sum(axis=1)
    t = fit_method("temperature", z, y).params["temperature"][0]
    assert abs(t - 1.0) < 0.03  # sampling error of T at 40,000 rows is about 0.01
    vec = fit_method("vector", z, y)
    np.testing.assert_allclose(vec.params["a"][0], 1.0, atol=0.05)
    np.testing.assert_allclose(vec.params["b"][0], 0.0, atol=0.05)


@pytest.mark.parametrize("method", METHODS)
def test_one_class_and_empty_resamples_are_defined_and_noted(method: str) -> None:
    z, y = sample(40, 2, 1)
    w = np.ones((3, 40))
    w[1, y == 1] = 0.0  # resample 1: only class 0
    w[2] = 0.0  # resample 2: nothing drawn
    fit = fit_method(method, z, y, w)
    p = fit.probabilities(z)
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p.sum(axis=2), 1.0, atol=1e-12)
    assert any("In resamples 2 (1 of 3)" in note for note in fit.notes), fit.notes
    if method in ("vector", "matrix", "dirichlet", "beta"):
        assert any("In resamples 1 (1 of 3)" in note for note in fit.notes), fit.notes
        np.testing.assert_allclose(p[1], softmax(z), atol=1e-12)  # identity map
    if method in ("vector", "matrix", "dirichlet", "beta", "isotonic"):
        np.testing.assert_allclose(p[2], softmax(z), atol=1e-12)
    if method == "temperature":
        assert any("In resamples 1 (1 of 3): only one class" in note for note in fit.notes), fit.notes


def test_unknown_method_and_option_messages() -> None:
    z, y = sample(10, 2, 2)
    with pytest.raises(DataError) as info:
        fit_method("isotonc", z, y)
    assert str(info.value) == (
        "The 'name' parameter of fit_method must be one of 'temperature', 'vector', 'matrix', "
        "'dirichlet', 'histogram', 'isotonic', 'beta'. Got 'isotonc'. Did you mean 'isotonic'?"
    )
    with pytest.raises(DataError) as info:
        fit_method("matrix", z, y, reg_lamda=0.1)
    assert str(info.value) == (
        "fit_method got an unknown option 'reg_lamda' for method 'matrix'; its options are 'reg_lambda', "
        "'reg_mu', 'tol', 'max_iter'. Did you mean 'reg_lambda'?"
    )
    with pytest.raises(DataError, match=r"'weights' parameter of fit_method must have shape \(R, 10\)"):
        fit_method("vector", z, y, np.ones(10))
    with pytest.raises(DataError, match=r"must be finite and >= 0\. Got -1\.0 at index"):
        fit_method("vector", z, y, -np.ones((1, 10)))
    with pytest.raises(DataError, match="'n_bins' parameter of fit_method must be an int >= 1"):
        fit_method("histogram", z, y, n_bins=0)


@pytest.mark.parametrize("method", METHODS)
def test_to_dict_round_trip_through_json(method: str) -> None:
    z, y = sample(60, 2, 3)
    fit = fit_method(method, z, y)
    back = FittedMethod.from_dict(json.loads(json.dumps(fit.to_dict())))
    assert back.name == method and dict(back.options) == dict(fit.options)
    np.testing.assert_array_equal(back.probabilities(z), fit.probabilities(z))
    batched = fit_method(method, z, y, np.ones((2, 60)))
    with pytest.raises(DataError, match=r"holds R = 2\. Take one with \.select"):
        batched.to_dict()
    np.testing.assert_array_equal(batched.select(1).probabilities(z)[0], batched.probabilities(z)[1])
    with pytest.raises(DataError, match=r"expects format 'sitecal\.fitted_method' version 1"):
        FittedMethod.from_dict({**fit.to_dict(), "version": 99})


def test_group_methods_small_group_policy_and_round_trip() -> None:
    z, y = sample(300, 3, 4)
    groups = np.where(np.arange(300) < 250, "A", "B")
    fits = fit_group_methods("dirichlet", z, y, groups, min_group_size=100)
    assert fits.groups["A"].source == "own" and fits.groups["A"].n == 250
    assert fits.groups["B"].source == "global_fallback" and fits.groups["B"].fit is None
    new = np.array(["A", "B", "C"])  # C unseen: global fit
    p = fits.probabilities(z[:3], new)
    np.testing.assert_allclose(p[0, 0], fit_method("dirichlet", z[:250], y[:250]).probabilities(z[:1])[0, 0])
    np.testing.assert_allclose(p[0, 1:], fit_method("dirichlet", z, y).probabilities(z[1:3])[0])
    back = GroupMethods.from_dict(json.loads(json.dumps(fits.to_dict())))
    np.testing.assert_array_equal(back.probabilities(z[:3], new), p)
    w = np.random.default_rng(5).integers(0, 3, (4, 300))
    boot = fit_group_methods("histogram", z, y, groups, min_group_size=100, weights=w, n_bins=10)
    assert boot.probabilities(z[:5], groups[:5]).shape == (4, 5, 3)
    rows = np.repeat(np.arange(250), w[2, :250])
    own = fit_method("histogram", z[rows], y[rows], n_bins=10).probabilities(z[:5])[0]
    np.testing.assert_allclose(boot.probabilities(z[:5], groups[:5])[2], own, atol=1e-12)
