"""Debiased top-label l2 calibration error (Kumar et al. 2019) and its bootstrap fast path."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.metrics import (
    debiased_expected_calibration_error,
    expected_calibration_error,
    metric_statistic,
    softmax,
)
from sitecal.stats import BootstrapSpec, bootstrap_metrics


def _binary(conf: list[float], correct: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Two-class rows whose top-label confidence is ``conf`` (>= .5) and is right iff ``correct``."""
    c = np.array(conf)
    return np.stack([1 - c, c], axis=1), np.array(correct)  # class 1 is the argmax; label 1 = right


# Nine rows, n_bins=4 (edges 0, .25, .5, .75, 1):
#   bin (.75, 1]: conf .9 .9 .8 .8 .9, correct 1 0 0 1 0: n=5, ybar=.4, cbar=.86,
#                 (ybar - cbar)^2 = .2116, ybar(1 - ybar)/(n - 1) = .24/4 = .06 -> .1516
#   bin (.5, .75]: conf .6 .7 .6, correct 1 1 0: n=3, ybar=2/3, cbar=19/30, gap^2 = 1/900,
#                 (2/3)(1/3)/2 = 1/9 -> 1/900 - 1/9 (negative: the gap is smaller than its noise)
#   bin (.25, .5]: the row [.5, .5] with label 1: argmax is class 0 (ties -> lowest), wrong; n=1 -> 0
#   D = (5/9)(.1516) + (3/9)(1/900 - 1/9) + 0 = 0.04755...; value sqrt(D)
HAND_D = 5 / 9 * (0.46**2 - 0.24 / 4) + 3 / 9 * (1 / 900 - 1 / 9)


def _hand_case() -> tuple[np.ndarray, np.ndarray]:
    probs, labels = _binary([0.9, 0.9, 0.8, 0.8, 0.9, 0.6, 0.7, 0.6], [1, 0, 0, 1, 0, 1, 1, 0])
    return np.vstack([probs, [[0.5, 0.5]]]), np.append(labels, 1)


def test_hand_computed() -> None:
    probs, labels = _hand_case()
    assert HAND_D == pytest.approx(0.0475555556, abs=1e-9)
    value = debiased_expected_calibration_error(probs, labels, n_bins=4)
    assert value == pytest.approx(math.sqrt(HAND_D), abs=1e-12)
    # the plug-in l1 ECE of the same bins: (|2 - 4.3| + |2 - 1.9| + |0 - .5|) / 9
    assert expected_calibration_error(probs, labels, n_bins=4) == pytest.approx(2.9 / 9, abs=1e-12)


def test_negative_estimate_clamps_to_zero() -> None:
    # one bin, conf .6 .7 .6 with correct 1 1 0: D = 1/900 - 1/9 < 0 -> reported 0
    probs, labels = _binary([0.6, 0.7, 0.6], [1, 1, 0])
    assert debiased_expected_calibration_error(probs, labels, n_bins=1) == 0.0


def _reference(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    """Direct transcription of unbiased_square_ce / unbiased_l2_ce (calibration.utils, Kumar et al.)."""
    conf, pred = probs.max(axis=1), probs.argmax(axis=1)
    correct = (pred == labels).astype(float)
    edges = np.linspace(0, 1, n_bins + 1)[1:]  # their bins list: upper edges; searchsorted side left
    idx = np.searchsorted(edges, conf)
    total = 0.0
    for b in range(n_bins):
        sel = idx == b
        nb = int(sel.sum())
        if nb < 2:
            continue
        ybar, cbar = correct[sel].mean(), conf[sel].mean()
        total += nb / len(conf) * ((cbar - ybar) ** 2 - ybar * (1 - ybar) / (nb - 1))
    return float(max(total, 0.0) ** 0.5)


@pytest.mark.parametrize(("n", "c", "seed"), [(50, 3, 0), (400, 4, 1), (3000, 10, 2)])
def test_equals_reference_transcription(n: int, c: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    probs = softmax(3 * rng.normal(size=(n, c)))
    labels = rng.integers(0, c, n)
    ours = debiased_expected_calibration_error(probs, labels)
    assert ours == pytest.approx(_reference(probs, labels, 15), abs=1e-12)


def test_mass_binning_uses_the_equal_mass_edges() -> None:
    # 4 confidences .6 .7 .8 .9, correct 0 1 1 1, 2 equal-mass bins {.6, .7}, {.8, .9}:
    # bin 1: ybar=.5, cbar=.65: .0225 - .25/1; bin 2: ybar=1, cbar=.85: .0225 - 0 -> D < 0 -> 0
    # with correct 1 0 0 0 instead: bin 1 ybar .5 (same), bin 2 ybar 0, cbar .85: .7225 -> D > 0
    probs, _ = _binary([0.6, 0.7, 0.8, 0.9], [0, 1, 1, 1])
    assert debiased_expected_calibration_error(probs, [0, 1, 1, 1], n_bins=2, binning="mass") == 0.0
    d = 0.5 * (0.0225 - 0.25) + 0.5 * 0.7225
    value = debiased_expected_calibration_error(probs, [1, 0, 0, 0], n_bins=2, binning="mass")
    assert value == pytest.approx(math.sqrt(d), abs=1e-12)


def test_bootstrap_estimate_equals_the_function() -> None:
    rng = np.random.default_rng(5)
    n, c = 600, 3
    labels = rng.integers(0, c, n)
    logits = 2.0 * rng.normal(size=(n, c))
    logits[np.arange(n), labels] += 1.0
    probs = softmax(logits)
    clusters = rng.integers(0, 200, n)
    res = bootstrap_metrics(
        {"p": probs},
        labels,
        clusters=clusters,
        metrics=("ece_debiased", "oe_ratio", "ece"),
        spec=BootstrapSpec(n_resamples=200),
    )
    direct = debiased_expected_calibration_error(probs, labels)
    interval = res.get("ece_debiased", "p")
    assert interval.estimate == pytest.approx(direct, abs=1e-12)
    assert interval.low <= interval.estimate <= interval.high
    # the weighted form with all weights 1 is the function too
    stat = metric_statistic("ece_debiased")
    assert stat(probs, labels, weights=np.ones((1, n)))[0] == pytest.approx(direct, abs=1e-12)


def test_errors() -> None:
    probs, labels = _hand_case()
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'n_bins' parameter of debiased_expected_calibration_error must be an int >= 1. Got 0."
        ),
    ):
        debiased_expected_calibration_error(probs, labels, n_bins=0)
    with pytest.raises(DataError, match=re.escape("Got 'widht'. Did you mean 'width'?")):
        debiased_expected_calibration_error(probs, labels, binning="widht")  # type: ignore[arg-type]
