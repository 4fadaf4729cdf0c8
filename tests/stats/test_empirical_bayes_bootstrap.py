"""bootstrap_group_temperatures repeats the empirical-Bayes shrinkage in every resample; refit_bootstrap
takes its per-resample temperatures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sitecal.calibration import (
    cluster_robust_variance,
    fit_group_temperatures,
    fit_temperature,
    shrink_log_temperatures,
)
from sitecal.calibration._temperature import _NLL
from sitecal.errors import DataError
from sitecal.stats import (
    BootstrapSpec,
    bootstrap_group_temperatures,
    bootstrap_temperature,
    fit_stream_seed,
    refit_bootstrap,
)
from sitecal.stats._resample import draw_chunks


def _sites(sizes: dict[str, int], t_true: dict[str, float], seed: int) -> tuple[np.ndarray, ...]:
    """One logit per row, labels from sigmoid(z / T_site), two studies a patient."""
    rng = np.random.default_rng(seed)
    z, y, g, p = [], [], [], []
    for site, n in sizes.items():
        zs = rng.normal(size=n) * 3.0
        z.append(zs)
        y.append((rng.random(n) < 1.0 / (1.0 + np.exp(-zs / t_true[site]))).astype(int))
        g += [site] * n
        p += [f"{site}-{i // 2}" for i in range(n)]
    return np.concatenate(z), np.concatenate(y), np.array(g), np.array(p)


SIZES = {"A": 400, "B": 240, "C": 160, "D": 40}
TRUE = {"A": 1.3, "B": 1.8, "C": 1.5, "D": 1.6}


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, ...]:
    return _sites(SIZES, TRUE, 0)


def test_point_estimate_is_fit_group_temperatures(data: tuple[np.ndarray, ...]) -> None:
    z, y, g, p = data
    res = bootstrap_group_temperatures(z, y, g, clusters=p, spec=BootstrapSpec(n_resamples=50, seed=1))
    temps = fit_group_temperatures(z, y, g, fallback="empirical_bayes", clusters=p)
    assert res.temperatures == temps and res.groups == ("A", "B", "C", "D")
    for i, name in enumerate(res.groups):
        assert math.exp(res.log_temperature[i]) == pytest.approx(temps.groups[name].temperature, rel=1e-15)
        assert res.temperature(name).estimate == temps.groups[name].temperature
    assert res.log_temperature_replicates.shape == (4, 50) and res.n_not_pooled == 0


def test_each_resample_repeats_the_whole_shrinkage(data: tuple[np.ndarray, ...]) -> None:
    # Rebuild resamples 0-2 by hand: draw the (group, patient) clusters from the documented stream (each
    # draw a new cluster, so a patient drawn twice is two clusters), fit every group on its drawn rows,
    # its sandwich variance, REML and the shrinkage.
    z, y, g, p = data
    spec = BootstrapSpec(n_resamples=3, seed=11)
    res = bootstrap_group_temperatures(z, y, g, clusters=p, spec=spec)
    (draws,) = draw_chunks(res.plan, seed=fit_stream_seed(11), n_resamples=3, chunk_size=3)
    rows_of_cluster = [np.flatnonzero(res.plan.cluster_of_row == c) for c in range(res.plan.n_clusters)]
    group_of_cluster = [g[r[0]] for r in rows_of_cluster]
    for b in range(3):  # a loop over the rebuilt resamples
        s, v = [], []
        for name in res.groups:  # a loop over groups
            drawn = [int(c) for c, own in zip(draws.indices[b], group_of_cluster, strict=True) if own == name]
            rows = np.concatenate([rows_of_cluster[c] for c in drawn])
            clusters = np.repeat(np.arange(len(drawn)), [rows_of_cluster[c].shape[0] for c in drawn])
            fit = fit_temperature(z[rows], y[rows])
            d = _NLL(np.stack([np.zeros(rows.shape[0]), z[rows]], axis=1), y[rows]).d
            s.append(fit.log_temperature)
            v.append(cluster_robust_variance(d, clusters, len(drawn), np.array([s[-1]]))[0])
        expected = shrink_log_temperatures(s, v)
        np.testing.assert_allclose(
            res.log_temperature_replicates[:, b], expected.shrunk[0], rtol=0, atol=1e-8
        )
        assert res.tau2_replicates[b] == pytest.approx(expected.tau2[0], rel=1e-6, abs=1e-12)
        np.testing.assert_allclose(res.weight_replicates[:, b], expected.weight[0], rtol=1e-6, atol=1e-9)


def test_the_interval_of_a_small_group_lies_between_the_shrunk_spread_and_its_own_fit(
    data: tuple[np.ndarray, ...],
) -> None:
    z, y, g, p = data
    spec = BootstrapSpec(n_resamples=400, seed=3)
    res = bootstrap_group_temperatures(z, y, g, clusters=p, spec=spec)
    eb = res.temperature("D")
    rows = g == "D"
    own = bootstrap_temperature(z[rows], y[rows], clusters=p[rows], spec=spec).temperature
    assert eb.low < eb.estimate < eb.high
    # narrower than the group's own-fit interval (it borrows from the others) ...
    assert (eb.high - eb.low) < own.high - own.low
    # ... and wider than the plain spread of the shrunk estimate, which leaves out the shrinkage bias
    shrunk = np.quantile(np.exp(res.log_temperature_replicates[3]), [0.025, 0.975])
    assert (eb.high - eb.low) > 1.2 * (shrunk[1] - shrunk[0])
    # the shrinkage varies between resamples: tau² is re-estimated, not held at the point value
    assert np.ptp(res.tau2_replicates) > 0 and np.ptp(res.mean_replicates) > 0


def test_interval_replicates_add_the_spread_of_the_shrinkage_bias(data: tuple[np.ndarray, ...]) -> None:
    # s*_{g,b} + (1 - w_{g,b}) tau_b eps_{g,b}, eps from the documented stream of its own
    z, y, g, p = data
    spec = BootstrapSpec(n_resamples=50, seed=8)
    res = bootstrap_group_temperatures(z, y, g, clusters=p, spec=spec)
    eps = np.random.default_rng(np.random.SeedSequence(8).spawn(2)[1]).standard_normal((4, 50))
    expected = (
        res.log_temperature_replicates + (1 - res.weight_replicates) * np.sqrt(res.tau2_replicates) * eps
    )
    np.testing.assert_allclose(res.interval_replicates, expected, rtol=0, atol=1e-15)
    assert np.all((res.weight_replicates >= 0) & (res.weight_replicates <= 1))
    # the printed interval is the percentile interval of exp(interval_replicates)
    for i, name in enumerate(res.groups):  # a loop over groups
        t = res.temperature(name)
        low, high = np.quantile(np.exp(res.interval_replicates[i]), [0.025, 0.975])
        assert (t.low, t.high) == pytest.approx((low, high), rel=1e-14)
        assert t.estimate == pytest.approx(math.exp(res.log_temperature[i]), rel=1e-15)
    # deterministic given the seed
    again = bootstrap_group_temperatures(z, y, g, clusters=p, spec=BootstrapSpec(n_resamples=50, seed=8))
    np.testing.assert_array_equal(again.interval_replicates, res.interval_replicates)


def test_deterministic_and_chunk_free(data: tuple[np.ndarray, ...]) -> None:
    z, y, g, p = data
    one = bootstrap_group_temperatures(z, y, g, clusters=p, spec=BootstrapSpec(n_resamples=60, seed=5))
    again = bootstrap_group_temperatures(z, y, g, clusters=p, spec=BootstrapSpec(n_resamples=60, seed=5))
    chunked = bootstrap_group_temperatures(
        z, y, g, clusters=p, spec=BootstrapSpec(n_resamples=60, seed=5, chunk_size=7)
    )
    np.testing.assert_array_equal(one.log_temperature_replicates, again.log_temperature_replicates)
    np.testing.assert_array_equal(one.log_temperature_replicates, chunked.log_temperature_replicates)
    # the order of the rows does not matter (the plan sorts groups and patients)
    order = np.random.default_rng(0).permutation(z.shape[0])
    shuffled = bootstrap_group_temperatures(
        z[order], y[order], g[order], clusters=p[order], spec=BootstrapSpec(n_resamples=60, seed=5)
    )
    np.testing.assert_allclose(shuffled.log_temperature_replicates, one.log_temperature_replicates, atol=1e-9)
    other = bootstrap_group_temperatures(z, y, g, clusters=p, spec=BootstrapSpec(n_resamples=60, seed=6))
    assert not np.array_equal(other.log_temperature_replicates, one.log_temperature_replicates)


def test_bca_jackknife_repeats_the_shrinkage_per_deleted_patient(data: tuple[np.ndarray, ...]) -> None:
    z, y, g, p = data
    res = bootstrap_group_temperatures(z, y, g, clusters=p, spec=BootstrapSpec(n_resamples=200, method="bca"))
    jk = res.log_temperature_jackknife
    assert jk is not None and jk.shape == (4, res.plan.n_clusters)
    # deleting the first patient of group D (cluster numbering: groups in order, patients sorted)
    first_d = res.plan.n_clusters - res.group_clusters[3]
    left = p != np.unique(p[g == "D"])[0]
    again = fit_group_temperatures(z[left], y[left], g[left], fallback="empirical_bayes", clusters=p[left])
    expected = [math.log(again.groups[name].temperature) for name in res.groups]
    np.testing.assert_allclose(jk[:, first_d], expected, atol=1e-8)
    t = res.temperature("D")
    assert t.low < t.estimate < t.high


def test_needs_two_groups() -> None:
    z, y, g, p = _sites({"A": 100}, {"A": 1.5}, 1)
    with pytest.raises(DataError, match="at least two groups"):
        bootstrap_group_temperatures(z, y, g, clusters=p)


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_refit_bootstrap_with_its_own_temperatures_given_is_unchanged(method: str) -> None:
    z, y, g, p = _sites({"A": 300, "B": 200}, {"A": 1.6, "B": 1.6}, 2)
    fit, held = g == "A", g == "B"
    spec = BootstrapSpec(n_resamples=120, seed=4, method=method)
    kwargs = {"fit_clusters": p[fit], "eval_clusters": p[held], "metrics": ("ece", "nll"), "spec": spec}
    own = refit_bootstrap(z[fit], y[fit], z[held], y[held], **kwargs)  # type: ignore[arg-type]
    given = refit_bootstrap(
        z[fit],
        y[fit],
        z[held],
        y[held],
        log_temperature=own.fit.log_temperature,
        log_temperature_replicates=own.log_temperature_replicates,
        log_temperature_jackknife=own.log_temperature_jackknife,
        **kwargs,  # type: ignore[arg-type]
    )
    np.testing.assert_array_equal(given.replicates, own.replicates)
    np.testing.assert_array_equal(given.estimates, own.estimates)
    assert given.fit == own.fit and given.temperature.estimate == own.temperature.estimate
    for metric in ("ece", "nll"):
        assert given.get(metric, "after").to_dict() == own.get(metric, "after").to_dict()
    if method == "bca":
        assert given.jackknife is not None and own.jackknife is not None
        np.testing.assert_array_equal(given.jackknife, own.jackknife)


def test_refit_bootstrap_applies_the_given_temperatures() -> None:
    z, y, g, _ = _sites({"A": 300, "B": 200}, {"A": 1.6, "B": 1.6}, 3)
    fit, held = g == "A", g == "B"
    spec = BootstrapSpec(n_resamples=60, seed=4)
    s = np.full(60, math.log(2.0))
    res = refit_bootstrap(
        z[fit],
        y[fit],
        z[held],
        y[held],
        fit_clusters=None,
        eval_clusters=None,
        metrics=("nll",),
        spec=spec,
        log_temperature=math.log(2.0),
        log_temperature_replicates=s,
    )
    # T fixed at 2 in every resample: the after-intervals are those of the fixed-T probabilities
    assert res.temperature.estimate == pytest.approx(2.0) and res.temperature.low == pytest.approx(2.0)
    with pytest.raises(DataError, match="go together"):
        refit_bootstrap(
            z[fit],
            y[fit],
            z[held],
            y[held],
            fit_clusters=None,
            eval_clusters=None,
            spec=spec,
            log_temperature=0.0,
        )
    with pytest.raises(DataError, match=r"shape \(60,\)"):
        refit_bootstrap(
            z[fit],
            y[fit],
            z[held],
            y[held],
            fit_clusters=None,
            eval_clusters=None,
            spec=spec,
            log_temperature=0.0,
            log_temperature_replicates=s[:5],
        )
    with pytest.raises(
        DataError, match="'log_temperature_jackknife' parameter of refit_bootstrap is required"
    ):
        refit_bootstrap(
            z[fit],
            y[fit],
            z[held],
            y[held],
            fit_clusters=None,
            eval_clusters=None,
            metrics=("nll",),
            spec=BootstrapSpec(n_resamples=60, method="bca"),
            log_temperature=0.0,
            log_temperature_replicates=s,
        )
