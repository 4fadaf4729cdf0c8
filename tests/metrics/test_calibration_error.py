from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from netcal.metrics import ECE
from torchmetrics.functional.classification import multiclass_calibration_error

from sitecal.errors import DataError
from sitecal.metrics import (
    ReliabilityCurve,
    expected_calibration_error,
    maximum_calibration_error,
    reliability_curve,
    softmax,
)

# Six samples, three classes, worked by hand with n_bins=5 (edges 0, .2, .4, .6, .8, 1):
#   row  top conf  pred  label  correct  bin
#   1    0.90      0     0      1        (0.8, 1]
#   2    0.85      0     1      0        (0.8, 1]
#   3    0.70      1     1      1        (0.6, 0.8]
#   4    0.65      1     0      0        (0.6, 0.8]
#   5    0.50      0     0      1        (0.4, 0.6]
#   6    0.40      2     0      0        (0.2, 0.4]   (0.4 sits on an edge: left bin)
# |sum correct - sum conf| per bin: |1 - 1.75| = .75, |1 - 1.35| = .35, |1 - .5| = .5, |0 - .4| = .4
# ECE = (.75 + .35 + .5 + .4) / 6 = 1/3; MCE = max(.375, .175, .5, .4) = 0.5.
HAND_PROBS = np.array(
    [
        [0.90, 0.05, 0.05],
        [0.85, 0.10, 0.05],
        [0.10, 0.70, 0.20],
        [0.30, 0.65, 0.05],
        [0.50, 0.30, 0.20],
        [0.25, 0.35, 0.40],
    ]
)
HAND_LABELS = np.array([0, 1, 1, 0, 0, 0])


def test_hand_computed_ece_and_mce() -> None:
    assert expected_calibration_error(HAND_PROBS, HAND_LABELS, n_bins=5) == pytest.approx(1 / 3, abs=1e-12)
    assert maximum_calibration_error(HAND_PROBS, HAND_LABELS, n_bins=5) == pytest.approx(0.5, abs=1e-12)


def test_hand_computed_reliability_curve_keeps_empty_bins() -> None:
    curve = reliability_curve(HAND_PROBS, HAND_LABELS, n_bins=5)
    assert curve.count.tolist() == [0, 1, 1, 2, 2]
    assert np.isnan(curve.confidence[0]) and np.isnan(curve.accuracy[0])
    assert np.allclose(curve.confidence[1:], [0.4, 0.5, 0.675, 0.875])
    assert np.allclose(curve.accuracy[1:], [0.0, 1.0, 0.5, 0.5])
    assert curve.expected_calibration_error == pytest.approx(1 / 3, abs=1e-12)
    d = json.loads(json.dumps(curve.to_dict()))
    assert d["confidence"][0] is None and d["count"] == [0, 1, 1, 2, 2]
    back = ReliabilityCurve.from_dict(d)
    assert back.to_dict() == curve.to_dict()
    with pytest.raises(ValueError):
        curve.count[0] = 3  # read-only


def test_hand_computed_classwise() -> None:
    # Two classes, n_bins=2 (edges 0, .5, 1). Class 0 column: 0.8 (y=0), 0.3 (y=1) -> bins (.5,1] and
    # (0,.5]: |1 - .8| + |0 - .3| = .5; class 1 column: .2 (y=0), .7 (y=1): |0 - .2| + |1 - .7| = .5.
    # Class-wise ECE = mean(.5 / 2, .5 / 2) = 0.25.
    probs = np.array([[0.8, 0.2], [0.3, 0.7]])
    assert expected_calibration_error(probs, [0, 1], n_bins=2, kind="classwise") == pytest.approx(0.25)


def test_hand_computed_mass_bins() -> None:
    # Four confidences .6, .7, .8, .9 (correct: 0, 1, 1, 1), 2 equal-mass bins: inner edge is the
    # 2nd smallest, .7, so bins {.6, .7} and {.8, .9}: (|1 - 1.3| + |2 - 1.7|) / 4 = 0.15.
    top = np.array([0.6, 0.7, 0.8, 0.9])
    probs = np.stack([top, 1 - top], axis=1)
    labels = np.array([1, 0, 0, 0])
    assert expected_calibration_error(probs, labels, n_bins=2, binning="mass") == pytest.approx(0.15)


