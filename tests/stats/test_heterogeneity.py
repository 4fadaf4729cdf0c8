"""DerSimonian–Laird random effects: statsmodels combine_effects, a hand computation, edge cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import chi2
from statsmodels.stats.meta_analysis import combine_effects

from sitecal.errors import DataError
from sitecal.stats import random_effects_meta_analysis


def test_hand_computation() -> None:
    # effects 0, 0.2, -0.1 with variances 0.01, 0.02, 0.01: w = 100, 50, 100, S1 = 250, S2 = 22500;
    # fixed = (0 + 10 - 10) / 250 = 0; Q = 100*0 + 50*0.04 + 100*0.01 = 3; df = 2;
    # tau2 = (3 - 2) / (250 - 22500/250) = 1/160 = 0.00625; I2 = (3 - 2)/3 = 1/3;
    # w* = 1/0.01625, 1/0.02625, 1/0.01625 = 61.538, 38.095, 61.538 (sum 161.172);
    # pooled = 38.095 * 0.2 + 61.538 * -0.1 = 1.4652 / 161.172 = 0.0090909; SE = 161.172^-1/2 = 0.078769
    res = random_effects_meta_analysis([0.0, 0.2, -0.1], [0.01, 0.02, 0.01])
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
    res = random_effects_meta_analysis(effects, variances, level=0.9)
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


def test_homogeneous_effects_give_zero_heterogeneity() -> None:
    res = random_effects_meta_analysis([0.1, 0.1, 0.1], [0.01, 0.02, 0.03])
    assert res.q == pytest.approx(0.0, abs=1e-20)
    assert res.i2 == 0.0 and res.tau2 == 0.0
    assert res.estimate == pytest.approx(res.fixed_estimate)


def test_one_group_has_no_heterogeneity_and_serialises_without_nan() -> None:
    res = random_effects_meta_analysis([0.3], [0.04])
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
