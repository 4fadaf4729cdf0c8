"""Top-label slope, intercept and O/E: statsmodels GLM, hand computations, degenerate input, weights."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import statsmodels.api as sm

from sitecal.errors import DataError
from sitecal.metrics import (
    RecalibrationStatistic,
    TopLabelOEStatistic,
    calibration_slope_intercept,
    metric_statistic,
    softmax,
    top_label_recalibration,
)
from sitecal.metrics._recalibration import ALL_CORRECT, NO_CORRECT, NO_LOG, SEPARATED
from sitecal.stats import bootstrap_interval


def _cohort(seed: int = 0, n: int = 400) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over-confident three-class predictions, two or three studies per patient."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, 3)) * 2.5
    truth = softmax(logits, temperature=1.8)
    labels = (truth.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    patients = np.array([f"P{i // 3:03d}" if i < n // 2 else f"Q{i // 2:03d}" for i in range(n)])
    return softmax(logits), labels, patients


def _top_label(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    predicted = probs.argmax(axis=1)
    confidence = probs[np.arange(len(labels)), predicted]
    return confidence, (predicted == labels).astype(float)


def _two_class(confidences: list[float], correct: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Two-class rows whose top-label confidence and correctness are as given (class 0 predicted)."""
    c = np.array(confidences)
    return np.stack([c, 1 - c], axis=1), np.where(np.array(correct) == 1, 0, 1)


def test_slope_intercept_and_cluster_errors_match_statsmodels_glm() -> None:
    probs, labels, patients = _cohort()
    confidence, correct = _top_label(probs, labels)
    z = np.log(confidence / (1 - confidence))
    groups = np.unique(patients, return_inverse=True)[1]
    res = top_label_recalibration(probs, labels, clusters=patients)

    binomial = sm.families.Binomial()
    two = sm.GLM(correct, sm.add_constant(z), family=binomial).fit(
        cov_type="cluster", cov_kwds={"groups": groups}
    )
    offset = sm.GLM(correct, np.ones((len(z), 1)), family=binomial, offset=z).fit(
        cov_type="cluster", cov_kwds={"groups": groups}
    )
    assert res.slope == pytest.approx(two.params[1], rel=1e-8)
    assert res.intercept == pytest.approx(offset.params[0], rel=1e-8, abs=1e-10)
    assert res.slope_se == pytest.approx(two.bse[1], rel=1e-6)
    assert res.intercept_se == pytest.approx(offset.bse[0], rel=1e-6)
    # and the existing clinical function, event="top-label", agrees on the estimates
    clinical = calibration_slope_intercept(probs, labels, event="top-label")
    assert res.slope == pytest.approx(clinical.slope, rel=1e-10)
    assert res.intercept == pytest.approx(clinical.intercept, rel=1e-10)
    # O/E is accuracy / mean confidence
    assert res.oe_ratio == pytest.approx(correct.mean() / confidence.mean(), rel=1e-12)
    assert (
        res.slope is not None and res.slope < 1.0 and res.oe_ratio < 1.0
    )  # the cohort is over-confident by construction


def test_intercept_with_one_confidence_level_is_a_difference_of_logits() -> None:
    # all confidences 0.8, 6 of 10 correct: the offset model's MLE solves expit(alpha + logit 0.8) = 0.6,
    # so alpha = logit(0.6) - logit(0.8) = 0.405465 - 1.386294 = -0.980829; O/E = 0.6 / 0.8 = 0.75
    probs, labels = _two_class([0.8] * 10, [1] * 6 + [0] * 4)
    res = top_label_recalibration(probs, labels)
    assert res.intercept == pytest.approx(math.log(0.6 / 0.4) - math.log(0.8 / 0.2), abs=1e-9)
    assert res.intercept == pytest.approx(-0.980829, abs=1e-6)
    assert res.oe_ratio == pytest.approx(0.75)
    assert res.slope is None and res.slope_se is None and res.slope_note == SEPARATED


def test_slope_with_two_confidence_levels_is_the_saturated_fit() -> None:
    # confidence 0.6 with 5 of 10 correct, 0.9 with 8 of 10: the two-parameter model is saturated, so
    # b = (logit 0.8 - logit 0.5) / (logit 0.9 - logit 0.6) = 1.386294 / 1.791759 = 0.773706
    probs, labels = _two_class([0.6] * 10 + [0.9] * 10, [1] * 5 + [0] * 5 + [1] * 8 + [0] * 2)
    res = top_label_recalibration(probs, labels)
    assert res.slope == pytest.approx(0.773706, abs=1e-6)
    assert res.slope_note == "" and res.intercept_note == ""


def test_log_oe_standard_error_by_hand() -> None:
    # clusters a, a, b, c; correct 1, 0, 1, 1; confidence 0.9, 0.6, 0.8, 0.7: O = 3, E = 3.0,
    # per cluster d = Y/O - C/E = (1/3 - 1.5/3, 1/3 - 0.8/3, 1/3 - 0.7/3) = (-1/6, 1/15, 1/10);
    # var = 3/2 * (1/36 + 1/225 + 1/100) = 0.0633333, SE = 0.251661
    probs, labels = _two_class([0.9, 0.6, 0.8, 0.7], [1, 0, 1, 1])
    res = top_label_recalibration(probs, labels, clusters=["a", "a", "b", "c"])
    assert res.log_oe_se == pytest.approx(math.sqrt(1.5 * (1 / 36 + 1 / 225 + 1 / 100)), rel=1e-12)
    assert res.log_oe_se == pytest.approx(0.251661, abs=1e-6)
    assert res.n_clusters == 3 and res.n_correct == 3