def _reference_case(n: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    logits = 2.5 * rng.normal(size=(n, c))
    logits[np.arange(n), labels] += 1.5
    probs = softmax(logits)
    conf = probs.max(axis=1)
    # keep every confidence off the 15 edges, where the (lo, hi] and [lo, hi) conventions differ
    off_edge = np.abs(conf * 15 - np.round(conf * 15)) > 1e-6
    return probs[off_edge], labels[off_edge]


@pytest.mark.parametrize(("c", "seed"), [(3, 0), (5, 1), (10, 2)])
def test_equals_netcal_ece(c: int, seed: int) -> None:
    probs, labels = _reference_case(2000, c, seed)
    ref = ECE(bins=15).measure(probs, labels)
    assert expected_calibration_error(probs, labels) == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize(("c", "seed"), [(2, 3), (4, 4), (10, 5)])
def test_equals_torchmetrics_ece(c: int, seed: int) -> None:
    probs, labels = _reference_case(2000, c, seed)
    ref = multiclass_calibration_error(
        torch.tensor(probs, dtype=torch.float32), torch.tensor(labels), num_classes=c, n_bins=15, norm="l1"
    )
    assert expected_calibration_error(probs, labels) == pytest.approx(float(ref), abs=1e-4)


def test_equals_torchmetrics_mce() -> None:
    probs, labels = _reference_case(2000, 4, 6)
    ref = multiclass_calibration_error(
        torch.tensor(probs, dtype=torch.float32), torch.tensor(labels), num_classes=4, n_bins=15, norm="max"
    )
    assert maximum_calibration_error(probs, labels) == pytest.approx(float(ref), abs=1e-4)


def test_curve_matches_function_for_mass_bins() -> None:
    probs, labels = _reference_case(500, 4, 7)
    curve = reliability_curve(probs, labels, binning="mass")
    assert curve.count.sum() == len(labels)
    ece = expected_calibration_error(probs, labels, binning="mass")
    assert curve.expected_calibration_error == pytest.approx(ece, abs=1e-12)


prob_matrices = st.integers(2, 5).flatmap(
    lambda c: st.lists(st.lists(st.floats(0.01, 10.0), min_size=c, max_size=c), min_size=1, max_size=40).map(
        lambda rows: np.array(rows) / np.array(rows).sum(axis=1, keepdims=True)
    )
)


@settings(max_examples=40, deadline=None)
@given(
    probs=prob_matrices,
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(["top-label", "classwise"]),
    binning=st.sampled_from(["width", "mass"]),
    n_bins=st.integers(1, 20),
)
def test_ece_in_unit_interval_and_order_invariant(
    probs: np.ndarray, seed: int, kind: str, binning: str, n_bins: int
) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, probs.shape[1], probs.shape[0])
    ece = expected_calibration_error(probs, labels, n_bins=n_bins, binning=binning, kind=kind)  # type: ignore[arg-type]
    assert 0.0 <= ece <= 1.0
    perm = rng.permutation(probs.shape[0])
    shuffled = expected_calibration_error(
        probs[perm],
        labels[perm],
        n_bins=n_bins,
        binning=binning,
        kind=kind,  # type: ignore[arg-type]
    )
    assert shuffled == pytest.approx(ece, abs=1e-12)
    mce = maximum_calibration_error(probs, labels, n_bins=n_bins, binning=binning)  # type: ignore[arg-type]
    assert 0.0 <= mce <= 1.0


@pytest.mark.parametrize("binning", ["width", "mass"])
def test_ece_shrinks_with_n_for_a_calibrated_source(binning: str) -> None:
    # labels drawn from the predicted probabilities: the true ECE is 0, the binned estimate's upward
    # bias falls roughly like sqrt(n_bins / N)
    rng = np.random.default_rng(11)

    def mean_ece(n: int) -> float:
        values = []
        for _ in range(5):
            probs = softmax(rng.normal(size=(n, 4)) * 2)
            labels = (rng.random(n)[:, None] > probs.cumsum(axis=1)).sum(axis=1)
            values.append(expected_calibration_error(probs, labels, binning=binning))  # type: ignore[arg-type]
        return float(np.mean(values))

    small, medium, large = mean_ece(100), mean_ece(2_000), mean_ece(40_000)
    assert small > medium > large
    assert large < 0.02


def test_error_messages() -> None:
    with pytest.raises(
        DataError,
        match=re.escape("The 'n_bins' parameter of expected_calibration_error must be an int >= 1. Got 0."),
    ):
        expected_calibration_error(HAND_PROBS, HAND_LABELS, n_bins=0)
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'binning' parameter of expected_calibration_error must be one of 'width', 'mass'. "
            "Got 'mas'. Did you mean 'mass'?"
        ),
    ):
        expected_calibration_error(HAND_PROBS, HAND_LABELS, binning="mas")  # type: ignore[arg-type]
    with pytest.raises(DataError, match=re.escape("Did you mean 'top-label'?")):
        expected_calibration_error(HAND_PROBS, HAND_LABELS, kind="toplabel")  # type: ignore[arg-type]
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'probs' parameter of expected_calibration_error must have rows that sum to 1 "
            "(within 1e-06). "
            "Row 0 sums to 1.1"
        ),
    ):
        expected_calibration_error([[0.6, 0.5], [0.5, 0.5]], [0, 1])
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'labels' parameter of maximum_calibration_error must hold class indices in [0, 3). "
            "Got 3 at index 1."
        ),
    ):
        maximum_calibration_error(HAND_PROBS[:2], [0, 3])
    with pytest.raises(
        DataError, match=re.escape("The 'labels' parameter of reliability_curve must have shape (6,)")
    ):
        reliability_curve(HAND_PROBS, HAND_LABELS[:5])
    with pytest.raises(DataError, match=re.escape("with N >= 1 and C >= 2. Got shape (3,)")):
        expected_calibration_error([0.2, 0.3, 0.5], [0, 1, 2])
    with pytest.raises(DataError, match=re.escape("must be finite. Got nan at index (0, 1)")):
        expected_calibration_error([[0.5, np.nan]], [0])
    with pytest.raises(DataError, match=re.escape("must be an int >= 1. Got True.")):
        expected_calibration_error(HAND_PROBS, HAND_LABELS, n_bins=True)
