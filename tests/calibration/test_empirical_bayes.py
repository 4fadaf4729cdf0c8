"""Empirical-Bayes group temperatures: hand cases, REML against stats, the sandwich against statsmodels."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from statsmodels.discrete.discrete_model import Logit

from sitecal.calibration import (
    GroupTemperatures,
    cluster_robust_variance,
    fit_group_temperatures,
    fit_temperature,
    shrink_log_temperatures,
)
from sitecal.calibration._temperature import _NLL
from sitecal.errors import DataError
from sitecal.results import CalibrationDocument
from sitecal.stats import random_effects_meta_analysis


def _binary(n: int, t_true: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One logit per row; labels drawn from sigmoid(z / t_true), so the optimum T is near t_true."""
    z = rng.normal(size=n) * 3.0
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-z / t_true))).astype(int)
    return z, y


def _sites(sizes: dict[str, int], t_true: dict[str, float], seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    parts = [(*_binary(n, t_true[g], rng), np.full(n, g)) for g, n in sizes.items()]
    z, y, g = (np.concatenate(p) for p in zip(*parts, strict=True))
    patients = np.array([f"{site}-{i // 2}" for site, n in sizes.items() for i in range(n)])
    return z, y, g, patients


def test_equal_variances_have_the_closed_form() -> None:
    # With equal v the REML tau² is max(0, sample variance - v) and mu the plain mean (the restricted
    # likelihood's stationary point). theta = [0, 0.2, -0.1, 0.3]: mean 0.1, sample variance
    # (0.01 + 0.01 + 0.04 + 0.04) / 3 = 0.1 / 3; v = 0.01 -> tau² = 0.1/3 - 0.01 = 0.0233...,
    # w = tau² / (tau² + v) = (0.07 / 3) / (0.1 / 3) = 0.7.
    theta, v = np.array([0.0, 0.2, -0.1, 0.3]), np.full(4, 0.01)
    res = shrink_log_temperatures(theta, v)
    assert res.tau2[0] == pytest.approx(0.1 / 3 - 0.01, rel=1e-9)
    assert res.mean[0] == pytest.approx(0.1, rel=1e-12)
    np.testing.assert_allclose(res.weight[0], 0.7, rtol=1e-9)
    np.testing.assert_allclose(res.shrunk[0], 0.1 + 0.7 * (theta - 0.1), rtol=1e-9)


def test_tau2_zero_puts_every_group_at_the_mean() -> None:
    # sample variance 0.01 below v = 1: tau² = 0, every weight 0, every group at mu = mean = 0
    res = shrink_log_temperatures([0.0, 0.1, -0.1], [1.0, 1.0, 1.0])
    assert res.tau2[0] == 0.0 and res.pooled[0]
    np.testing.assert_array_equal(res.weight[0], 0.0)
    np.testing.assert_allclose(res.shrunk[0], 0.0, atol=1e-15)


def test_a_precise_group_keeps_its_own_value_and_infinite_variance_gets_the_mean() -> None:
    res = shrink_log_temperatures([0.5, 0.0, 0.1, -0.1, 3.0], [1e-6, 0.01, 0.01, 0.01, math.inf])
    assert res.weight[0, 0] > 1 - 1e-4 and res.shrunk[0, 0] == pytest.approx(0.5, abs=1e-4)
    assert not res.usable[0, 4] and res.weight[0, 4] == 0.0 and res.shrunk[0, 4] == res.mean[0]
    # the infinite-variance group's value (3.0) does not inform the pooled estimate
    ref = random_effects_meta_analysis([0.5, 0.0, 0.1, -0.1], [1e-6, 0.01, 0.01, 0.01])
    assert res.mean[0] == pytest.approx(ref.estimate, rel=1e-9) and res.tau2[0] == pytest.approx(
        ref.tau2, rel=1e-9
    )


def test_fewer_than_two_usable_groups_are_not_pooled() -> None:
    res = shrink_log_temperatures([[0.1, 0.2], [0.1, 0.2]], [[0.1, math.inf], [0.0, 0.1]])
    assert res.pooled.tolist() == [False, False] and np.isnan(res.shrunk).all()
    with pytest.raises(DataError, match="must have the same shape"):
        shrink_log_temperatures([0.1, 0.2], [0.1])


def test_batched_reml_equals_random_effects_meta_analysis() -> None:
    # the batched REML copies stats._heterogeneity's iteration; stats checks that one against statsmodels
    rng = np.random.default_rng(3)
    theta = rng.normal(0.2, rng.uniform(0.01, 0.5, (60, 1)), (60, 6))
    v = rng.uniform(0.001, 0.2, (60, 6))
    v[::7, 2] = math.inf  # some groups left out
    res = shrink_log_temperatures(theta, v)
    for r in range(theta.shape[0]):  # a loop over test cases
        keep = np.isfinite(v[r])
        ref = random_effects_meta_analysis(theta[r, keep], v[r, keep])
        assert res.tau2[r] == pytest.approx(ref.tau2, rel=1e-8, abs=1e-14)
        assert res.mean[r] == pytest.approx(ref.estimate, rel=1e-10, abs=1e-14)
    assert (res.tau2 == 0).any() and (res.tau2 > 0).any()  # both branches met


def test_sandwich_variance_equals_statsmodels_cluster_robust_logit() -> None:
    # One binary logit z per row is logistic regression of y on z without intercept, beta = 1 / T, so
    # s = -log(beta); at the optimum the sandwich is invariant under the reparametrisation:
    # var(s) = var(beta) / beta². statsmodels' cluster covariance without its small-sample factor is CR0.
    rng = np.random.default_rng(4)
    z, y = _binary(300, 1.6, rng)
    patients = np.repeat(np.arange(100), 3)
    fit = fit_temperature(z, y, tol=1e-13)
    d = _NLL(np.stack([np.zeros_like(z), z], axis=1), y).d
    ours = cluster_robust_variance(d, patients, 100, np.array([fit.log_temperature]))[0]
    sm = Logit(y, z[:, None]).fit(
        disp=0, tol=1e-12, cov_type="cluster", cov_kwds={"groups": patients, "use_correction": False}
    )
    beta = float(sm.params[0])
    assert beta == pytest.approx(1.0 / fit.temperature, rel=1e-8)
    assert ours == pytest.approx(float(sm.cov_params()[0, 0]) / beta**2, rel=1e-6)
    # rows their own clusters: the HC0 sandwich
    hc0 = Logit(y, z[:, None]).fit(disp=0, tol=1e-12, cov_type="HC0")
    ours_rows = cluster_robust_variance(d, np.arange(300), 300, np.array([fit.log_temperature]))[0]
    assert ours_rows == pytest.approx(float(hc0.cov_params()[0, 0]) / beta**2, rel=1e-6)


def test_group_temperatures_follow_the_pooled_formula() -> None:
    z, y, g, patients = _sites(
        {"A": 600, "B": 300, "C": 120, "D": 40}, {"A": 1.2, "B": 2.0, "C": 1.5, "D": 3.0}, 0
    )
    temps = fit_group_temperatures(z, y, g, fallback="empirical_bayes", clusters=patients)
    assert temps.fallback == "empirical_bayes" and temps.tau2 is not None and temps.tau2 > 0
    mu = temps.mean_log_temperature
    assert mu is not None
    s, v = [], []
    for name, entry in temps.groups.items():
        rows = g == name
        own = fit_temperature(z[rows], y[rows])
        assert entry.source == "empirical_bayes" and entry.fit == own and entry.n == rows.sum()
        assert entry.weight is not None and entry.variance is not None
        assert entry.weight == pytest.approx(temps.tau2 / (temps.tau2 + entry.variance), rel=1e-12)
        assert math.log(entry.temperature) == pytest.approx(
            mu + entry.weight * (own.log_temperature - mu), rel=1e-12
        )
        s.append(own.log_temperature)
        v.append(entry.variance)
    ref = random_effects_meta_analysis(s, v)
    assert temps.tau2 == pytest.approx(ref.tau2, rel=1e-8) and mu == pytest.approx(ref.estimate, rel=1e-10)
    weights = [temps.groups[k].weight for k in "ABCD"]
    assert weights == sorted(weights, reverse=True)  # less information, more shrinkage
    assert temps.temperature_for("unseen") == temps.global_fit.temperature  # unseen: the global T


def test_a_huge_group_keeps_its_own_temperature() -> None:
    z, y, g, patients = _sites({"A": 20000, "B": 200, "C": 200}, {"A": 1.3, "B": 2.0, "C": 2.5}, 1)
    temps = fit_group_temperatures(z, y, g, fallback="empirical_bayes", clusters=patients)
    own = temps.groups["A"].fit
    assert own is not None and temps.groups["A"].weight is not None and temps.groups["A"].weight > 0.95
    assert abs(math.log(temps.groups["A"].temperature) - own.log_temperature) < 0.01


def test_continuous_in_group_size_where_the_threshold_jumps() -> None:
    # Add rows one at a time to a group around min_group_size = 100: the thresholded policy jumps when
    # the group reaches 100 rows (penalised fit -> own fit), while the empirical-Bayes log T moves by
    # no more than the group's own fit does when that one row is added (a fraction w_g of it, plus the
    # small change of mu and tau²).
    z, y, g, _ = _sites({"A": 800, "B": 500, "C": 400, "D": 103}, {"A": 1.0, "B": 1.3, "C": 1.6, "D": 2.6}, 2)
    d_rows = np.flatnonzero(g == "D")
    eb, thresholded, own = [], [], []
    for n_d in range(97, 104):  # a loop over the small group's size
        keep = np.ones(g.shape[0], dtype=bool)
        keep[d_rows[n_d:]] = False
        for out, policy in ((eb, "empirical_bayes"), (thresholded, "shrink")):
            temps = fit_group_temperatures(z[keep], y[keep], g[keep], min_group_size=100, fallback=policy)  # type: ignore[arg-type]
            out.append(math.log(temps.groups["D"].temperature))
        own.append(fit_temperature(z[d_rows[:n_d]], y[d_rows[:n_d]]).log_temperature)
    eb_steps, th_steps, own_steps = (np.abs(np.diff(a)) for a in (eb, thresholded, own))
    assert (eb_steps <= own_steps + 1e-3).all()
    assert th_steps[2] > 5 * eb_steps[2] and th_steps[2] > 0.2  # 99 -> 100 rows


def test_degenerate_groups_get_weight_zero() -> None:
    z, y, g, patients = _sites({"A": 400, "B": 300, "C": 60}, {"A": 1.2, "B": 2.0, "C": 1.5}, 5)
    # group E: every prediction right and confident (separable: T on the lower bound)
    # group F: a single patient
    z = np.concatenate([z, np.full(20, 5.0), z[:10]])
    y = np.concatenate([y, np.ones(20, dtype=int), y[:10]])
    g = np.concatenate([g, np.full(20, "E"), np.full(10, "F")])
    patients = np.concatenate([patients, [f"E-{i}" for i in range(20)], np.full(10, "F-0")])
    temps = fit_group_temperatures(z, y, g, fallback="empirical_bayes", clusters=patients)
    mu = temps.mean_log_temperature
    assert mu is not None
    for name in "EF":
        entry = temps.groups[name]
        assert entry.variance == math.inf and entry.weight == 0.0
        assert math.log(entry.temperature) == pytest.approx(mu, rel=1e-12)
    assert "variance" not in temps.groups["E"].to_dict() and temps.groups["E"].to_dict()["weight"] == 0.0
    # the same group F with its rows as their own clusters has a finite variance
    alone = fit_group_temperatures(z, y, g, fallback="empirical_bayes")
    assert math.isfinite(alone.groups["F"].variance or math.inf)


def test_one_group_falls_back_to_the_global_fit() -> None:
    z, y, g, _ = _sites({"A": 300}, {"A": 1.5}, 6)
    temps = fit_group_temperatures(z, y, g, fallback="empirical_bayes")
    assert temps.groups["A"].source == "global_fallback" and temps.groups["A"].fit is None
    assert temps.groups["A"].temperature == temps.global_fit.temperature
    assert temps.mean_log_temperature is None and temps.tau2 is None
    assert "tau2" not in temps.to_dict()


def test_json_round_trip_and_calibration_document_are_exact() -> None:
    z, y, g, patients = _sites({"A": 300, "B": 200, "C": 50}, {"A": 1.2, "B": 2.0, "C": 1.5}, 7)
    z, y, g = (
        np.concatenate([z, np.full(20, 5.0)]),
        np.concatenate([y, np.ones(20, int)]),
        np.concatenate([g, np.full(20, "E")]),
    )
    patients = np.concatenate([patients, [f"E{i}" for i in range(20)]])
    temps = fit_group_temperatures(z, y, g, fallback="empirical_bayes", clusters=patients)
    text = json.dumps(temps.to_dict())
    back = GroupTemperatures.from_dict(json.loads(text))
    assert back == temps and json.dumps(back.to_dict()) == text
    assert back.groups["E"].variance == math.inf  # left out of the file, read back as infinite
    for name, entry in temps.groups.items():
        assert back.groups[name].temperature.hex() == entry.temperature.hex()
        assert (back.groups[name].weight or 0.0).hex() == (entry.weight or 0.0).hex()
    head = {
        "schema_version": 1,
        "method": "temperature",
        "per": "site",
        "class_names": ["n", "y"],
        "model_sha256": None,
    }
    doc = CalibrationDocument.from_dict(json.loads(json.dumps({**head, **temps.to_dict()})))
    assert json.dumps(doc.to_dict()) == json.dumps({**head, **temps.to_dict()})
    # documents of the other policies carry none of the new keys
    plain = fit_group_temperatures(z, y, g, fallback="shrink").to_dict()
    assert {"mean_log_temperature", "tau2"}.isdisjoint(plain) and all(
        "weight" not in e for e in plain["groups"].values()
    )


def test_clusters_are_checked() -> None:
    z, y, g, _ = _sites({"A": 30, "B": 30}, {"A": 1.2, "B": 2.0}, 8)
    with pytest.raises(
        DataError, match=r"The 'clusters' parameter of fit_group_temperatures must have shape \(60,\)"
    ):
        fit_group_temperatures(z, y, g, fallback="empirical_bayes", clusters=np.arange(59))
    with pytest.raises(DataError, match="must hold ids"):
        fit_group_temperatures(z, y, g, fallback="empirical_bayes", clusters=np.linspace(0, 1, 60))
