from __future__ import annotations

import math

import numpy as np
import pytest

import sitecal.calibration._batched as batched
from sitecal.calibration import fit_temperature
from sitecal.errors import DataError
from sitecal.metrics import (
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
    smooth_ece,
    softmax,
)
from sitecal.stats import (
    BootstrapSpec,
    bootstrap_metrics,
    bootstrap_temperature,
    fit_stream_seed,
    refit_bootstrap,
)
from sitecal.stats._resample import make_plan, weight_chunks


def _overconfident(n: int, c: int, t_true: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits whose labels come from softmax(z / t_true): the optimum T is far from 1."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * 3.0
    z[np.arange(n), rng.integers(0, c, n)] += 4.0
    p = softmax(z, temperature=t_true)
    y = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return z, y


def _weights(n: int, clusters: np.ndarray | None, strata: np.ndarray | None, seed: int, b: int) -> np.ndarray:
    plan = make_plan(n, clusters, strata, func="test")
    (w,) = list(weight_chunks(plan, seed=seed, n_resamples=b, chunk_size=b))
    return w[:, plan.cluster_of_row].astype(int)  # row multiplicities


def test_hand_checkable_binary_closed_form_and_bounds() -> None:
    # Binary rows with logit gap 2 towards the predicted class: a row is correct (d = [0, -2]) or wrong
    # (d = [0, 2]). With c correct and w wrong rows, sigmoid(2 / T) = c / (c + w), so T = 2 / ln(c / w)
    # (the fit_temperature docstring's 1.8205 = 2 / ln 3 for c = 3, w = 1); w = 0 is separable (lower
    # bound 0.05); c <= w has no optimum with T > 0 below the upper bound 100.
    correct = np.array([1, 1, 1, 1, 1, 1, 1, 0, 0, 0])
    z = np.tile([2.0, 0.0], (10, 1))
    y = np.where(correct == 1, 0, 1)
    spec = BootstrapSpec(n_resamples=300, seed=5)
    res = bootstrap_temperature(z, y, clusters=None, spec=spec)
    assert res.temperature.estimate == pytest.approx(2.0 / math.log(7 / 3), rel=1e-9)
    rows = _weights(10, None, None, fit_stream_seed(5), 300)
    c = rows @ correct
    w = rows.sum(axis=1) - c
    interior = (w > 0) & (c > w)
    expected = np.where(w == 0, 0.05, 100.0)
    expected[interior] = 2.0 / np.log(c[interior] / w[interior])
    got = np.exp(res.log_temperature_replicates)
    np.testing.assert_allclose(got, expected, rtol=1e-8)
    assert res.n_at_bound == int(np.count_nonzero((w == 0) | (c <= w))) > 0


@pytest.mark.parametrize(
    ("n", "c", "t_true", "cluster_size"),
    [(3000, 10, 2.5, 1), (2000, 10, 0.4, 3), (1500, 2, 1.7, 2)],
)
def test_each_temperature_equals_its_own_single_fit(n: int, c: int, t_true: float, cluster_size: int) -> None:
    z, y = _overconfident(n, c, t_true, seed=n)
    clusters = np.arange(n) // cluster_size
    strata = (clusters % 2).astype(str)
    spec = BootstrapSpec(n_resamples=40, seed=2)
    res = bootstrap_temperature(z, y, clusters=clusters, strata=strata, spec=spec)
    assert res.fit.temperature == fit_temperature(z, y).temperature
    rows = _weights(n, clusters, strata, fit_stream_seed(2), 40)
    for b in range(0, 40, 8):  # several resamples, refitted one by one on repeated rows
        idx = np.repeat(np.arange(n), rows[b])
        single = fit_temperature(z[idx], y[idx])
        assert math.exp(res.log_temperature_replicates[b]) == pytest.approx(single.temperature, rel=1e-6)
    assert res.max_error_bound <= 1e-9


def test_exact_fallback_agrees_with_surrogate(monkeypatch: pytest.MonkeyPatch) -> None:
    z, y = _overconfident(1200, 10, 3.0, seed=9)
    spec = BootstrapSpec(n_resamples=30, seed=4, method="bca")
    fast = bootstrap_temperature(z, y, clusters=None, spec=spec)
    monkeypatch.setattr(batched, "CERTIFIED_S_ERROR", -1.0)  # refuse every surrogate solution
    slow = bootstrap_temperature(z, y, clusters=None, spec=spec)
    assert fast.n_exact == 0 and slow.n_exact == 30
    np.testing.assert_allclose(
        fast.log_temperature_replicates, slow.log_temperature_replicates, rtol=0, atol=1e-9
    )
    assert fast.log_temperature_jackknife is not None and slow.log_temperature_jackknife is not None
    np.testing.assert_allclose(fast.log_temperature_jackknife, slow.log_temperature_jackknife, atol=1e-9)
    # a leave-one-out value against its own fit
    keep = np.arange(1200) != 17
    assert math.exp(fast.log_temperature_jackknife[17]) == pytest.approx(
        fit_temperature(z[keep], y[keep]).temperature, rel=1e-8
    )


def _split_data() -> dict[str, np.ndarray]:
    z, y = _overconfident(1600, 5, 2.0, seed=3)
    patients = np.arange(1600) // 2
    return {
        "zf": z[:800],
        "yf": y[:800],
        "cf": patients[:800],
        "ze": z[800:],
        "ye": y[800:],
        "ce": patients[800:],
    }


# BCa is refused for the debiased ECE (sitecal.stats._scale): the BCa tests measure the other metrics
_BCA_METRICS = ("ece", "nll", "brier", "accuracy")


def _refit(d: dict[str, np.ndarray], spec: BootstrapSpec) -> object:
    metrics = _BCA_METRICS if spec.method == "bca" else ("ece", "ece_debiased", "nll", "brier", "accuracy")
    return refit_bootstrap(
        d["zf"],
        d["yf"],
        d["ze"],
        d["ye"],
        fit_clusters=d["cf"],
        eval_clusters=d["ce"],
        spec=spec,
        metrics=metrics,
    )


def test_after_metrics_equal_direct_computation_on_reconstructed_resamples() -> None:
    d = _split_data()
    spec = BootstrapSpec(n_resamples=12, seed=8)
    res = refit_bootstrap(
        d["zf"], d["yf"], d["ze"], d["ye"], fit_clusters=d["cf"], eval_clusters=d["ce"], spec=spec
    )
    t0 = fit_temperature(d["zf"], d["yf"]).temperature
    after0 = softmax(d["ze"], temperature=t0)
    assert res.get("ece", "after").estimate == pytest.approx(
        expected_calibration_error(after0, d["ye"]), abs=1e-12
    )
    fit_rows = _weights(800, d["cf"], None, fit_stream_seed(8), 12)
    eval_rows = _weights(800, d["ce"], None, 8, 12)
    for b in (0, 5, 11):
        fi = np.repeat(np.arange(800), fit_rows[b])
        ei = np.repeat(np.arange(800), eval_rows[b])
        t_b = fit_temperature(d["zf"][fi], d["yf"][fi]).temperature
        assert math.exp(res.log_temperature_replicates[b]) == pytest.approx(t_b, rel=1e-6)
        p = softmax(d["ze"][ei], temperature=t_b)
        direct = {
            "ece": expected_calibration_error(p, d["ye"][ei]),
            "nll": negative_log_likelihood(p, d["ye"][ei]),
            "brier": brier_score(p, d["ye"][ei]),
        }
        for m, value in direct.items():
            assert res.replicates[res.metrics.index(m), 1, b] == pytest.approx(value, abs=1e-9)
    # accuracy does not depend on T > 0: after and before replicates are identical
    i = res.metrics.index("accuracy")
    np.testing.assert_array_equal(res.replicates[i, 0], res.replicates[i, 1])


def test_smooth_ece_is_refitted_with_each_resamples_temperature() -> None:
    # not a sum of per-row terms: evaluated from each resample's own probabilities (its own T_b)
    z, y = _overconfident(160, 3, 2.0, seed=12)
    fit, ev = slice(0, 80), slice(80, 160)
    spec = BootstrapSpec(n_resamples=20, seed=4, chunk_size=6)
    res = refit_bootstrap(
        z[fit],
        y[fit],
        z[ev],
        y[ev],
        fit_clusters=None,
        eval_clusters=None,
        metrics=("smooth_ece",),
        spec=spec,
    )
    fit_rows = _weights(80, None, None, fit_stream_seed(4), 20)
    eval_rows = _weights(80, None, None, 4, 20)
    for b in (0, 13):
        fi, ei = np.repeat(np.arange(80), fit_rows[b]), np.repeat(np.arange(80), eval_rows[b])
        t_b = fit_temperature(z[fit][fi], y[fit][fi]).temperature
        direct = smooth_ece(softmax(z[ev][ei], temperature=t_b), y[ev][ei])
        assert res.replicates[0, 1, b] == pytest.approx(direct, abs=1e-5)  # the binned form's accuracy
    whole = refit_bootstrap(
        z[fit],
        y[fit],
        z[ev],
        y[ev],
        fit_clusters=None,
        eval_clusters=None,
        metrics=("smooth_ece",),
        spec=BootstrapSpec(n_resamples=20, seed=4, chunk_size=20, method="bca"),
    )
    np.testing.assert_array_equal(res.replicates, whole.replicates)  # whatever the chunk size
    # BCa: leave-one-cluster-out values of a non-sum form, from row weights
    assert whole.jackknife is not None and np.isfinite(whole.jackknife).all()


def test_before_replicates_are_bootstrap_metrics_on_the_eval_split() -> None:
    d = _split_data()
    spec = BootstrapSpec(n_resamples=50, seed=1)
    res = _refit(d, spec)
    plain = bootstrap_metrics({"before": softmax(d["ze"])}, d["ye"], clusters=d["ce"], spec=spec)
    np.testing.assert_array_equal(res.replicates[:, 0], plain.replicates[:, 0])  # type: ignore[attr-defined]


def test_bit_for_bit_whatever_the_chunk_size() -> None:
    d = _split_data()
    one = _refit(d, BootstrapSpec(n_resamples=45, seed=3, chunk_size=7))
    other = _refit(d, BootstrapSpec(n_resamples=45, seed=3, chunk_size=45))
    np.testing.assert_array_equal(one.replicates, other.replicates)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(one.log_temperature_replicates, other.log_temperature_replicates)  # type: ignore[attr-defined]
    a, b = one.to_dict(), other.to_dict()  # type: ignore[attr-defined]
    a["spec"].pop("chunk_size"), b["spec"].pop("chunk_size")
    assert a == b


def test_result_object_and_bca() -> None:
    d = _split_data()
    res = _refit(d, BootstrapSpec(n_resamples=200, seed=0, method="bca"))
    t = res.temperature  # type: ignore[attr-defined]
    assert t.low < t.estimate < t.high and t.n == 800 and t.n_clusters == 400
    lt = res.log_temperature  # type: ignore[attr-defined]
    assert lt.estimate == pytest.approx(math.log(t.estimate))
    diff = res.difference("nll", "after", "before")  # type: ignore[attr-defined]
    assert diff.estimate == pytest.approx(
        res.get("nll", "after").estimate - res.get("nll", "before").estimate  # type: ignore[attr-defined]
    )
    assert math.isfinite(diff.low) and diff.low <= diff.high
    out = res.to_dict()  # type: ignore[attr-defined]
    assert set(out["intervals"]) == set(_BCA_METRICS)
    assert out["splits"]["eval"] == {"n": 800, "n_clusters": 400, "n_strata": 1}
    same_t = bootstrap_temperature(
        d["zf"], d["yf"], clusters=d["cf"], spec=BootstrapSpec(n_resamples=200, seed=0, method="bca")
    )
    assert same_t.temperature == t


def test_errors() -> None:
    d = _split_data()
    with pytest.raises(DataError, match="recomputes its bins per resample"):
        refit_bootstrap(
            d["zf"], d["yf"], d["ze"], d["ye"], fit_clusters=None, eval_clusters=None, metrics=("ece_mass",)
        )
    with pytest.raises(DataError, match="as many classes as 'fit_logits'"):
        refit_bootstrap(d["zf"], d["yf"], d["ze"][:, :3], d["ye"] % 3, fit_clusters=None, eval_clusters=None)
    with pytest.raises(DataError, match="The 'metrics' parameter of refit_bootstrap must be one of"):
        refit_bootstrap(
            d["zf"], d["yf"], d["ze"], d["ye"], fit_clusters=None, eval_clusters=None, metrics=("eec",)
        )


def test_bca_influence_values_carry_each_splits_own_one_over_n() -> None:
    # Efron & Tibshirani 14.3 for two samples, as scipy.stats.bootstrap computes it: each sample's influence
    # values U = (K - 1)(mean - theta_(k)) enter the acceleration divided by that sample's own K. Rebuilt
    # here from leave-one-cluster-out values computed directly, with unequal cluster counts in the splits.
    zf, yf = _overconfident(60, 3, 2.0, seed=1)
    ze, ye = _overconfident(90, 3, 2.0, seed=2)
    res = refit_bootstrap(
        zf,
        yf,
        ze,
        ye,
        fit_clusters=None,
        eval_clusters=None,
        metrics=("nll",),
        spec=BootstrapSpec(n_resamples=50, seed=0, method="bca"),
    )
    jack = res.jackknife
    assert jack is not None and jack.shape == (1, 2, 90 + 60)
    before = softmax(ze)
    loo = np.array([negative_log_likelihood(np.delete(before, k, 0), np.delete(ye, k)) for k in range(90)])
    # centred as the interval code centres them (mean - value) after the scaling
    u_eval = 89 * (loo - loo.mean()) / 90
    np.testing.assert_allclose(jack[0, 0, :90], u_eval, rtol=1e-9, atol=1e-12)
    assert np.all(jack[0, 0, 90:] == 0.0)  # the model's own probabilities do not depend on the fit split
    s_loo = np.array(
        [math.log(fit_temperature(np.delete(zf, k, 0), np.delete(yf, k)).temperature) for k in range(60)]
    )
    ds = 59 * (s_loo - s_loo.mean()) / 60
    ratio = jack[0, 1, 90:] / ds  # the fit part: d(metric)/d(log T) times the scaled change of log T
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-6)
    a_hat = float(np.sum((-jack[0, 1]) ** 3) / (6.0 * np.sum(jack[0, 1] ** 2) ** 1.5))
    assert math.isfinite(a_hat) and abs(a_hat) < 1.0
