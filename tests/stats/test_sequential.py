"""Anytime-valid monitoring alarms (sitecal.stats._sequential): increments, e-processes, thresholds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from sitecal.errors import DataError
from sitecal.stats import (
    DEFAULT_BET_FRACTIONS,
    DEFAULT_TEMPERATURE_FACTORS,
    SideIncrements,
    alarm_threshold,
    bounded_mean_increments,
    changepoint_evalues,
    first_alarm,
    temperature_increments,
)


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------- hand computations


def test_temperature_increments_match_a_loop_over_studies() -> None:
    # three studies, three classes; each study's log LR written out from the softmax probabilities
    z = np.array([[2.0, -1.0, 0.5], [0.0, 0.3, -2.0], [-1.5, 1.0, 1.2]])
    y = np.array([0, 2, 1])
    low, high, factors = 0.8, 1.25, [1.5, 2.0]
    inc = temperature_increments(z, y, margin_low=low, margin_high=high, grid=factors)
    assert isinstance(inc, SideIncrements) and inc.n == 3
    np.testing.assert_allclose(inc.over_temperatures, [1.875, 2.5])
    np.testing.assert_allclose(inc.under_temperatures, [0.8 / 1.5, 0.4])

    def by_loop(tau0: float, tau1: float) -> float:
        total = 0.0
        for zi, yi in zip(z, y, strict=True):
            p1 = math.exp(zi[yi] / tau1) / sum(math.exp(v / tau1) for v in zi)
            p0 = math.exp(zi[yi] / tau0) / sum(math.exp(v / tau0) for v in zi)
            total += math.log(p1 / p0)
        return total

    np.testing.assert_allclose(inc.over, [by_loop(high, t) for t in (1.875, 2.5)], rtol=1e-12)
    np.testing.assert_allclose(inc.under, [by_loop(low, t) for t in (0.8 / 1.5, 0.4)], rtol=1e-12)


def test_temperature_increments_match_scipy_logsumexp_and_the_defaults() -> None:
    rng = np.random.default_rng(3)
    z, y = rng.normal(size=(2, 4)) * 3, np.array([3, 1])
    inc = temperature_increments(z, y, margin_low=0.9, margin_high=1.1)
    theta0 = 1 / 1.1
    for a, f in enumerate(DEFAULT_TEMPERATURE_FACTORS):
        theta1 = 1 / (1.1 * f)
        expected = sum(
            (theta1 - theta0) * z[i, y[i]] - logsumexp(theta1 * z[i]) + logsumexp(theta0 * z[i])
            for i in range(2)
        )
        assert inc.over[a] == pytest.approx(expected, rel=1e-12)
    assert inc.over.shape == inc.under.shape == (len(DEFAULT_TEMPERATURE_FACTORS),)


def test_temperature_increments_are_stable_with_huge_logits_and_take_one_binary_logit() -> None:
    z = np.array([[800.0, -900.0, 0.0], [0.0, 1000.0, 999.0]])
    inc = temperature_increments(z, np.array([1, 2]), margin_low=0.8, margin_high=1.25)
    assert np.isfinite(inc.over).all() and np.isfinite(inc.under).all()
    # a single logit per row is the two-class model [0, z]
    single = temperature_increments(np.array([1.5, -0.5]), np.array([1, 1]), margin_low=0.8, margin_high=1.25)
    two = temperature_increments(
        np.array([[0.0, 1.5], [0.0, -0.5]]), np.array([1, 1]), margin_low=0.8, margin_high=1.25
    )
    np.testing.assert_array_equal(single.over, two.over)


def test_an_empty_window_adds_nothing() -> None:
    inc = temperature_increments(np.zeros((0, 3)), np.zeros(0, dtype=int), margin_low=0.8, margin_high=1.25)
    assert inc.n == 0 and not inc.over.any() and not inc.under.any()
    out = bounded_mean_increments(np.zeros(0), margin=0.1, side="greater", lower=-1, upper=1)
    np.testing.assert_array_equal(out, np.zeros(len(DEFAULT_BET_FRACTIONS)))


def test_bounded_mean_increments_match_a_loop() -> None:
    x = np.array([0.3, -0.2, 0.9])
    m, lo, hi = 0.1, -1.0, 1.0
    up = bounded_mean_increments(x, margin=m, side="greater", lower=lo, upper=hi, grid=[0.5, 0.9])
    down = bounded_mean_increments(x, margin=m, side="less", lower=lo, upper=hi, grid=[0.5])
    # lambda = c / (m - lower) = 0.5 / 1.1 and 0.9 / 1.1; lambda = 0.5 / (upper - m) = 0.5 / 0.9
    for a, lam in enumerate((0.5 / 1.1, 0.9 / 1.1)):
        assert up[a] == pytest.approx(sum(math.log(1 + lam * (v - m)) for v in x), rel=1e-13)
    assert down[0] == pytest.approx(sum(math.log(1 + 0.5 / 0.9 * (m - v)) for v in x), rel=1e-13)
    # accuracy 0 and 1 against 0.5 with the largest bet halved: factors 1.5 and 0.5
    acc = bounded_mean_increments([1, 0], margin=0.5, side="less", lower=0, upper=1, grid=[0.5])
    assert acc[0] == pytest.approx(math.log(0.75))


def test_the_capital_stays_finite_at_the_bounds() -> None:
    # the worst value for each side with the largest default bet: 1 - 0.75 > 0
    worst = bounded_mean_increments([-1.0] * 50, margin=0.1, side="greater", lower=-1, upper=1)
    assert np.isfinite(worst).all()
    assert worst[-1] == pytest.approx(50 * math.log(0.25))


# ---------------------------------------------------------------- the supermartingale property, exactly


def _expected_ratio(z: np.ndarray, theta_true: float, theta0: float, theta1: float) -> np.ndarray:
    """E over y ~ softmax(theta_true z) of one study's likelihood ratio, by summing over the classes."""
    p_true = _softmax(theta_true * z)
    ratio = _softmax(theta1 * z) / _softmax(theta0 * z)
    return np.asarray((p_true * ratio).sum(axis=1))


