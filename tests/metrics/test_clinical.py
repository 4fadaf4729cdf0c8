"""Calibration slope, calibration-in-the-large intercept and observed/expected ratio."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit, logit

from sitecal.errors import DataError
from sitecal.metrics import (
    CalibrationSlopeIntercept,
    calibration_slope_intercept,
    observed_expected_ratio,
    softmax,
)


def _scipy_reference(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Slope and intercept by BFGS on the logistic negative log-likelihood (an independent solver)."""
    z = logit(np.clip(p, 1e-12, 1 - 1e-12))

    def nll(beta: np.ndarray, offset: bool) -> tuple[float, np.ndarray]:
        eta = beta[0] + (z if offset else beta[1] * z)
        mu = expit(eta)
        value = float(np.sum(np.logaddexp(0.0, eta) - y * eta))
        r = mu - y
        grad = np.array([r.sum()]) if offset else np.array([r.sum(), (r * z).sum()])
        return value, grad

    slope_fit = minimize(
        nll, np.array([0.0, 1.0]), args=(False,), jac=True, method="BFGS", options={"gtol": 1e-11}
    )
    intercept_fit = minimize(
        nll, np.array([0.0]), args=(True,), jac=True, method="BFGS", options={"gtol": 1e-11}
    )
    return float(slope_fit.x[1]), float(intercept_fit.x[0])


def _source(n: int, c: int, seed: int, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from softmax(z); the model reports softmax(z / temperature)."""
    rng = np.random.default_rng(seed)
    z = 1.5 * rng.normal(size=(n, c))
    true = softmax(z)
    labels = (rng.random(n)[:, None] > true.cumsum(axis=1)).sum(axis=1)
    return softmax(z, temperature=temperature), np.minimum(labels, c - 1)


@pytest.mark.parametrize(("c", "seed", "temperature"), [(2, 0, 0.5), (2, 1, 1.0), (2, 2, 2.0), (4, 3, 0.6)])
def test_slope_and_intercept_equal_scipy(c: int, seed: int, temperature: float) -> None:
    probs, labels = _source(800, c, seed, temperature)
    res = calibration_slope_intercept(probs, labels)
    if c == 2:
        p, y = probs[:, 1], (labels == 1).astype(float)
        assert res.event == "positive"
    else:
        p, y = probs.max(axis=1), (probs.argmax(axis=1) == labels).astype(float)
        assert res.event == "top-label"
    slope, intercept = _scipy_reference(p, y)
    assert res.converged
    assert res.slope == pytest.approx(slope, abs=1e-6)
    assert res.intercept == pytest.approx(intercept, abs=1e-6)
    assert res.n == 800 and res.n_events == int(y.sum())


def test_binary_slope_recovers_the_temperature() -> None:
    # logit P(y=1) = z, model reports z / T: the recalibration slope is T (large N, so within 0.05)
    rng = np.random.default_rng(4)
    z = 2.0 * rng.normal(size=200_000)
    y = (rng.random(z.shape[0]) < expit(z)).astype(int)
    probs = softmax(z / 2.0)  # under-confident by a factor 2 -> slope 2
    res = calibration_slope_intercept(probs, y)
    assert res.slope == pytest.approx(2.0, abs=0.05)
    assert abs(res.intercept) < 0.02


def test_hand_computed_intercept() -> None:
    # every row p = .2, events 2 of 4: alpha solves 4 expit(alpha + logit .2) = 2, so
    # alpha = -logit(.2) = log 4; the slope is not identifiable (all z equal) -> NaN, not converged
    probs = np.tile([0.8, 0.2], (4, 1))
    res = calibration_slope_intercept(probs, [1, 0, 1, 0])
    assert res.intercept == pytest.approx(math.log(4.0), abs=1e-12)
    assert math.isnan(res.slope) and not res.converged


def test_degenerate_fits_are_nan_not_huge() -> None:
    # no events: neither fit has an MLE
    res = calibration_slope_intercept([[0.8, 0.2], [0.6, 0.4]], [0, 0])
    assert math.isnan(res.slope) and math.isnan(res.intercept) and not res.converged
    # perfect separation (events have the higher probabilities): slope diverges -> NaN, intercept fine
    probs = np.array([[0.9, 0.1], [0.7, 0.3], [0.4, 0.6], [0.2, 0.8]])
    res = calibration_slope_intercept(probs, [0, 0, 1, 1])
    assert math.isnan(res.slope) and not res.converged and math.isfinite(res.intercept)
    # quasi-complete separation (a tie at the boundary) also has no MLE
    probs = np.array([[0.9, 0.1], [0.5, 0.5], [0.5, 0.5], [0.2, 0.8]])
    assert math.isnan(calibration_slope_intercept(probs, [0, 0, 1, 1]).slope)


def test_probabilities_of_one_are_clipped() -> None:
    probs = np.array([[0.0, 1.0], [0.3, 0.7], [0.6, 0.4], [0.5, 0.5], [1.0, 0.0]])
    res = calibration_slope_intercept(probs, [1, 0, 1, 1, 0])
    assert res.converged and math.isfinite(res.slope)
    slope, intercept = _scipy_reference(probs[:, 1], np.array([1, 0, 1, 1, 0.0]))
    assert res.slope == pytest.approx(slope, abs=1e-6) and res.intercept == pytest.approx(intercept, abs=1e-6)


def test_result_is_frozen_and_serialises() -> None:
    res = calibration_slope_intercept(np.tile([0.8, 0.2], (4, 1)), [1, 0, 1, 0])
    d = json.loads(json.dumps(res.to_dict()))
    assert d["slope"] is None and d["event"] == "positive" and d["n"] == 4
    with pytest.raises(AttributeError):
        res.slope = 1.0  # type: ignore[misc]
    assert isinstance(res, CalibrationSlopeIntercept)


def test_observed_expected_by_hand() -> None:
    # binary: events 3, expected .2 + .4 + .5 + .9 = 2 -> 1.5
    assert observed_expected_ratio([[0.8, 0.2], [0.6, 0.4], [0.5, 0.5], [0.1, 0.9]], [0, 1, 1, 1]) == 1.5
    # three classes, top-label: confidences .7 (right), .5 (wrong), .6 (right): 2 / 1.8
    probs = [[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6]]
    assert observed_expected_ratio(probs, [0, 0, 2]) == pytest.approx(2 / 1.8, rel=1e-15)
    # the same, as the top-label event of a binary model: conf .8 .6 .5 .9, right: no yes no(tie) yes
    assert observed_expected_ratio(
        [[0.8, 0.2], [0.6, 0.4], [0.5, 0.5], [0.1, 0.9]], [1, 0, 1, 1], event="top-label"
    ) == pytest.approx(2 / 2.8, rel=1e-15)
    # nothing expected
    assert observed_expected_ratio([[1.0, 0.0]], [1]) == math.inf
    assert math.isnan(observed_expected_ratio([[1.0, 0.0]], [0]))


def test_event_errors() -> None:
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'event' parameter of calibration_slope_intercept can be 'positive' only for two classes. "
            "Got 3 classes; use event='top-label' (or 'auto')."
        ),
    ):
        calibration_slope_intercept([[0.2, 0.3, 0.5]], [0], event="positive")
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'event' parameter of observed_expected_ratio must be one of 'auto', 'positive', "
            "'top-label'. Got 'toplabel'. Did you mean 'top-label'?"
        ),
    ):
        observed_expected_ratio([[0.5, 0.5]], [0], event="toplabel")  # type: ignore[arg-type]