@pytest.mark.parametrize(
    ("correct", "note"),
    [([1, 1, 1, 1], ALL_CORRECT), ([0, 0, 0, 0], NO_CORRECT), ([1], ALL_CORRECT), ([0], NO_CORRECT)],
)
def test_degenerate_input_gives_none_with_a_reason_never_nan(correct: list[int], note: str) -> None:
    probs, labels = _two_class([0.9, 0.7, 0.6, 0.8][: len(correct)], correct)
    res = top_label_recalibration(probs, labels)
    assert res.slope is None and res.intercept is None
    assert res.slope_note == note and res.intercept_note == note
    json.dumps(res.to_dict(), allow_nan=False)  # raises on NaN or infinity
    if sum(correct) == 0:
        assert res.oe_ratio == 0.0 and res.log_oe_se is None and res.oe_note == NO_LOG


def test_perfect_separation_leaves_the_intercept_defined() -> None:
    probs, labels = _two_class([0.95, 0.9, 0.6, 0.55], [1, 1, 0, 0])
    res = top_label_recalibration(probs, labels)
    assert res.slope is None and res.slope_note == SEPARATED
    assert res.intercept is not None and res.intercept_note == ""


def test_weighted_statistic_equals_the_fit_on_the_resampled_rows() -> None:
    probs, labels, _ = _cohort(seed=1, n=150)
    rng = np.random.default_rng(3)
    weights = rng.multinomial(150, np.full(150, 1 / 150), size=40).astype(float)
    for name in ("slope", "intercept"):
        values = RecalibrationStatistic(name)(probs, labels, weights=weights)
        for b in (0, 17, 39):
            rows = np.repeat(np.arange(150), weights[b].astype(int))
            ref = calibration_slope_intercept(probs[rows], labels[rows], event="top-label")
            assert values[b] == pytest.approx(getattr(ref, name), rel=1e-8, abs=1e-10)
        # each resample's value does not depend on the chunk it is evaluated in
        pieces = [
            RecalibrationStatistic(name)(probs, labels, weights=weights[i : i + 7]) for i in range(0, 40, 7)
        ]
        assert np.array_equal(values, np.concatenate(pieces))


def test_weighted_statistic_is_nan_where_the_resample_is_degenerate() -> None:
    probs, labels = _two_class([0.9, 0.8, 0.7, 0.6, 0.65], [1, 0, 1, 0, 1])
    weights = np.array([[1, 0, 1, 0, 1], [1, 1, 1, 1, 1], [2, 1, 0, 0, 0]], dtype=float)
    slope = RecalibrationStatistic("slope")(probs, labels, weights=weights)
    intercept = RecalibrationStatistic("intercept")(probs, labels, weights=weights)
    assert np.isnan(slope[0]) and np.isnan(intercept[0])  # only correct predictions drawn
    assert np.isnan(slope[2]) and np.isfinite(intercept[2])  # 0.9 correct, 0.8 wrong: separated
    assert slope[1] == pytest.approx(top_label_recalibration(probs, labels).slope, rel=1e-8)


def test_bootstrap_interval_accepts_the_recalibration_statistics() -> None:
    probs, labels, patients = _cohort(seed=2, n=300)
    res = bootstrap_interval(
        RecalibrationStatistic("slope"), (probs, labels), clusters=patients, n_resamples=200, seed=5
    )
    point = top_label_recalibration(probs, labels, clusters=patients)
    assert point.slope is not None
    assert res.estimate == pytest.approx(point.slope, rel=1e-8)
    assert res.low < point.slope < res.high
    # the cluster-robust Wald SE and the cluster bootstrap SE estimate the same spread
    assert res.standard_error == pytest.approx(point.slope_se, rel=0.35)


def test_top_label_oe_statistic_uses_the_top_label_event_for_two_classes() -> None:
    probs, labels = _two_class([0.9, 0.6, 0.8, 0.7], [1, 0, 1, 1])
    stat = TopLabelOEStatistic()
    weights = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 1.0, 1.0]])
    values = stat.from_sums(weights @ stat.row_terms(probs, labels))
    # 3 / (0.9 + 0.6 + 0.8 + 0.7) = 1.0; resample 2: 4 / (1.8 + 0.8 + 0.7) = 1.212121
    assert values.tolist() == pytest.approx([1.0, 4 / 3.3])
    positive = metric_statistic("oe_ratio")(probs, labels, weights=weights[:1])[0]
    assert positive == pytest.approx(1 / 1.0)  # 1 positive label / (0.1 + 0.4 + 0.2 + 0.3)
    assert top_label_recalibration(probs, labels).oe_ratio == pytest.approx(values[0])


def test_option_and_shape_errors_name_the_parameter() -> None:
    with pytest.raises(DataError, match="'name' parameter of RecalibrationStatistic"):
        RecalibrationStatistic("slop")  # type: ignore[arg-type]
    probs, labels = _two_class([0.9, 0.6], [1, 0])
    with pytest.raises(
        DataError, match=r"'clusters' parameter of top_label_recalibration must have shape \(2,\)"
    ):
        top_label_recalibration(probs, labels, clusters=["a"])
