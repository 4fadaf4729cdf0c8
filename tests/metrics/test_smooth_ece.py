"""Smooth ECE against relplot, the authors' reference implementation, and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import relplot

from sitecal.metrics import smooth_ece, smooth_ece_at
from sitecal.metrics.registry import metric


def _three_class(n: int, shrink: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Top-label confidence c (above 1/3), correct with probability 1/3 + shrink (c - 1/3)."""
    rng = np.random.default_rng(seed)
    c = 1 / 3 + (2 / 3) * rng.beta(5, 2, n)
    correct = rng.random(n) < 1 / 3 + shrink * (c - 1 / 3)
    predicted = rng.integers(0, 3, n)
    labels = np.where(correct, predicted, (predicted + rng.integers(1, 3, n)) % 3)
    probs = np.repeat(((1 - c) / 2)[:, None], 3, axis=1)
    probs[np.arange(n), predicted] = c
    return probs, labels, c, correct.astype(int)


@pytest.mark.parametrize(
    ("n", "shrink", "seed"), [(300, 1.0, 0), (300, 0.85, 1), (1000, 0.85, 2), (800, 0.6, 3)]
)
def test_smooth_ece_agrees_with_relplot(n: int, shrink: float, seed: int) -> None:
    # relplot rounds the predictions to a grid and stops its bandwidth search at 2^-10: agreement to a
    # few ten-thousandths, not exactly
    probs, labels, c, correct = _three_class(n, shrink, seed)
    value, width = relplot.smECE(c, correct, return_width=True)
    assert smooth_ece_at(probs, labels, float(width)) == pytest.approx(float(value), abs=5e-4)  # same width
    # the fixed point itself: relplot resolves the width to 2^-10 only
    assert smooth_ece(probs, labels) == pytest.approx(float(value), abs=1e-3)
    for sigma in (0.02, 0.05, 0.1):
        reference = float(relplot.smECE_sigma(c, correct, sigma))
        assert smooth_ece_at(probs, labels, sigma) == pytest.approx(reference, abs=5e-4)


def test_smooth_ece_is_the_residual_mass_when_every_residual_has_one_sign() -> None:
    # every prediction over-confident: no cancellation, so the smoothed residual mass is the mean residual
    # at any bandwidth (the reflected kernel keeps all mass in [0, 1])
    probs = np.array([[0.9, 0.1]] * 40 + [[0.7, 0.3]] * 60)
    labels = np.array([0] * 30 + [1] * 10 + [0] * 30 + [1] * 30)  # 75 % and 50 % correct
    mean_residual = (40 * (0.9 - 0.75) + 60 * (0.7 - 0.5)) / 100
    assert smooth_ece_at(probs, labels, 0.05) == pytest.approx(mean_residual, abs=1e-4)
    assert smooth_ece(probs, labels) == pytest.approx(mean_residual, abs=1e-4)


def test_smooth_ece_is_its_own_bandwidth_and_in_the_registry() -> None:
    probs, labels, _, _ = _three_class(400, 0.8, 7)
    value = smooth_ece(probs, labels)
    assert smooth_ece_at(probs, labels, value) == pytest.approx(value, abs=1e-6)  # the fixed point
    assert metric("smooth_ece")(probs, labels) == value
    with pytest.raises(ValueError, match="must be a number > 0"):
        smooth_ece_at(probs, labels, math.nan)
