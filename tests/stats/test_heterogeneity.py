"""Random effects (REML + HKSJ, DerSimonian–Laird): statsmodels, metafor, hand computations, edge cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import ndtri
from scipy.stats import chi2
from scipy.stats import t as t_dist
from statsmodels.regression.linear_model import WLS
from statsmodels.stats.meta_analysis import combine_effects

from sitecal.errors import DataError
from sitecal.stats import random_effects_meta_analysis
from sitecal.stats._heterogeneity import _hksj_standard_error


def test_hand_computation() -> None:
    # effects 0, 0.2, -0.1 with variances 0.01, 0.02, 0.01: w = 100, 50, 100, S1 = 250, S2 = 22500;
    # fixed = (0 + 10 - 10) / 250 = 0; Q = 100*0 + 50*0.04 + 100*0.01 = 3; df = 2;
    # tau2 = (3 - 2) / (250 - 22500/250) = 1/160 = 0.00625; I2 = (3 - 2)/3 = 1/3;
    # w* = 1/0.01625, 1/0.02625, 1/0.01625 = 61.538, 38.095, 61.538 (sum 161.172);
    # pooled = 38.095 * 0.2 + 61.538 * -0.1 = 1.4652 / 161.172 = 0.0090909; SE = 161.172^-1/2 = 0.078769
    res = random_effects_meta_analysis([0.0, 0.2, -0.1], [0.01, 0.02, 0.01], method="dl")
    assert res.fixed_estimate == pytest.approx(0.0, abs=1e-15)
    assert res.q == pytest.approx(3.0)
    assert res.df == 2
    assert res.tau2 == pytest.approx(1 / 160)
    assert res.i2 == pytest.approx(1 / 3)
    assert res.p_value == pytest.approx(math.exp(-1.5))  # chi2 with 2 df: P(X > q) = exp(-q/2)
    w = np.array([1 / 0.01625, 1 / 0.02625, 1 / 0.01625])
    assert res.estimate == pytest.approx(float(w @ [0.0, 0.2, -0.1] / w.sum()))
    assert res.estimate == pytest.approx(0.0090909, abs=1e-7)
    assert res.standard_error == pytest.approx(0.078769, abs=1e-6)
    assert res.weights.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_statsmodels_combine_effects(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 9))
    effects = rng.normal(0.0, 0.4, k)
    variances = rng.uniform(0.002, 0.02, k)
    res = random_effects_meta_analysis(effects, variances, level=0.9, method="dl")
    ref = combine_effects(effects, variances, method_re="chi2")  # "chi2" is DerSimonian-Laird
    # statsmodels does not truncate a negative tau2 at 0 (its sqrt then warns): compare where Q > df
    assert ref.tau2 > 0
    assert res.q == pytest.approx(ref.q, rel=1e-12)
    assert res.tau2 == pytest.approx(ref.tau2, rel=1e-10, abs=1e-15)
    assert res.i2 == pytest.approx(ref.i2, rel=1e-10, abs=1e-15)
    assert res.estimate == pytest.approx(ref.mean_effect_re, rel=1e-10)
    assert res.standard_error == pytest.approx(ref.sd_eff_w_re, rel=1e-10)
    assert res.fixed_estimate == pytest.approx(ref.mean_effect_fe, rel=1e-10)
    assert res.p_value == pytest.approx(chi2.sf(ref.q, k - 1), rel=1e-10)
    low, high = ref.conf_int(alpha=0.1)[1]  # [0]: fixed effect, [1]: random effects
    assert (res.low, res.high) == pytest.approx((low, high), rel=1e-10)
    np.testing.assert_allclose(res.weights, ref.weights_rel_re, rtol=1e-10)


@pytest.mark.parametrize("method", ["reml", "dl"])
def test_homogeneous_effects_give_zero_heterogeneity(method: str) -> None:
    res = random_effects_meta_analysis([0.1, 0.1, 0.1], [0.01, 0.02, 0.03], method=method)  # type: ignore[arg-type]
    assert res.q == pytest.approx(0.0, abs=1e-20)
    assert res.i2 == 0.0 and res.tau2 == 0.0
    assert res.estimate == pytest.approx(res.fixed_estimate)


def test_one_group_has_no_heterogeneity_and_serialises_without_nan() -> None:
    res = random_effects_meta_analysis([0.3], [0.04], method="dl")
    assert res.k == 1 and res.df == 0 and res.tau2 == 0.0
    assert math.isnan(res.p_value) and math.isnan(res.i2) and res.note
    assert res.estimate == pytest.approx(0.3) and res.standard_error == pytest.approx(0.2)
    d = res.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["p_value"] is None and d["i2"] is None


@pytest.mark.parametrize(
    ("effects", "variances"),
    [([0.1, 0.2], [0.01]), ([], []), ([0.1, float("nan")], [0.01, 0.01]), ([0.1, 0.2], [0.01, 0.0])],
)
def test_bad_input_raises_with_the_parameter_named(effects: list[float], variances: list[float]) -> None:
    with pytest.raises(DataError, match="random_effects_meta_analysis"):
        random_effects_meta_analysis(effects, variances)


# --- method="reml" (REML tau², HKSJ interval), prediction intervals, method="dl" unchanged ---------------

# dat.bcg (metafor; Colditz et al. 1994): BCG-vaccinated TB+, TB-, control TB+, TB- of the 13 trials
_BCG = np.array(
    [
        [4, 119, 11, 128],
        [6, 300, 29, 274],
        [3, 228, 11, 209],
        [62, 13536, 248, 12619],
        [33, 5036, 47, 5761],
        [180, 1361, 372, 1079],
        [8, 2537, 10, 619],
        [505, 87886, 499, 87892],
        [29, 7470, 45, 7232],
        [17, 1699, 65, 1600],
        [186, 50448, 141, 27197],
        [5, 2493, 3, 2338],
        [27, 16886, 29, 17825],
    ],
    dtype=np.float64,
)


def _bcg_log_rr() -> tuple[np.ndarray, np.ndarray]:
    a, b, c, d = _BCG.T  # metafor escalc(measure="RR"): log risk ratio and its large-sample variance
    return np.log(a / (a + b)) - np.log(c / (c + d)), 1 / a - 1 / (a + b) + 1 / c - 1 / (c + d)


def _restricted_loglik(tau2: float, y: np.ndarray, v: np.ndarray) -> float:
    w = 1 / (v + tau2)
    mu = np.sum(w * y) / np.sum(w)
    return float(-0.5 * (np.sum(np.log(v + tau2)) + np.log(np.sum(w)) + np.sum(w * (y - mu) ** 2)))


def _reml_by_minimize_scalar(y: np.ndarray, v: np.ndarray) -> float:
    upper = 10 * (float(np.var(y)) + float(np.max(v)))
    opt = minimize_scalar(
        lambda t: -_restricted_loglik(t, y, v),
        bounds=(0.0, upper),
        method="bounded",
        options={"xatol": 1e-13},
    )
    # the bounded search never lands exactly on 0: take the boundary when it is at least as good
    return 0.0 if _restricted_loglik(0.0, y, v) >= -opt.fun else float(opt.x)


def _old_dl(y: np.ndarray, v: np.ndarray, level: float) -> dict[str, float]:
    """The function's arithmetic before `method` existed, copied, to check method="dl" bit for bit."""
    w = 1.0 / v
    s1 = float(w.sum())
    fixed = float(np.sum(w * y) / s1)
    q = float(np.sum(w * (y - fixed) ** 2))
    df = y.size - 1
    tau2 = max(0.0, (q - df) / (s1 - float(np.sum(w * w)) / s1)) if y.size > 1 else 0.0
    w_star = 1.0 / (v + tau2)
    estimate = float(np.sum(w_star * y) / w_star.sum())
    se = math.sqrt(1.0 / float(w_star.sum()))
    z = float(ndtri((1.0 + level) / 2.0))
    return {"q": q, "tau2": tau2, "estimate": estimate, "se": se, "low": estimate - z * se}


