from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from sitecal.errors import DataError
from sitecal.metrics import expected_calibration_error, metric_statistic, softmax
from sitecal.stats import BootstrapResult, bootstrap_interval


def weighted_mean(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """A plain-callable statistic: row b of weights is resample b."""
    return (weights * x).sum(axis=1) / weights.sum(axis=1)


class Mean:
    """The same statistic through the sufficient-statistic fast path."""

    def row_terms(self, x: np.ndarray) -> np.ndarray:
        return np.stack([np.ones_like(x), x], axis=1)

    def from_sums(self, sums: np.ndarray) -> np.ndarray:
        return sums[:, 1] / sums[:, 0]


X = np.random.default_rng(0).exponential(size=60)


@pytest.mark.parametrize("method", ["percentile", "bca"])
@pytest.mark.parametrize("statistic", [weighted_mean, Mean()], ids=["callable", "sufficient"])
def test_matches_scipy_within_monte_carlo_error(method: str, statistic: object) -> None:
    ours = bootstrap_interval(statistic, X, method=method, n_resamples=20_000, seed=3)  # type: ignore[arg-type]
    ref = scipy.stats.bootstrap(
        (X,), np.mean, method="BCa" if method == "bca" else "percentile", n_resamples=20_000, rng=1
    )
    # endpoint Monte-Carlo error with B = 20 000 is a few hundredths of a standard error
    tol = 0.1 * ref.standard_error
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=tol)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=tol)
    assert ours.standard_error == pytest.approx(ref.standard_error, rel=0.05)
    assert ours.estimate == pytest.approx(X.mean(), rel=1e-14)
    assert (ours.n, ours.n_clusters, ours.n_strata, ours.method) == (60, 60, 1, method)


def test_callable_and_sufficient_paths_agree_exactly_on_resamples() -> None:
    a = bootstrap_interval(weighted_mean, X, n_resamples=500, seed=9)
    b = bootstrap_interval(Mean(), X, n_resamples=500, seed=9)
    assert a.low == pytest.approx(b.low, rel=1e-12) and a.high == pytest.approx(b.high, rel=1e-12)


def _ece_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    probs = softmax(rng.normal(size=(n, 3)) * 2)
    labels = rng.integers(0, 3, n)
    return probs, labels


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 1000),
    name=st.sampled_from(["ece", "ece_mass", "nll", "mce"]),
    method=st.sampled_from(["percentile", "bca"]),
)
def test_identical_for_any_chunk_size(seed: int, name: str, method: str) -> None:
    probs, labels = _ece_data(90, seed)
    clusters = np.arange(90) // 3
    kwargs = dict(clusters=clusters, n_resamples=300, seed=seed, method=method)
    small = bootstrap_interval(metric_statistic(name), (probs, labels), chunk_size=7, **kwargs)  # type: ignore[arg-type]
    large = bootstrap_interval(metric_statistic(name), (probs, labels), chunk_size=1000, **kwargs)  # type: ignore[arg-type]
    one = bootstrap_interval(metric_statistic(name), (probs, labels), chunk_size=1, **kwargs)  # type: ignore[arg-type]
    assert small == large == one  # every float bit-identical


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 1000), n=st.integers(2, 50))
def test_each_row_its_own_cluster_equals_row_bootstrap(seed: int, n: int) -> None:
    x = np.random.default_rng(seed).normal(size=n)
    rows = bootstrap_interval(Mean(), x, n_resamples=200, seed=seed, method="bca")
    ids = np.array([f"patient-{i:04d}" for i in range(n)])
    clustered = bootstrap_interval(Mean(), x, clusters=ids, n_resamples=200, seed=seed, method="bca")
    assert rows == clustered


