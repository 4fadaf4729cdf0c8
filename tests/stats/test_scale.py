"""The debiased ECE's interval: the signed squared estimate resampled, recentred, then its square root."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sitecal.errors import DataError, ProtocolError
from sitecal.metrics import debiased_expected_calibration_error, metric_statistic, softmax
from sitecal.metrics._debiased import debiased_squared_from_sums
from sitecal.stats import BootstrapSpec, bootstrap_interval, bootstrap_metrics, refit_bootstrap
from sitecal.stats._scale import on_metric_scale, tables_on_metric_scale


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


def test_tables_recentre_each_cell_on_its_own_estimate() -> None:
    est = np.array([[0.1, 0.2], [0.0025, 0.0004]])  # metrics x sets
    reps = np.array([[[0.1, 0.2], [0.3, 0.4]], [[0.0035, 0.0045], [0.0, 0.0008]]])
    out_est, out_reps = tables_on_metric_scale(["ece", "ece_debiased"], est, reps)
    np.testing.assert_array_equal(out_reps[0], reps[0])
    # cell (1, 0): mean 0.004, shift 0.0015 -> 0.002, 0.003; cell (1, 1): mean 0.0004, shift 0 -> 0, 0.0008
    np.testing.assert_allclose(out_reps[1, 0], np.sqrt([0.002, 0.003]), rtol=1e-12)
    np.testing.assert_allclose(out_reps[1, 1], np.sqrt([0.0, 0.0008]), rtol=1e-12)
    np.testing.assert_allclose(out_est[1], [0.05, 0.02], rtol=1e-12)
    assert est[1, 0] == 0.0025  # the input is left as it was


def test_bootstrap_metrics_interval_is_the_recentred_percentile_of_the_signed_replicates() -> None:
    _, probs, labels = _calibrated(300, 3)
    clusters = np.arange(300) // 2
    spec = BootstrapSpec(n_resamples=400, seed=11)
    signed = metric_statistic("ece_debiased").resampled()
    res = bootstrap_metrics(
        {"p": probs},
        labels,
        clusters=clusters,
        metrics=("ece_debiased",),
        spec=spec,
        extra={"signed": signed},
    )
    got = res.get("ece_debiased", "p")
    assert got.estimate == pytest.approx(debiased_expected_calibration_error(probs, labels), abs=1e-12)
    # the signed values, independently: the estimate from the per-bin sums, the replicates as drawn
    d_hat = float(res.estimates[1, 0])
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(float)
    index = np.clip(np.ceil(conf * 15).astype(int) - 1, 0, 14)
    sums = [np.bincount(index, w, minlength=15)[None, :] for w in (np.ones(300), correct, conf)]
    assert d_hat == pytest.approx(float(debiased_squared_from_sums(*sums)[0]), abs=1e-14)
    d_star = res.replicates[1, 0]
    shifted = np.sqrt(np.maximum(d_star - (d_star.mean() - d_hat), 0.0))
    low, high = np.quantile(shifted, [0.025, 0.975])
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-14)
    # the resamples of a calibrated model centre above the estimate (the plug-in noise term): without the
    # recentring the interval's lower end would sit above the one reported
    assert d_star.mean() > d_hat
    assert math.sqrt(max(float(np.quantile(d_star, 0.025)), 0.0)) > got.low


def test_bootstrap_interval_of_the_metric_statistic_recentres_too() -> None:
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