def _random_data(seed: int, k_low: int = 3, k_high: int = 9) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(k_low, k_high))
    return rng.normal(0.0, rng.uniform(0.02, 0.5), k), rng.uniform(0.002, 0.05, k)


def test_default_method_is_reml_with_hksj() -> None:
    res = random_effects_meta_analysis([0.0, 0.2, -0.1, 0.3], [0.01, 0.02, 0.01, 0.02])
    assert (res.method, res.interval) == ("reml", "hksj")
    d = res.to_dict()
    assert d["method"] == "reml" and d["interval"] == "hksj"
    assert d["prediction_low"] == res.prediction_low and d["prediction_high"] == res.prediction_high


@pytest.mark.parametrize("seed", range(8))
def test_reml_tau2_matches_an_independent_maximisation(seed: int) -> None:
    y, v = _random_data(seed)
    res = random_effects_meta_analysis(y, v)
    assert res.tau2 >= 0.0
    assert res.tau2 == pytest.approx(_reml_by_minimize_scalar(y, v), abs=1e-6)
    # the score (derivative of the restricted log-likelihood) vanishes at an interior maximum
    if res.tau2 > 0:
        h = 1e-7 * max(res.tau2, 1e-3)
        slope = (_restricted_loglik(res.tau2 + h, y, v) - _restricted_loglik(res.tau2 - h, y, v)) / (2 * h)
        assert abs(slope) < 1e-4