@pytest.mark.parametrize("side", ["over", "under"])
def test_each_studys_likelihood_ratio_has_mean_at_most_one_under_the_null(side: str) -> None:
    rng = np.random.default_rng(11)
    z = rng.normal(size=(200, 4)) * rng.uniform(0.5, 4.0, size=(200, 1))  # any case mix
    low, high = 0.8, 1.25
    tau0 = high if side == "over" else low
    theta0 = 1 / tau0
    for f in DEFAULT_TEMPERATURE_FACTORS:
        theta1 = 1 / (tau0 * f) if side == "over" else f / tau0
        # the whole null: theta >= theta0 (over) or theta <= theta0 (under)
        nulls = theta0 * (
            np.array([1.0, 1.05, 1.5, 3.0]) if side == "over" else np.array([1.0, 0.95, 0.5, 0.1])
        )
        for theta in nulls:
            assert (_expected_ratio(z, theta, theta0, theta1) <= 1 + 1e-12).all()
        # equality at the boundary ...
        np.testing.assert_allclose(_expected_ratio(z, theta0, theta0, theta1), 1.0, rtol=1e-12)
        # ... and a case that can fail: beyond the margin (theta1 itself, or halfway) the mean exceeds 1
        for theta in (theta1, (theta0 + theta1) / 2):
            assert (_expected_ratio(z, theta, theta0, theta1) > 1).all()


def test_the_function_uses_the_ratio_whose_mean_was_checked() -> None:
    rng = np.random.default_rng(5)
    z = rng.normal(size=(6, 3)) * 2
    theta0, theta1 = 1 / 1.25, 1 / (1.25 * 2.0)
    for i in range(6):
        for y in range(3):
            inc = temperature_increments(z[i : i + 1], [y], margin_low=0.8, margin_high=1.25, grid=[2.0])
            ratio = _softmax(theta1 * z[i])[y] / _softmax(theta0 * z[i])[y]
            assert math.exp(inc.over[0]) == pytest.approx(ratio, rel=1e-12)


def test_each_bet_has_mean_at_most_one_under_the_null() -> None:
    # X on {lower, upper} with mean exactly m, and with a smaller mean: E[1 + lambda (X - m)] <= 1
    lo, hi, m = -1.0, 1.0, 0.1
    for mean in (m, 0.0, -0.5):
        p_hi = (mean - lo) / (hi - lo)
        for c in DEFAULT_BET_FRACTIONS:
            lam = c / (m - lo)
            expected = p_hi * (1 + lam * (hi - m)) + (1 - p_hi) * (1 + lam * (lo - m))
            assert expected <= 1 + 1e-12
            got = p_hi * math.exp(
                bounded_mean_increments([hi], margin=m, side="greater", lower=lo, upper=hi, grid=[c])[0]
            )
            got += (1 - p_hi) * math.exp(
                bounded_mean_increments([lo], margin=m, side="greater", lower=lo, upper=hi, grid=[c])[0]
            )
            assert got == pytest.approx(expected, rel=1e-12)
            assert (got < 1) == (mean < m)


# ---------------------------------------------------------------- change points


