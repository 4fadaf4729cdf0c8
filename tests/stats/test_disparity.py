from __future__ import annotations

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.metrics import accuracy, expected_calibration_error, negative_log_likelihood
from sitecal.stats import BootstrapSpec, disparity_intervals
from sitecal.stats._resample import make_plan, weight_chunks


def _data(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    groups = np.array(["a", "b", "c"])[rng.integers(0, 3, n)]
    patients = np.array([f"p{i // 2}" for i in range(n)])
    groups = groups[np.arange(n) // 2 * 2]  # both studies of a patient in one group
    logits = rng.normal(size=(n, 3)) * np.where(groups == "c", 4.0, 1.5)[:, None]
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = np.array(
        [rng.choice(3, p=row) for row in np.exp(logits / 2) / np.exp(logits / 2).sum(1, keepdims=True)]
    )
    return probs, labels, groups, patients


def test_point_estimates_are_the_metrics_of_each_group() -> None:
    probs, labels, groups, patients = _data()
    res = disparity_intervals(
        probs, labels, groups, clusters=patients, strata=groups, spec=BootstrapSpec(n_resamples=100)
    )
    direct = {g: expected_calibration_error(probs[groups == g], labels[groups == g]) for g in "abc"}
    for g in "abc":
        assert res.per_group[g].estimate == pytest.approx(direct[g], abs=1e-12)
        rest = expected_calibration_error(probs[groups != g], labels[groups != g])
        assert res.versus_rest[g].estimate == pytest.approx(direct[g] - rest, abs=1e-12)
    assert res.range.estimate == pytest.approx(max(direct.values()) - min(direct.values()), abs=1e-12)
    assert res.highest == max(direct, key=direct.get) and res.lowest == min(direct, key=direct.get)


def test_replicates_equal_direct_metrics_on_the_same_resamples() -> None:
    probs, labels, groups, patients = _data(n=300, seed=1)
    spec = BootstrapSpec(n_resamples=5, seed=11)
    res = disparity_intervals(
        probs, labels, groups, clusters=patients, strata=groups, metric="nll", spec=spec
    )
    # rebuild the same resamples from the same seeded stream and compute NLL per group directly
    plan = make_plan(len(labels), patients, groups, func="test")
    (weights,) = list(weight_chunks(plan, seed=11, n_resamples=5, chunk_size=5))
    spreads = []
    for w in weights:
        rows = np.repeat(np.arange(len(labels)), w[plan.cluster_of_row].astype(int))
        values = [
            negative_log_likelihood(probs[rows][groups[rows] == g], labels[rows][groups[rows] == g])
            for g in "abc"
        ]
        spreads.append(max(values) - min(values))
    lo, hi = np.percentile(spreads, [2.5, 97.5])
    assert res.range.low == pytest.approx(lo, rel=1e-9) and res.range.high == pytest.approx(hi, rel=1e-9)


def test_same_result_whatever_the_chunk_size() -> None:
    probs, labels, groups, patients = _data()
    one = disparity_intervals(
        probs,
        labels,
        groups,
        clusters=patients,
        strata=groups,
        spec=BootstrapSpec(n_resamples=60, seed=3, chunk_size=7),
    )
    other = disparity_intervals(
        probs,
        labels,
        groups,
        clusters=patients,
        strata=groups,
        spec=BootstrapSpec(n_resamples=60, seed=3, chunk_size=60),
    )
    assert one.to_dict() == other.to_dict()


def test_small_groups_listed_not_judged_and_bca_works() -> None:
    probs, labels, groups, patients = _data()
    groups = groups.astype("<U8")
    groups[:6] = "tiny"
    res = disparity_intervals(
        probs,
        labels,
        groups,
        clusters=patients,
        strata=groups,
        metric="accuracy",
        min_group_size=30,
        spec=BootstrapSpec(n_resamples=200, method="bca"),
    )
    assert res.too_small == {"tiny": 6}
    assert res.groups == ("a", "b", "c")
    direct = {g: accuracy(probs[groups == g], labels[groups == g]) for g in "abc"}
    assert res.range.estimate == pytest.approx(max(direct.values()) - min(direct.values()))
    assert res.range.low <= res.range.estimate <= res.range.high
    assert set(res.to_dict()["versus_rest"]) == {"a", "b", "c"}


def test_errors() -> None:
    probs, labels, groups, patients = _data()
    with pytest.raises(DataError, match="at least two groups with at least 10000 rows"):
        disparity_intervals(probs, labels, groups, clusters=patients, min_group_size=10_000)
    with pytest.raises(DataError, match="must be a metric with fixed bins"):
        disparity_intervals(probs, labels, groups, clusters=patients, metric="ece_mass")
    # the smooth ECE refits its bandwidth in every resample: no per-patient sums (the protocol refuses it)
    with pytest.raises(DataError, match="every group's value in every resample comes from per-patient sums"):
        disparity_intervals(probs, labels, groups, clusters=patients, metric="smooth_ece")


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_several_metrics_on_one_draw_are_each_metric_alone_bit_for_bit(method: str) -> None:
    from sitecal.stats import disparity_intervals_each

    rng = np.random.default_rng(6)
    n = 900
    probs = rng.dirichlet([1.0, 2.0, 1.5], n)
    y = rng.integers(0, 3, n)
    g = np.array(["a", "b", "c", "d"], dtype=object)[rng.integers(0, 4, n)]
    patients = rng.integers(0, 500, n)
    strata = np.array(["x", "y"], dtype=object)[patients % 2]
    spec = BootstrapSpec(n_resamples=60, seed=4, method=method, chunk_size=7)
    metrics = ["ece", "nll", "classwise_ece", "brier", "accuracy"]
    kw = {"clusters": patients, "strata": strata, "n_bins": 10, "min_group_size": 150, "spec": spec}
    together = disparity_intervals_each(probs, y, g, metrics=metrics, **kw)
    assert list(together) == metrics
    for metric in metrics:  # a loop over metrics: each as computed alone
        alone = disparity_intervals(probs, y, g, metric=metric, **kw)
        assert together[metric].to_dict() == alone.to_dict(), metric
    assert together["ece"].to_dict() != together["classwise_ece"].to_dict()
    with pytest.raises(DataError, match="give at least one metric"):
        disparity_intervals_each(probs, y, g, metrics=[], **kw)