def test_reml_at_the_boundary_gives_zero_tau2() -> None:
    # effects closer together than their variances predict: Q < df, the REML maximum is at tau2 = 0
    y, v = np.array([0.1, 0.11, 0.09, 0.1]), np.array([0.01, 0.02, 0.015, 0.01])
    res = random_effects_meta_analysis(y, v)
    assert res.tau2 == 0.0 and _reml_by_minimize_scalar(y, v) == 0.0
    assert res.estimate == pytest.approx(res.fixed_estimate, rel=1e-14)


def test_reml_and_dl_match_metafor_on_bcg_trials() -> None:
    # metafor documentation, dat.bcg log risk ratios: rma(yi, vi, method="REML"): tau2 = 0.3132,
    # estimate -0.7145 (SE 0.1798 with the fixed scale); rma(..., method="DL"): tau2 = 0.3088,
    # Q = 152.2330, I2 = 92.12%
    y, v = _bcg_log_rr()
    res = random_effects_meta_analysis(y, v)
    assert res.tau2 == pytest.approx(0.3132, abs=5e-5)
    assert res.estimate == pytest.approx(-0.7145, abs=5e-5)
    assert math.sqrt(1 / np.sum(1 / (v + res.tau2))) == pytest.approx(0.1798, abs=5e-5)
    assert res.tau2 == pytest.approx(_reml_by_minimize_scalar(y, v), abs=1e-6)
    dl = random_effects_meta_analysis(y, v, method="dl")
    assert dl.tau2 == pytest.approx(0.3088, abs=5e-5)
    assert dl.q == pytest.approx(152.2330, abs=5e-5) and res.q == dl.q
    assert dl.i2 == pytest.approx(0.9212, abs=5e-5) and res.i2 == dl.i2


@pytest.mark.parametrize("seed", range(6))
def test_hksj_interval_is_weighted_least_squares_with_the_scale_floored_at_one(seed: int) -> None:
    # plain HKSJ = WLS of the effects on a constant with weights 1 / (v_i + tau2) and the scale
    # estimated (statsmodels' WLS standard error, t with k - 1 df); the modified HKSJ floors that scale
    # at 1, so its SE is the larger of the WLS one and the fixed-scale (sum w*)^(-1/2)
    y, v = _random_data(seed)
    res = random_effects_meta_analysis(y, v, level=0.9)
    w_star = 1 / (v + res.tau2)
    fit = WLS(y, np.ones((y.size, 1)), weights=w_star).fit()
    assert res.estimate == pytest.approx(float(fit.params[0]), rel=1e-12, abs=1e-15)
    fixed_scale = math.sqrt(1.0 / np.sum(w_star))
    assert res.standard_error == pytest.approx(max(float(fit.bse[0]), fixed_scale), rel=1e-10)
    crit = t_dist.ppf(0.95, y.size - 1)
    assert (res.low, res.high) == pytest.approx(
        (res.estimate - crit * res.standard_error, res.estimate + crit * res.standard_error), rel=1e-12
    )
    if fit.bse[0] >= fixed_scale:  # scale >= 1: the plain HKSJ interval, as statsmodels' WLS gives it
        low, high = fit.conf_int(alpha=0.1)[0]
        assert (res.low, res.high) == pytest.approx((low, high), rel=1e-10, abs=1e-14)
    np.testing.assert_allclose(res.weights, w_star / w_star.sum(), rtol=1e-12)
    # and the formula of the docstring, by hand
    q = np.sum(w_star * (y - res.estimate) ** 2) / (y.size - 1)
    assert res.standard_error == pytest.approx(math.sqrt(max(1.0, q) / np.sum(w_star)), rel=1e-12)


