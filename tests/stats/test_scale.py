"""The debiased ECE's interval: the signed squared estimate resampled, studentised, then its square root."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sitecal.errors import DataError, ProtocolError
from sitecal.metrics import debiased_expected_calibration_error, metric_statistic, softmax
from sitecal.metrics._debiased import (
    debiased_squared_from_sums,
    debiased_squared_se_from_sums,
    plugin_squared_from_sums,
)
from sitecal.stats import BootstrapSpec, bootstrap_interval, bootstrap_metrics, refit_bootstrap
from sitecal.stats._scale import Studentised, engine_rows, on_metric_scale


def _calibrated(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 1.6, size=(n, 3))
    probs = softmax(logits)
    labels = (rng.random(n)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
    return logits, probs, labels


def test_on_metric_scale_by_hand() -> None:
    # estimate D = -0.0004 (clamped: 0); replicates 0.001, 0.003, 0.005 have mean 0.003, so they are shifted
    # down by 0.003 - (-0.0004) = 0.0034 to -0.0024, -0.0004, 0.0016, whose sqrt(max(., 0)) are 0, 0, 0.04
    est, reps = on_metric_scale("ece_debiased", -0.0004, np.array([0.001, 0.003, 0.005]))
    assert est == 0.0
    np.testing.assert_allclose(reps, [0.0, 0.0, 0.04], atol=1e-12)
    # another metric passes through untouched
    same = np.array([0.2, 0.3])
    assert on_metric_scale("ece", 0.25, same)[1] is same
    # a non-finite replicate stays so (the interval is then undefined, as for every metric)
    _, with_nan = on_metric_scale("ece_debiased", 0.01, np.array([0.01, np.nan, 0.02]))
    assert np.isnan(with_nan[1]) and np.isfinite(with_nan[[0, 2]]).all()


def test_studentised_replicates_by_hand_and_the_fallback() -> None:
    # D = 0.0016, se = 0.002, plug-in 0.003; replicates 0.001, 0.003, 0.005 with se* 0.001, 0.002, 0.004:
    # pivots (D* - plug) / se* = -2, 0, 0.5, so D - se t* = 0.0056, 0.0016, 0.0006, then sqrt
    t = Studentised(se=0.002, se_replicates=np.array([0.001, 0.002, 0.004]), plug=0.003)
    est, reps = on_metric_scale("ece_debiased", 0.0016, np.array([0.001, 0.003, 0.005]), t)
    assert est == pytest.approx(0.04, abs=1e-15)
    np.testing.assert_allclose(reps, np.sqrt([0.0056, 0.0016, 0.0006]), rtol=1e-12)
    # a resample without a positive standard error: the cell keeps the recentred replicates
    zero = Studentised(se=0.002, se_replicates=np.array([0.001, 0.0, 0.004]), plug=0.003)
    _, fallback = on_metric_scale("ece_debiased", 0.0016, np.array([0.001, 0.003, 0.005]), zero)
    # mean 0.003, shift 0.0014 -> -0.0004, 0.0016, 0.0036
    np.testing.assert_allclose(fallback, np.sqrt([0.0, 0.0016, 0.0036]), rtol=1e-12)


def test_engine_rows_use_the_companions_and_drop_them() -> None:
    ece, debiased = metric_statistic("ece"), metric_statistic("ece_debiased").resampled()
    rows = engine_rows(["ece", "ece_debiased"], [ece, debiased])
    assert [s.part for s in rows.statistics[1:]] == ["signed", "se", "plug"]
    assert rows.companions == {"ece_debiased": (2, 3)}
    # metrics x sets, then resamples: the debiased row's two cells each studentised by their own companions
    est = np.array([[0.1, 0.2], [0.0016, 0.0025], [0.002, 0.001], [0.003, 0.004]])
    reps = np.array(
        [
            [[0.1, 0.2], [0.3, 0.4]],
            [[0.001, 0.005], [0.004, 0.005]],
            [[0.001, 0.004], [0.001, 0.002]],
            [[0.0, 0.0], [0.0, 0.0]],
        ]
    )
    out_est, out_reps = rows.on_metric_scale(est, reps)
    assert out_est.shape == (2, 2) and out_reps.shape == (2, 2, 2)
    np.testing.assert_array_equal(out_reps[0], reps[0])
    # cell (1, 0): pivots (0.001 - 0.003) / 0.001 = -2 and (0.005 - 0.003) / 0.004 = 0.5
    np.testing.assert_allclose(out_reps[1, 0], np.sqrt([0.0016 + 0.004, 0.0016 - 0.001]), rtol=1e-12)
    # cell (1, 1): pivots 0 and 0.5, se 0.001
    np.testing.assert_allclose(out_reps[1, 1], np.sqrt([0.0025, 0.0025 - 0.0005]), rtol=1e-12)
    np.testing.assert_allclose(out_est[1], [0.04, 0.05], rtol=1e-12)
    # the same along another axis (sets x metrics, as the paired arms hold them)
    swapped_est, swapped_reps = rows.on_metric_scale(est.T, reps.transpose(1, 0, 2), axis=1)
    np.testing.assert_array_equal(swapped_reps, out_reps.transpose(1, 0, 2))
    np.testing.assert_array_equal(swapped_est, out_est.T)
    assert est[1, 0] == 0.0016  # the input is left as it was
    # no companions for other metrics
    assert engine_rows(["ece"], [ece]).statistics == (ece,)


def _bin_sums(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> list[np.ndarray]:
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(float)
    index = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    return [np.bincount(index, w, minlength=n_bins)[None, :] for w in (np.ones(len(labels)), correct, conf)]


def test_the_standard_error_matches_the_spread_of_the_estimate() -> None:
    # 400 samples of 300 per model: the mean standard error against the standard deviation of the debiased
    # estimate across samples (itself known to about 4 %). Miscalibrated (T = 1.6, 2.55): within 10 %. A
    # calibrated model: 10-35 % above it, as documented (max(D, 0) > 0 in half the samples adds a first
    # term whose true value is 0); the bootstrap-t only studentises by it, the pivot's quantiles set the scale
    ratios = {}
    for t in (1.0, 1.6, 2.55):
        values, errors = [], []
        for seed in range(400):  # a loop over samples
            rng = np.random.default_rng(1000 + seed)
            logits = rng.normal(0.0, 1.6, size=(300, 3))
            labels = (rng.random(300)[:, None] > np.cumsum(softmax(logits), axis=1)).sum(axis=1)
            sums = _bin_sums(softmax(t * logits), labels)
            values.append(float(debiased_squared_from_sums(*sums)[0]))
            errors.append(float(debiased_squared_se_from_sums(*sums)[0]))
        ratios[t] = float(np.mean(errors) / np.std(values, ddof=1))
    assert ratios[1.6] == pytest.approx(1.0, abs=0.1) and ratios[2.55] == pytest.approx(1.0, abs=0.1)
    assert 1.1 < ratios[1.0] < 1.35


def test_bootstrap_metrics_interval_is_the_studentised_percentile_of_the_signed_replicates() -> None:
    _, probs, labels = _calibrated(300, 3)
    clusters = np.arange(300) // 2
    spec = BootstrapSpec(n_resamples=400, seed=11)
    signed = metric_statistic("ece_debiased").resampled()
    se_stat, plug_stat = signed.companions()
    res = bootstrap_metrics(
        {"p": probs},
        labels,
        clusters=clusters,
        metrics=("ece_debiased",),
        spec=spec,
        extra={"signed": signed, "se": se_stat, "plug": plug_stat},
    )
    got = res.get("ece_debiased", "p")
    assert got.estimate == pytest.approx(debiased_expected_calibration_error(probs, labels), abs=1e-14)
    # the signed value, its standard error and the plug-in value, independently from the per-bin sums
    sums = _bin_sums(probs, labels)
    d_hat, se_hat, plug = (float(res.estimates[i, 0]) for i in (1, 2, 3))
    assert d_hat == pytest.approx(float(debiased_squared_from_sums(*sums)[0]), abs=1e-14)
    assert se_hat == pytest.approx(float(debiased_squared_se_from_sums(*sums)[0]), abs=1e-14)
    count, correct, confidence = (x[0] for x in sums)
    filled = count > 0
    by_hand = float(((correct - confidence)[filled] ** 2 / count[filled]).sum() / 300)
    assert plug == pytest.approx(by_hand, abs=1e-14)
    assert float(plugin_squared_from_sums(*sums)[0]) == pytest.approx(by_hand, abs=1e-14)
    # the interval: the percentile interval of D - se (D* - plug) / se*, on the root scale
    d_star, se_star = res.replicates[1, 0], res.replicates[2, 0]
    pseudo = np.sqrt(np.maximum(d_hat - se_hat * (d_star - plug) / se_star, 0.0))
    low, high = np.quantile(pseudo, [0.025, 0.975])
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-14)
    # the resamples of a calibrated model centre above the estimate (the plug-in noise term): the raw
    # percentile interval's lower end would sit above the one reported
    assert d_star.mean() > d_hat
    assert math.sqrt(max(float(np.quantile(d_star, 0.025)), 0.0)) > got.low


def test_bootstrap_interval_of_the_metric_statistic_is_studentised_too() -> None:
    _, probs, labels = _calibrated(200, 4)
    one = bootstrap_interval(metric_statistic("ece_debiased"), (probs, labels), n_resamples=300, seed=2)
    many = bootstrap_metrics(
        {"p": probs},
        labels,
        clusters=None,
        metrics=("ece_debiased",),
        spec=BootstrapSpec(n_resamples=300, seed=2),
    ).get("ece_debiased", "p")
    assert (one.estimate, one.low, one.high) == (many.estimate, many.low, many.high)


def test_bca_is_refused_for_the_debiased_ece_everywhere() -> None:
    logits, probs, labels = _calibrated(120, 5)
    bca = BootstrapSpec(n_resamples=60, method="bca")
    with pytest.raises(
        DataError, match=r"BCa interval is not valid for ece_debiased \(in bootstrap_metrics\)"
    ):
        bootstrap_metrics({"p": probs}, labels, clusters=None, metrics=("ece_debiased",), spec=bca)
    with pytest.raises(DataError, match=r"not valid for ece_debiased \(in refit_bootstrap\)"):
        refit_bootstrap(
            logits[:60],
            labels[:60],
            logits[60:],
            labels[60:],
            fit_clusters=None,
            eval_clusters=None,
            spec=bca,
        )
    with pytest.raises(DataError, match=r"not valid for ece_debiased \(in bootstrap_interval\)"):
        bootstrap_interval(metric_statistic("ece_debiased"), (probs, labels), n_resamples=60, method="bca")


def test_the_protocol_refuses_bca_with_the_debiased_ece_and_its_gaps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from sitecal.demo import demo_protocol_path
    from sitecal.protocol import load_protocol

    text = demo_protocol_path().read_text(encoding="utf-8")
    bca = tmp_path / "bca.yaml"
    bca.write_text(text.replace("method: percentile", "method: bca").replace("refit: true", "refit: false"))
    with pytest.raises(ProtocolError, match="method bca is not valid for ece_debiased"):
        load_protocol(bca)
    gaps = tmp_path / "gaps.yaml"
    demo_line = "disparity_metrics: [ece, calibration_gap, nll]"
    gaps.write_text(text.replace(demo_line, "disparity_metrics: [ece_debiased]"))
    with pytest.raises(ProtocolError, match="'ece_debiased' cannot be compared between groups"):
        load_protocol(gaps)


def test_refit_sums_shared_by_the_companions_give_what_each_alone_gives() -> None:
    from sitecal.stats._term_sums import metrics_at_temperatures

    logits, _, labels = _calibrated(150, 6)
    signed = metric_statistic("ece_debiased").resampled()
    together = [metric_statistic("nll"), signed, *signed.companions()]
    rng = np.random.default_rng(0)
    weights = rng.multinomial(150, np.full(150, 1 / 150), size=40).astype(float)
    s = rng.normal(0.0, 0.2, size=40)
    for temperatures in (s, None):  # refitted in every resample, and T = 1 throughout
        shared = metrics_at_temperatures(together, logits, labels, temperatures, weights)
        alone = np.vstack(
            [metrics_at_temperatures([st], logits, labels, temperatures, weights) for st in together]
        )
        np.testing.assert_array_equal(shared, alone)
        assert np.all(shared[2] > 0) and not np.array_equal(shared[1], shared[3])
