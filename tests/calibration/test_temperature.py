from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.special import expit, logsumexp
from scipy.special import softmax as scipy_softmax

from sitecal.calibration import TemperatureFit, fit_temperature
from sitecal.errors import ConvergenceWarning, DataError


def _reference_log_t(logits: np.ndarray, labels: np.ndarray) -> float:
    """Independent solve: brentq on the analytic d NLL / d log T, written with scipy's softmax."""
    rows = np.arange(len(labels))

    def grad(s: float) -> float:
        beta = math.exp(-s)
        p = scipy_softmax(beta * logits, axis=1)
        return float(-beta * np.mean((p * logits).sum(axis=1) - logits[rows, labels]))

    return float(brentq(grad, math.log(0.05), math.log(100.0), xtol=1e-15, rtol=1e-15, maxiter=500))


def _overconfident(n: int, c: int, scale: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    logits = rng.normal(size=(n, c))
    logits[np.arange(n), labels] += 1.0
    return scale * logits, labels


def test_hand_checkable_two_class() -> None:
    # margins (true minus other logit): +2, +2, -2, +2, so NLL(b = 1/T) = mean log(1 + exp(-m b)).
    # Setting d/db = 0: 3 * 2 sigma(-2b) = 2 sigma(2b)  =>  e^{2b} = 3  =>  T = 2 / ln 3 = 1.8205
    fit = fit_temperature([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0]], [0, 1, 1, 0])
    assert fit.temperature == pytest.approx(2 / math.log(3), rel=1e-9)  # |gradient| <= 1e-10
    assert fit.converged and fit.note == "" and abs(fit.gradient) <= 1e-10


def test_overconfident_ten_class_far_from_one() -> None:
    logits, labels = _overconfident(3000, 10, 8.0, 0)
    fit = fit_temperature(logits, labels)
    assert fit.temperature > 5.0  # about 7.8 to 8.1 for this construction
    assert fit.log_temperature == pytest.approx(_reference_log_t(logits, labels), abs=1e-8)
    assert fit.converged and abs(fit.gradient) <= 1e-10
    assert fit.nll_after < fit.nll_before
    nll_at = np.mean(
        logsumexp(logits / fit.temperature, axis=1) - logits[np.arange(3000), labels] / fit.temperature
    )
    assert fit.nll_after == pytest.approx(nll_at, rel=1e-12)


def test_underconfident_case_below_one() -> None:
    logits, labels = _overconfident(2000, 5, 0.3, 1)
    fit = fit_temperature(logits, labels)
    assert fit.temperature < 1.0
    assert fit.log_temperature == pytest.approx(_reference_log_t(logits, labels), abs=1e-8)


@pytest.mark.parametrize("shape", ["flat", "column"])
def test_binary_single_logit(shape: str) -> None:
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 1500)
    z = 6.0 * (2 * y - 1) + rng.normal(0, 5, 1500)
    m = (2 * y - 1) * z  # signed margin: NLL = mean log(1 + exp(-m / T))

    def grad(s: float) -> float:
        beta = math.exp(-s)
        return float(np.mean(expit(-m * beta) * m * beta))

    reference = brentq(grad, math.log(0.05), math.log(100.0), xtol=1e-15, rtol=1e-15)
    fit = fit_temperature(z if shape == "flat" else z[:, None], y)
    assert fit.log_temperature == pytest.approx(reference, abs=1e-8)
    assert fit.nll_after == pytest.approx(np.mean(np.logaddexp(0, -m / fit.temperature)), rel=1e-12)


def test_separable_data_hits_lower_bound_without_warning() -> None:
    logits = np.array([[3.0, -1.0], [-2.0, 4.0], [5.0, 0.0]])
    fit = fit_temperature(logits, [0, 1, 0])
    assert fit.temperature == pytest.approx(0.05)
    assert not fit.converged
    assert fit.note.startswith("NLL still decreasing at the lower bound T = 0.05")


def test_one_class_only_is_noted() -> None:
    fit = fit_temperature(np.array([[3.0, -1.0], [2.0, 1.0]]), [0, 0])
    assert "Only class 0 occurs in the labels" in fit.note
    assert fit.temperature == pytest.approx(0.05)  # all correct as well: separable


def test_uninformative_logits_hit_upper_bound() -> None:
    # every logit points the wrong way: the NLL falls monotonically toward log 2 as T grows
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 400)
    fit = fit_temperature(-(2 * y - 1) * rng.exponential(size=400), y)
    assert fit.temperature == pytest.approx(100.0) and not fit.converged
    assert "upper bound T = 100" in fit.note


def test_constant_logits_leave_t_at_one() -> None:
    fit = fit_temperature(np.zeros((5, 3)), [0, 1, 2, 0, 1])
    assert fit.temperature == 1.0 and fit.converged
    assert "does not depend on T" in fit.note