def test_modified_hksj_by_hand_when_the_effects_agree_closely() -> None:
    # y = 0.1, 0.11, 0.09, 0.1 with v = 0.01, 0.02, 0.015, 0.01: REML tau2 = 0 (Q < df), so
    # w* = 100, 50, 66.667, 100 (sum 316.667); pooled = (10 + 5.5 + 6 + 10) / 316.667 = 0.0994737;
    # residuals 0.0005263, 0.0105263, -0.0094737, 0.0005263, so sum w* r^2 = 0.0000277 + 0.0055402
    # + 0.0059834 + 0.0000277 = 0.0115789 and q = 0.0115789 / 3 = 0.0038596 < 1; plain HKSJ SE
    # = sqrt(q / 316.667) = 0.0034912, the floored one sqrt(1 / 316.667) = 0.0561951; t_{3, 0.975}
    # = 3.182446
    y, v = np.array([0.1, 0.11, 0.09, 0.1]), np.array([0.01, 0.02, 0.015, 0.01])
    res = random_effects_meta_analysis(y, v)
    assert res.tau2 == 0.0
    assert res.estimate == pytest.approx(0.0994737, abs=1e-7)
    assert res.standard_error == pytest.approx(0.0561951, abs=1e-7)
    assert res.high - res.estimate == pytest.approx(3.182446 * 0.0561951, abs=1e-6)
    plain = _hksj_plain(y, 1.0 / v, res.estimate)
    assert plain == pytest.approx(0.0034912, abs=1e-7) and plain < res.standard_error
    # statsmodels' WLS with the scale estimated gives the plain SE, with the scale fixed at 1 the floor
    fit = WLS(y, np.ones((4, 1)), weights=1.0 / v).fit()
    assert plain == pytest.approx(float(fit.bse[0]), rel=1e-10)
    fixed = WLS(y, np.ones((4, 1)), weights=1.0 / v).fit(cov_type="fixed scale")
    assert res.standard_error == pytest.approx(float(fixed.bse[0]), rel=1e-10)


def _hksj_plain(theta: np.ndarray, w_star: np.ndarray, estimate: float) -> float:
    return math.sqrt(np.sum(w_star * (theta - estimate) ** 2) / ((theta.size - 1) * np.sum(w_star)))


def test_hksj_standard_error_matches_metafor_knha_and_statsmodels() -> None:
    # statsmodels' results_meta.py, Kacker 2004 data with metafor: rma(y, v, method="DL", test="knha")
    # gives se 0.29477605699879 and ci (61.710383798052, 63.0698934108488) with tau2 = 0.288049246973751
    y = np.array([61.0, 61.4, 62.21, 62.3, 62.34, 62.6, 62.7, 62.84, 65.9])
    v = np.array([0.2025, 1.21, 0.09, 0.2025, 0.3844, 0.5625, 0.0676, 0.0225, 1.8225])
    tau2 = 0.288049246973751
    w_star = 1 / (v + tau2)
    estimate = float(np.sum(w_star * y) / np.sum(w_star))
    se = _hksj_standard_error(y, w_star, estimate)
    assert estimate == pytest.approx(62.3901386044504, rel=1e-12)
    assert se == pytest.approx(0.29477605699879, rel=1e-9)
    crit = t_dist.ppf(0.975, y.size - 1)
    assert (estimate - crit * se, estimate + crit * se) == pytest.approx(
        (61.710383798052, 63.0698934108488), rel=1e-12
    )
    ref = combine_effects(y, v, method_re="chi2", use_t=True)
    assert ref.tau2 == pytest.approx(tau2, rel=1e-10)
    assert se == pytest.approx(math.sqrt(ref.var_hksj_re), rel=1e-10)
    assert (estimate - crit * se, estimate + crit * se) == pytest.approx(tuple(ref.conf_int()[3]), rel=1e-12)


