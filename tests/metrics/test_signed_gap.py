"""The signed top-label calibration gap (mean confidence minus accuracy) and its sum form."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.metrics import observed_expected_ratio, softmax
from sitecal.metrics.registry import CALIBRATION_GAP, metric_statistic


def test_a_hand_computed_case() -> None:
    # confidences 0.9, 0.6, 0.8, 0.5 (the last a tie: class 0 predicted); right: rows 1, 2 and 4
    probs = [[0.9, 0.1], [0.4, 0.6], [0.8, 0.2], [0.5, 0.5]]
    labels = [0, 1, 1, 0]
    # mean confidence 2.8 / 4 = 0.7, accuracy 3 / 4 = 0.75: under-confident by 0.05
    assert CALIBRATION_GAP(probs, labels) == pytest.approx(-0.05, abs=1e-15)
    weights = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 1.0, 0.0]])
    # second weighting: rows 1, 1, 3: confidences (0.9 + 0.9 + 0.8) / 3, one wrong of three
    expected = [-0.05, 2.6 / 3 - 2 / 3]
    stat = metric_statistic(CALIBRATION_GAP.name, n_bins=4)
    np.testing.assert_allclose(stat(probs, labels, weights=weights), expected, rtol=0, atol=1e-15)


def test_the_sign_says_over_or_under_confident() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, (20_000, 3))
    truth = softmax(logits)
    labels = (rng.uniform(size=(20_000, 1)) > truth.cumsum(axis=1)).sum(axis=1)
    sharp, calibrated, timid = (CALIBRATION_GAP(softmax(logits, temperature=t), labels) for t in (0.6, 1, 2))
    assert sharp > 0.05 and timid < -0.05
    assert abs(calibrated) < 0.015  # about 3 standard errors (0.42 / sqrt(20,000) = 0.003)


def test_it_is_confidence_times_one_minus_the_top_label_oe() -> None:
    # more than two classes: O:E is accuracy over mean confidence, so the gap is conf * (1 - O:E)
    rng = np.random.default_rng(1)
    probs, labels = softmax(rng.normal(0.0, 1.5, (500, 4))), rng.integers(0, 4, 500)
    confidence = probs.max(axis=1).mean()
    oe = observed_expected_ratio(probs, labels)
    assert CALIBRATION_GAP(probs, labels) == pytest.approx(confidence * (1.0 - oe), abs=1e-12)


@pytest.mark.parametrize("n_bins", [1, 15])
def test_the_bins_of_the_sum_form_do_not_change_it(n_bins: int) -> None:
    rng = np.random.default_rng(2)
    probs, labels = softmax(rng.normal(0.0, 2.0, (300, 3))), rng.integers(0, 3, 300)
    stat = metric_statistic(CALIBRATION_GAP.name, n_bins=n_bins)
    value = stat(probs, labels, weights=np.ones((1, 300)))[0]
    by_hand = probs.max(axis=1).mean() - (probs.argmax(axis=1) == labels).mean()
    assert value == pytest.approx(by_hand, abs=1e-12)
