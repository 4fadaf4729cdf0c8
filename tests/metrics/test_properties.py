"""Invariants over every metric of the registry (sitecal.metrics.registry): range, sample order, calibrated
sources, argmax."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sitecal.metrics import (
    METRIC_NAMES,
    accuracy,
    auroc,
    debiased_expected_calibration_error,
    expected_calibration_error,
    metric_statistic,
    softmax,
)
from sitecal.metrics.registry import METRICS, metric

ALL = [m.name for m in METRICS]
# Estimators of a calibration error that go to 0 for a (top-label) calibrated source as N grows: not the
# MCE (the worst bin does not shrink with N) nor the class-wise ECE (not implied by top-label calibration)
VANISH_WHEN_CALIBRATED = ("ece", "ece_mass", "ece_debiased", "ece_debiased_mass")


def test_the_special_cases_name_registry_metrics() -> None:
    assert set(VANISH_WHEN_CALIBRATED) <= set(ALL)
    assert set(METRIC_NAMES) <= set(ALL)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-9, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(2, 80),
    c=st.integers(2, 4),
    coarse=st.booleans(),
    name=st.sampled_from(ALL),
)
def test_range_and_sample_order(seed: int, n: int, c: int, coarse: bool, name: str) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.integers(-2, 3, size=(n, c)).astype(float) if coarse else 2 * rng.normal(size=(n, c))
    probs, labels = softmax(logits), rng.integers(0, c, n)
    m = metric(name)
    if m.needs_every_class:
        assume(n >= c)  # room for every class (hypothesis found n = 2, c = 3)
        labels[:c] = np.arange(c)  # every class present, so AUROC is defined
    value = m(probs, labels)
    low, high = m.bounds
    if math.isfinite(low) and math.isfinite(high):
        assert low <= value <= high  # a bounded metric is always defined
    else:  # a ratio or a logistic fit may be undefined (NaN), never out of range
        assert math.isnan(value) or low <= value <= high
    perm = rng.permutation(n)
    assert _same(m(probs[perm], labels[perm]), value)


def _calibrated(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw a top-label confidence, then make the prediction correct with exactly that probability."""
    c = 1 / 3 + (2 / 3) * rng.beta(5.0, 2.0, n)
    predicted = rng.integers(0, 3, n)
    probs = np.repeat(((1 - c) / 2)[:, None], 3, axis=1)
    probs[np.arange(n), predicted] = c
    correct = rng.random(n) < c
    labels = np.where(correct, predicted, (predicted + rng.integers(1, 3, n)) % 3)
    return probs, labels


@pytest.mark.parametrize("name", VANISH_WHEN_CALIBRATED)
def test_calibrated_source_gives_ece_to_zero(name: str) -> None:
    # top-label calibrated by construction (class-wise calibration does not follow from it)
    rng = np.random.default_rng(3)
    func = metric(name)
    means = {n: float(np.mean([func(*_calibrated(n, rng)) for _ in range(8)])) for n in (200, 2_000, 20_000)}
    assert means[200] > means[2_000] > means[20_000] or means[20_000] < 0.005
    assert means[20_000] < 0.015
    if "debiased" in name:
        assert means[2_000] < 0.02  # near 0 already at moderate N
    else:
        assert means[200] > 0.03  # the plug-in's upward bias at small N


def test_debiased_removes_most_of_the_plug_in_bias() -> None:
    rng = np.random.default_rng(8)
    plug, debiased = [], []
    for _ in range(20):
        probs, labels = _calibrated(500, rng)
        plug.append(expected_calibration_error(probs, labels))
        debiased.append(debiased_expected_calibration_error(probs, labels))
    assert np.mean(debiased) < 0.5 * np.mean(plug)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 50), c=st.integers(2, 4), t=st.floats(0.2, 5.0))
def test_temperature_keeps_accuracy_and_auroc_binary(seed: int, n: int, c: int, t: float) -> None:
    # temperature scaling never changes the argmax, so accuracy is unchanged; for two classes the
    # ranking of p_1 is unchanged too (a monotone map of the logit difference), so AUROC is unchanged
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, c)) * 3
    labels = rng.integers(0, c, n)
    before, after = softmax(logits), softmax(logits, temperature=t)
    assert accuracy(before, labels) == accuracy(after, labels)
    if c == 2 and 0 < labels.sum() < n:
        assert auroc(before, labels) == pytest.approx(auroc(after, labels), abs=1e-12)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(2, 60), name=st.sampled_from(METRIC_NAMES))
def test_bootstrap_statistics_are_order_invariant(seed: int, n: int, name: str) -> None:
    rng = np.random.default_rng(seed)
    probs, labels = softmax(rng.normal(size=(n, 3))), rng.integers(0, 3, n)
    weights = rng.multinomial(n, np.ones(n) / n, size=2).astype(float)
    perm = rng.permutation(n)
    stat = metric_statistic(name)
    a = stat(probs, labels, weights=weights)
    b = stat(probs[perm], labels[perm], weights=weights[:, perm])
    assert np.allclose(a, b, atol=1e-12, equal_nan=True)