def test_cluster_bootstrap_is_wider_for_correlated_studies() -> None:
    # 40 patients with 5 near-identical studies each: the row bootstrap pretends N = 200
    rng = np.random.default_rng(5)
    patient_value = rng.normal(size=40)
    x = np.repeat(patient_value, 5) + 0.01 * rng.normal(size=200)
    clusters = np.repeat(np.arange(40), 5)
    rows = bootstrap_interval(Mean(), x, n_resamples=2000)
    by_patient = bootstrap_interval(Mean(), x, clusters=clusters, n_resamples=2000)
    assert by_patient.n_clusters == 40 and by_patient.n == 200
    assert by_patient.standard_error > 1.8 * rows.standard_error  # about sqrt(5)


def test_metric_estimate_equals_metric() -> None:
    probs, labels = _ece_data(300, 1)
    res = bootstrap_interval(metric_statistic("ece"), (probs, labels), n_resamples=100)
    assert res.estimate == pytest.approx(expected_calibration_error(probs, labels), abs=1e-14)
    assert res.low <= res.estimate + res.bias + 3 * res.standard_error


def test_single_cluster_is_degenerate_not_an_error() -> None:
    for method in ("percentile", "bca"):
        res = bootstrap_interval(Mean(), X, clusters=np.zeros(60), method=method, n_resamples=50)  # type: ignore[arg-type]
        assert res.low == res.high == pytest.approx(X.mean())
        assert res.standard_error == 0.0 and res.n_clusters == 1
        assert "one cluster" in res.note and res.reason == "replicates_equal_one_cluster"


def test_constant_data_is_degenerate() -> None:
    res = bootstrap_interval(Mean(), np.ones(10), method="bca", n_resamples=50)
    assert res.low == res.high == 1.0 and "no variation" in res.note
    assert res.reason == "replicates_equal_no_variation"  # the code a document stores


def test_nan_replicates_give_nan_interval() -> None:
    def sometimes_nan(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
        out = weighted_mean(x, weights)
        return np.where(weights[:, 0] > 1, np.nan, out)

    res = bootstrap_interval(sometimes_nan, X, n_resamples=200)
    assert np.isnan(res.low) and np.isnan(res.high) and "not finite" in res.note
    assert res.reason == "replicates_not_finite"
    d = res.to_dict()
    assert d["low"] is None and d["estimate"] == pytest.approx(X.mean())


def test_result_is_frozen_and_json_safe() -> None:
    res = bootstrap_interval(Mean(), X, n_resamples=100, seed=4)
    assert isinstance(res, BootstrapResult) and res.seed == 4
    with pytest.raises(AttributeError):
        res.low = 0.0  # type: ignore[misc]
    assert set(res.to_dict()) >= {"estimate", "low", "high", "n", "n_clusters", "seed", "standard_error"}


def test_errors() -> None:
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'method' parameter of bootstrap_interval must be one of 'percentile', 'bca'. "
            "Got 'bcaa'. Did you mean 'bca'?"
        ),
    ):
        bootstrap_interval(Mean(), X, method="bcaa")  # type: ignore[arg-type]
    with pytest.raises(
        DataError,
        match=re.escape("The 'level' parameter of bootstrap_interval must be a float in (0, 1). Got 95."),
    ):
        bootstrap_interval(Mean(), X, level=95)
    with pytest.raises(
        DataError, match=re.escape("The 'clusters' parameter of bootstrap_interval must have shape (60,)")
    ):
        bootstrap_interval(Mean(), X, clusters=np.arange(59))
    with pytest.raises(
        DataError,
        match=re.escape(
            "must hold arrays of equal length (paired rows). data[0] has 60 rows, data[1] has 3."
        ),
    ):
        bootstrap_interval(weighted_mean, (X, X[:3]))
    with pytest.raises(DataError, match=re.escape("must return an array of shape (B,)")):
        bootstrap_interval(lambda x, weights: weights, X, n_resamples=10)
    with pytest.raises(DataError, match="must be a callable statistic"):
        bootstrap_interval(3, X)  # type: ignore[arg-type]
    assert bootstrap_interval(Mean(), X, method="BCa", n_resamples=20).method == "bca"