def _brute_force(inc: np.ndarray, v: np.ndarray, horizon: int) -> np.ndarray:
    """E_t = sum_{s<=min(t,H)} M_{s,t} / H + (H - min(t, H)) / H, by direct sums over s and a."""
    n_windows = inc.shape[0]
    out = []
    for t in range(1, n_windows + 1):
        total = 0.0
        for s in range(1, min(t, horizon) + 1):
            total += sum(v[a] * math.exp(inc[s - 1 : t, a].sum()) for a in range(inc.shape[1])) / horizon
        total += (horizon - min(t, horizon)) / horizon
        out.append(math.log(total))
    return np.array(out)


@pytest.mark.parametrize("horizon", [1, 3, 5, 12])
def test_changepoint_evalues_match_the_direct_sum(horizon: int) -> None:
    rng = np.random.default_rng(horizon)
    inc = rng.normal(scale=2.0, size=(7, 3))
    v = np.array([0.2, 0.5, 0.3])
    np.testing.assert_allclose(
        changepoint_evalues(inc, alt_weights=v, horizon=horizon),
        _brute_force(inc, v, horizon),
        rtol=1e-12,
        atol=1e-12,
    )
    # weights are normalised; leading axes are independent series
    np.testing.assert_allclose(
        changepoint_evalues(inc, alt_weights=2 * v, horizon=horizon),
        _brute_force(inc, v, horizon),
        rtol=1e-12,
        atol=1e-12,
    )
    stacked = changepoint_evalues(np.stack([inc, -inc]), alt_weights=v, horizon=horizon)
    np.testing.assert_allclose(stacked[1], _brute_force(-inc, v, horizon), rtol=1e-12, atol=1e-12)


def test_a_late_drift_is_not_masked_by_earlier_evidence_against_it() -> None:
    # six windows of evidence against the alternative, then strong evidence for it from window 7
    inc = np.array([[-20.0]] * 6 + [[8.0], [8.0]])
    restarted = changepoint_evalues(inc, horizon=12)
    plain = np.cumsum(inc[:, 0])  # the product from go-live only
    assert plain[-1] < 0
    # the start at window 7 carries weight 1/12: log E_8 >= 16 - log 12
    assert restarted[-1] >= 16 - math.log(12) - 1e-12


def test_large_increments_do_not_overflow() -> None:
    out = changepoint_evalues(np.array([[900.0], [900.0]]), horizon=2)
    assert out[1] == pytest.approx(1800 + math.log(0.5 + 0.5 * math.exp(-900)))


@settings(max_examples=60, deadline=None)
@given(
    windows=st.integers(1, 15),
    alternatives=st.integers(1, 5),
    horizon=st.integers(1, 20),
)
def test_no_evidence_gives_an_e_value_of_one(windows: int, alternatives: int, horizon: int) -> None:
    out = changepoint_evalues(np.zeros((windows, alternatives)), horizon=horizon)
    np.testing.assert_allclose(out, 0.0, atol=1e-13)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    window=st.integers(0, 9),
    alternative=st.integers(0, 2),
    bump=st.floats(0.01, 10.0),
)
def test_changepoint_evalues_rise_with_any_one_increment(
    seed: int, window: int, alternative: int, bump: float
) -> None:
    inc = np.random.default_rng(seed).normal(scale=3.0, size=(10, 3))
    before = changepoint_evalues(inc, horizon=6)
    inc[window, alternative] += bump
    after = changepoint_evalues(inc, horizon=6)
    np.testing.assert_array_equal(after[:window], before[:window])
    assert (after[window:] > before[window:]).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40))