def test_max_iter_warns() -> None:
    logits, labels = _overconfident(500, 10, 8.0, 4)
    with pytest.warns(ConvergenceWarning, match="stopped after max_iter=1 steps"):
        fit = fit_temperature(logits, labels, max_iter=1)
    assert not fit.converged and "max_iter=1" in fit.note


def test_custom_bounds() -> None:
    logits, labels = _overconfident(500, 10, 8.0, 5)
    fit = fit_temperature(logits, labels, bounds=(0.5, 2.0))
    assert fit.temperature == pytest.approx(2.0) and "upper bound T = 2" in fit.note


def test_round_trip_dict() -> None:
    fit = fit_temperature([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]], [0, 1, 1])
    assert TemperatureFit.from_dict(fit.to_dict()) == fit


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(2, 80), c=st.integers(2, 5), scale=st.floats(0.1, 20.0))
def test_fit_is_stationary_or_on_a_bound(seed: int, n: int, c: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    logits = scale * rng.normal(size=(n, c))
    labels = rng.integers(0, c, n)
    fit = fit_temperature(logits, labels)
    assert 0.05 - 1e-12 <= fit.temperature <= 100.0 + 1e-9
    if fit.converged:
        assert abs(fit.gradient) <= 1e-10 or fit.iterations > 0
        # no worse than T = 1, and no worse than nearby temperatures
        assert fit.nll_after <= fit.nll_before + 1e-12
    else:
        assert "bound" in fit.note
    # scaling never moves the argmax
    assert np.array_equal((logits / fit.temperature).argmax(axis=1), logits.argmax(axis=1))


def test_errors() -> None:
    with pytest.raises(
        DataError,
        match=re.escape("The 'logits' parameter of fit_temperature must be finite. Got nan at index (1, 0)"),
    ):
        fit_temperature([[0.0, 1.0], [np.nan, 1.0]], [0, 1])
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'labels' parameter of fit_temperature must hold class indices in [0, 2). Got 2 at index 1."
        ),
    ):
        fit_temperature([[0.0, 1.0], [1.0, 1.0]], [0, 2])
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'logits' parameter of fit_temperature must have shape (N, C) with C >= 2, "
            "or (N,) / (N, 1) for one binary logit, with N >= 1. Got shape (0, 3)."
        ),
    ):
        fit_temperature(np.zeros((0, 3)), [])
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'labels' parameter of fit_temperature must have shape (2,), "
            "one class index per row of the scores. Got shape (3,)."
        ),
    ):
        fit_temperature([[0.0, 1.0], [1.0, 1.0]], [0, 1, 1])
    with pytest.raises(
        DataError, match=re.escape("The 'tol' parameter of fit_temperature must be a float > 0. Got -1.0.")
    ):
        fit_temperature([[0.0, 1.0]], [0], tol=-1.0)
    with pytest.raises(
        DataError,
        match=re.escape("The 'bounds[1]' parameter of fit_temperature must be a float > 2. Got 1.0."),
    ):
        fit_temperature([[0.0, 1.0]], [0], bounds=(2.0, 1.0))


@pytest.mark.parametrize("n_classes", [2, 3, 7, 12])
def test_the_compiled_row_terms_give_the_numpy_objective_bit_for_bit(n_classes: int) -> None:
    """The objective's passes (compiled around numpy's exp) against the array formulas they replace."""
    from sitecal.calibration import BatchedTemperatureSolver
    from sitecal.calibration._temperature import _NLL

    rng = np.random.default_rng(n_classes)
    z = rng.normal(size=(3000, n_classes)) * 3.0
    y = rng.integers(0, n_classes, 3000)
    objective = _NLL(z, y)
    solver = BatchedTemperatureSolver(z, y, np.arange(3000) // 3, 1000)
    d_t = np.ascontiguousarray(objective.d.T)
    for s in (-1.5, 0.0, 0.4, 3.0):  # a loop over log temperatures
        beta = np.exp(-s)
        scaled = beta * d_t
        m = scaled.max(axis=0)
        e = np.exp(scaled - m)
        total = e.sum(axis=0)
        p = e / total
        mean_d = (p * d_t).sum(axis=0)
        centred = d_t - mean_d
        var_d = (p * centred * centred).sum(axis=0)
        g, h = float(mean_d.mean()), float(var_d.mean())
        expected = (float(np.mean(m + np.log(total))), -beta * g, beta * beta * h + beta * g)
        assert objective(s) == expected
        per_row = solver._per_row(s)  # the batched solver's surrogate nodes: the same terms, row by row
        assert np.array_equal(per_row[0], m + np.log(total))
        assert np.array_equal(per_row[1], -beta * mean_d)
        assert np.array_equal(per_row[2], beta * beta * var_d + beta * mean_d)