@pytest.mark.parametrize("method", ["reml", "dl"])
@pytest.mark.parametrize("seed", range(4))
def test_prediction_interval_by_hand(method: str, seed: int) -> None:
    y, v = _random_data(seed)
    res = random_effects_meta_analysis(y, v, level=0.8, method=method)  # type: ignore[arg-type]
    half = t_dist.ppf(0.9, y.size - 2) * math.sqrt(res.tau2 + res.standard_error**2)
    assert (res.prediction_low, res.prediction_high) == pytest.approx(
        (res.estimate - half, res.estimate + half), rel=1e-12, abs=1e-15
    )
    assert res.prediction_low <= res.low and res.high <= res.prediction_high
    assert res.note == ""


@pytest.mark.parametrize("method", ["reml", "dl"])
def test_two_groups_have_no_prediction_interval(method: str) -> None:
    res = random_effects_meta_analysis([0.1, 0.5], [0.01, 0.02], method=method)  # type: ignore[arg-type]
    assert math.isnan(res.prediction_low) and math.isnan(res.prediction_high)
    assert "prediction interval" in res.note
    assert math.isfinite(res.low) and math.isfinite(res.high)
    d = res.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["prediction_low"] is None and d["prediction_high"] is None
    if method == "reml":  # HKSJ with k = 2: t with 1 df, SE from the two residuals (scale floored at 1)
        w = 1 / (np.array([0.01, 0.02]) + res.tau2)
        se = math.sqrt(max(1.0, np.sum(w * (np.array([0.1, 0.5]) - res.estimate) ** 2)) / np.sum(w))
        assert res.standard_error == pytest.approx(se, rel=1e-12)
        assert res.high - res.estimate == pytest.approx(t_dist.ppf(0.975, 1) * se, rel=1e-12)
        assert res.tau2 == pytest.approx(
            _reml_by_minimize_scalar(np.array([0.1, 0.5]), np.array([0.01, 0.02])), abs=1e-6
        )


def test_one_group_under_reml_has_no_interval() -> None:
    res = random_effects_meta_analysis([0.3], [0.04])
    assert res.k == 1 and res.tau2 == 0.0 and res.estimate == pytest.approx(0.3)
    assert res.interval == "hksj"
    assert math.isnan(res.standard_error) and math.isnan(res.low) and math.isnan(res.high)
    assert math.isnan(res.prediction_low) and math.isnan(res.prediction_high)
    assert "one group" in res.note and "HKSJ" in res.note and "prediction" in res.note
    d = res.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["standard_error"] is None and d["low"] is None and d["prediction_low"] is None


@pytest.mark.parametrize("seed", range(10))
def test_dl_is_bit_identical_to_the_old_function(seed: int) -> None:
    y, v = _random_data(seed, 1, 9)
    res = random_effects_meta_analysis(y, v, level=0.9, method="dl")
    old = _old_dl(y, v, 0.9)
    assert (res.method, res.interval) == ("dl", "wald")
    assert res.q == old["q"] and res.tau2 == old["tau2"] and res.estimate == old["estimate"]
    assert res.standard_error == old["se"] and res.low == old["low"]


def test_dl_hand_computation_and_reml_differ() -> None:
    dl = random_effects_meta_analysis([0.0, 0.2, -0.1], [0.01, 0.02, 0.01], method="dl")
    assert dl.tau2 == pytest.approx(1 / 160) and dl.standard_error == pytest.approx(0.078769, abs=1e-6)
    reml = random_effects_meta_analysis([0.0, 0.2, -0.1], [0.01, 0.02, 0.01])
    assert reml.tau2 != dl.tau2 and reml.q == dl.q and reml.i2 == dl.i2


def test_unknown_method_raises() -> None:
    with pytest.raises(DataError, match="'method'"):
        random_effects_meta_analysis([0.1, 0.2], [0.01, 0.01], method="pm")  # type: ignore[arg-type]


def test_reml_converges_where_plain_fisher_scoring_oscillates() -> None:
    # large variances: the Fisher information is about half the observed one here, so plain Fisher
    # scoring overshoots back and forth for hundreds of iterations; the Newton step converges
    y = np.array([-1308.696, 990.358, 240.206, 2492.187, -3117.151, -2199.335, -1196.131, -2250.239])
    v = np.array(
        [3.068159e7, 2.998028e4, 4.056074e7, 1.825759e7, 9.307050e6, 1.809776e7, 2.542514e7, 4.002226e5]
    )
    res = random_effects_meta_analysis(y, v)
    assert res.tau2 == pytest.approx(_reml_by_minimize_scalar(y, v), rel=1e-6)