def test_increments_do_not_depend_on_the_order_of_studies(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    z, y = rng.normal(size=(n, 3)) * 3, rng.integers(0, 3, n)
    x = rng.uniform(-1, 1, n)
    order = rng.permutation(n)
    a = temperature_increments(z, y, margin_low=0.8, margin_high=1.25)
    b = temperature_increments(z[order], y[order], margin_low=0.8, margin_high=1.25)
    np.testing.assert_allclose(a.over, b.over, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(a.under, b.under, rtol=1e-10, atol=1e-10)
    c = bounded_mean_increments(x, margin=0.1, side="greater", lower=-1, upper=1)
    d = bounded_mean_increments(x[order], margin=0.1, side="greater", lower=-1, upper=1)
    np.testing.assert_allclose(c, d, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- validity by simulation


def _crossing_rate(log_e: np.ndarray, threshold: float) -> float:
    return float((log_e.max(axis=-1) >= threshold).mean())


def test_false_alarms_at_the_boundary_stay_below_alpha() -> None:
    # tau exactly at the margin 1.25 in every window: the null where the guarantee binds
    rng = np.random.default_rng(20270101)
    series, windows, n, alpha = 400, 8, 60, 0.1
    z = rng.normal(size=(series, windows, n, 3)) * 2.5
    p = _softmax(z / 1.25)
    y = (p.cumsum(axis=-1) > rng.random((series, windows, n, 1))).argmax(axis=-1)
    over = np.array(
        [
            [
                temperature_increments(z[r, w], y[r, w], margin_low=0.8, margin_high=1.25).over
                for w in range(windows)
            ]
            for r in range(series)
        ]
    )
    threshold = alarm_threshold(alpha, 1)
    rate = _crossing_rate(changepoint_evalues(over, horizon=windows), threshold)
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / series)
    # accuracy exactly at its margin: correct ~ Bernoulli(0.7)
    x = (rng.random((series, windows, n)) < 0.7).astype(float)
    acc = np.array(
        [
            [
                bounded_mean_increments(x[r, w], margin=0.7, side="less", lower=0, upper=1)
                for w in range(windows)
            ]
            for r in range(series)
        ]
    )
    assert _crossing_rate(changepoint_evalues(acc, horizon=windows), threshold) <= alpha + 3 * math.sqrt(
        alpha * (1 - alpha) / series
    )
    # the same machinery does raise the alarm when tau is beyond the margin (the check can fail)
    p_far = _softmax(z[:50] / 2.0)
    y_far = (p_far.cumsum(axis=-1) > rng.random((50, windows, n, 1))).argmax(axis=-1)
    far = np.array(
        [
            [
                temperature_increments(z[r, w], y_far[r, w], margin_low=0.8, margin_high=1.25).over
                for w in range(windows)
            ]
            for r in range(50)
        ]
    )
    assert _crossing_rate(changepoint_evalues(far, horizon=windows), threshold) > 0.9


# ---------------------------------------------------------------- thresholds and errors


def test_alarm_threshold_and_first_alarm() -> None:
    assert alarm_threshold(0.05, 30) == pytest.approx(math.log(600))
    assert first_alarm(np.array([1.0, 6.5, 2.0]), alarm_threshold(0.05, 30)) == 1
    assert first_alarm(np.array([1.0, 6.3]), alarm_threshold(0.05, 30)) == -1


def test_bad_input_is_refused_with_a_message_naming_it() -> None:
    with pytest.raises(DataError, match=r"'margin_low' parameter of temperature_increments must be below"):
        temperature_increments(np.zeros((2, 2)), [0, 1], margin_low=1.25, margin_high=0.8)
    with pytest.raises(DataError, match=r"'grid' parameter of temperature_increments must be a float > 1"):
        temperature_increments(np.zeros((2, 2)), [0, 1], margin_low=0.8, margin_high=1.25, grid=[0.9])
    with pytest.raises(
        DataError, match=r"'labels' parameter of temperature_increments must hold class indices"
    ):
        temperature_increments(np.zeros((2, 2)), [0, 2], margin_low=0.8, margin_high=1.25)
    with pytest.raises(DataError, match=r"must hold values in \[0, 1\].*Got 1.5 at index 1"):
        bounded_mean_increments([0.5, 1.5], margin=0.7, side="less", lower=0, upper=1)
    with pytest.raises(DataError, match=r"'side' parameter .* Got 'lesser'. Did you mean 'less'\?"):
        bounded_mean_increments([0.5], margin=0.7, side="lesser", lower=0, upper=1)
    with pytest.raises(
        DataError, match=r"'margin' parameter of bounded_mean_increments must be a float in \(0, 1\)"
    ):
        bounded_mean_increments([0.5], margin=1.0, side="less", lower=0, upper=1)
    with pytest.raises(
        DataError, match=r"'grid' parameter of bounded_mean_increments must be a float in \(0, 1\)"
    ):
        bounded_mean_increments([0.5], margin=0.7, side="less", lower=0, upper=1, grid=[1.0])
    with pytest.raises(DataError, match=r"'horizon' parameter of changepoint_evalues must be an int >= 1"):
        changepoint_evalues(np.zeros((2, 1)), horizon=0)
    with pytest.raises(DataError, match=r"'increments' parameter of changepoint_evalues must be finite"):
        changepoint_evalues(np.array([[np.nan]]), horizon=2)
    with pytest.raises(DataError, match=r"'alt_weights' parameter of changepoint_evalues must be 2 finite"):
        changepoint_evalues(np.zeros((2, 2)), alt_weights=[1.0], horizon=2)
    with pytest.raises(DataError, match=r"'alpha' parameter of alarm_threshold must be a float in \(0, 1\)"):
        alarm_threshold(0.0, 3)
