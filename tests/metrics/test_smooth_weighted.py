"""The weighted smooth ECE (many resamples at once) against the exact function on the repeated rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sitecal.metrics import SmoothECEStatistic, metric_statistic, smooth_ece
from sitecal.stats import bootstrap_interval

# measured gap to the exact function: below 4e-7 on these sources (smooth ECE 0.02 to 0.36); the bound
# tested leaves room for the binning error, which grows as the smooth ECE nears the grid step (5e-4)
TOLERANCE = 1e-5


def _three_class(n: int, shrink: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence c = 1/3 + (2/3) Beta(5, 2), correct with probability 1/3 + shrink (c - 1/3)."""
    rng = np.random.default_rng(seed)
    c = 1 / 3 + (2 / 3) * rng.beta(5, 2, n)
    correct = rng.random(n) < 1 / 3 + shrink * (c - 1 / 3)
    predicted = rng.integers(0, 3, n)
    labels = np.where(correct, predicted, (predicted + rng.integers(1, 3, n)) % 3)
    probs = np.repeat(((1 - c) / 2)[:, None], 3, axis=1)
    probs[np.arange(n), predicted] = c
    return probs, labels


def _exact_on_repeated_rows(probs: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    # integer weights are repeated rows: the exact function on the resampled data is the reference
    counts = weights.astype(int)
    return np.array([smooth_ece(np.repeat(probs, w, axis=0), np.repeat(labels, w)) for w in counts])


@pytest.mark.parametrize(
    ("n", "shrink", "seed"),
    [
        (80, 1.0, 0),  # calibrated: bandwidth below 0.15, the periodic layout
        (60, 0.5, 1),  # over-confident: near 0.17, three images on 8,192 points
        (100, 0.15, 2),  # far over-confident: near 0.46, three images on 18,432 points
    ],
)
def test_weighted_smooth_ece_is_the_exact_one_on_the_repeated_rows(n: int, shrink: float, seed: int) -> None:
    probs, labels = _three_class(n, shrink, seed)
    weights = np.random.default_rng(seed).multinomial(n, np.ones(n) / n, size=1).astype(float)
    values = metric_statistic("smooth_ece")(probs, labels, weights=weights)
    assert values == pytest.approx(_exact_on_repeated_rows(probs, labels, weights), abs=TOLERANCE, rel=0)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 40), shrink=st.floats(0.0, 1.0))
def test_weighted_smooth_ece_on_small_samples(seed: int, n: int, shrink: float) -> None:
    probs, labels = _three_class(n, shrink, seed)
    weights = np.random.default_rng(seed).multinomial(n, np.ones(n) / n, size=2).astype(float)
    values = metric_statistic("smooth_ece")(probs, labels, weights=weights)
    assert values == pytest.approx(_exact_on_repeated_rows(probs, labels, weights), abs=TOLERANCE, rel=0)


def test_residuals_of_one_sign_give_their_mean() -> None:
    # every prediction over-confident: nothing cancels, so the smoothed mass is the mean residual,
    # (40 (0.9 - 0.75) + 60 (0.7 - 0.5)) / 100 = 0.18, up to the mass the three-image kernel lets out
    probs = np.array([[0.9, 0.1]] * 40 + [[0.7, 0.3]] * 60)
    labels = np.array([0] * 30 + [1] * 10 + [0] * 30 + [1] * 30)
    value = metric_statistic("smooth_ece")(probs, labels, weights=np.ones((1, 100)))[0]
    assert value == pytest.approx(0.18, abs=1e-4)
    assert value == pytest.approx(smooth_ece(probs, labels), abs=1e-7)


def test_resamples_are_reduced_each_on_its_own() -> None:
    # the replicates must not depend on which resamples share a chunk (the engine's bit-for-bit promise)
    probs, labels = _three_class(150, 0.4, 3)
    weights = np.random.default_rng(3).multinomial(150, np.ones(150) / 150, size=9).astype(float)
    stat = SmoothECEStatistic("smooth_ece")
    prepared = stat.prepare(probs, labels)
    together = stat.evaluate(prepared, weights)
    apart = np.concatenate([stat.evaluate(prepared, weights[i : i + 1]) for i in range(9)])
    reordered = stat.evaluate(prepared, weights[::-1])[::-1]
    assert np.array_equal(together, apart) and np.array_equal(together, reordered)


def test_per_resample_probabilities_and_degenerate_weights() -> None:
    probs, labels = _three_class(80, 0.7, 4)
    weights = np.random.default_rng(4).multinomial(80, np.ones(80) / 80, size=3).astype(float)
    weights[2] = 0.0  # no row drawn: undefined
    stat = SmoothECEStatistic("smooth_ece")
    shared = stat(probs, labels, weights=weights)
    each = stat.evaluate_each(np.broadcast_to(probs, (3, *probs.shape)).copy(), labels, weights)
    assert np.isnan(shared[2]) and np.isnan(each[2])
    assert each[:2] == pytest.approx(shared[:2], abs=1e-13, rel=0)
    # confident and right everywhere: no residual, so 0 at every bandwidth
    certain = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert stat(certain, [0, 1], weights=np.ones((1, 2))).tolist() == [0.0]


def test_through_the_bootstrap_engine() -> None:
    probs, labels = _three_class(120, 0.8, 5)
    patients = np.arange(120) // 2
    res = bootstrap_interval(
        metric_statistic("smooth_ece"),
        (probs, labels),
        clusters=patients,
        n_resamples=60,
        method="bca",
        seed=1,
        workers=1,
    )
    assert res.estimate == pytest.approx(smooth_ece(probs, labels), abs=TOLERANCE)
    assert res.low < res.high and res.n_clusters == 60
