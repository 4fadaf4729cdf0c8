from __future__ import annotations

import json
import re

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.metrics import (
    TopLabelOEStatistic,
    brier_score,
    expected_calibration_error,
    metric_statistic,
    negative_log_likelihood,
    softmax,
)
from sitecal.stats import BootstrapSpec, bootstrap_interval, bootstrap_metrics


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 240
    labels = rng.integers(0, 3, n)
    logits = rng.normal(size=(n, 3))
    logits[np.arange(n), labels] += 1.0
    before = softmax(4.0 * logits)
    after = softmax(4.0 * logits, temperature=3.0)
    clusters = np.arange(n) // 2  # two studies per patient
    strata = np.where(clusters % 3 == 0, "site1", "site2")
    return before, after, labels, clusters, strata


def test_paired_intervals_and_difference() -> None:
    before, after, labels, clusters, strata = _data()
    spec = BootstrapSpec(n_resamples=400, seed=7, method="bca")  # BCa: refused for the debiased ECE
    res = bootstrap_metrics(
        {"before": before, "after": after},
        labels,
        clusters=clusters,
        strata=strata,
        metrics=("ece", "nll", "brier", "accuracy"),
        spec=spec,
    )
    assert res.get("ece", "before").estimate == pytest.approx(
        expected_calibration_error(before, labels), abs=1e-14
    )
    assert res.get("nll", "after").estimate == pytest.approx(
        negative_log_likelihood(after, labels), rel=1e-14
    )
    assert res.get("brier", "after").estimate == pytest.approx(brier_score(after, labels), rel=1e-14)
    diff = res.difference("nll", "after", "before")
    assert diff.estimate == pytest.approx(
        res.get("nll", "after").estimate - res.get("nll", "before").estimate, abs=1e-14
    )
    # temperature 3 fixes this over-confidence: the paired interval of the change excludes 0
    assert diff.high < 0
    i = res.metrics.index("nll")
    paired = res.replicates[i, 1] - res.replicates[i, 0]
    assert diff.standard_error == pytest.approx(float(np.std(paired, ddof=1)), rel=1e-12)
    # accuracy is unchanged by temperature scaling in every resample: a degenerate, zero-width difference
    acc = res.difference("accuracy", "after", "before")
    assert acc.low == acc.high == 0.0 and acc.note
    assert (res.n, res.n_clusters, res.n_strata) == (240, 120, 2)


def test_same_as_bootstrap_interval_for_one_metric() -> None:
    before, _, labels, clusters, strata = _data(1)
    spec = BootstrapSpec(n_resamples=300, seed=2, method="bca")
    res = bootstrap_metrics(
        {"p": before}, labels, clusters=clusters, strata=strata, metrics=("ece", "ece_mass"), spec=spec
    )
    for name in ("ece", "ece_mass"):
        single = bootstrap_interval(
            metric_statistic(name),
            (before, labels),
            clusters=clusters,
            strata=strata,
            n_resamples=300,
            seed=2,
            method="bca",
        )
        assert res.get(name, "p") == single


def test_chunk_size_does_not_change_replicates() -> None:
    before, after, labels, clusters, _ = _data(2)
    sets = {"before": before, "after": after}
    metrics = ("ece", "ece_mass", "classwise_ece", "mce", "nll", "brier", "accuracy")
    a = bootstrap_metrics(
        sets, labels, clusters=clusters, metrics=metrics, spec=BootstrapSpec(n_resamples=50, chunk_size=7)
    )
    b = bootstrap_metrics(
        sets, labels, clusters=clusters, metrics=metrics, spec=BootstrapSpec(n_resamples=50, chunk_size=1000)
    )
    assert np.array_equal(a.replicates, b.replicates)
    da, db = a.to_dict(), b.to_dict()
    assert da.pop("spec")["chunk_size"] == 7 and db.pop("spec")["chunk_size"] == 1000
    assert da == db


def test_to_dict_is_json_safe() -> None:
    before, after, labels, clusters, _ = _data(3)
    res = bootstrap_metrics(
        {"before": before, "after": after}, labels, clusters=clusters, spec=BootstrapSpec(n_resamples=50)
    )
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert set(d["intervals"]) == {"ece", "ece_debiased", "nll", "brier", "accuracy"}
    assert set(d["differences"]["ece"]) == {"after - before"}
    assert d["spec"]["seed"] == 0 and d["n_clusters"] == 120


def test_errors() -> None:
    before, after, labels, _, _ = _data()
    with pytest.raises(
        DataError, match=re.escape("The 'metrics' parameter of bootstrap_metrics must be one of")
    ):
        bootstrap_metrics({"p": before}, labels, clusters=None, metrics=("ecee",))
    with pytest.raises(
        DataError, match=re.escape("The 'prob_sets' parameter of bootstrap_metrics must hold the same rows")
    ):
        bootstrap_metrics({"a": before, "b": after[:10]}, labels, clusters=None)
    with pytest.raises(
        DataError,
        match=re.escape("The \"prob_sets['a']\" parameter of bootstrap_metrics must have rows that sum to 1"),
    ):
        bootstrap_metrics({"a": before * 0.9}, labels, clusters=None)
    res = bootstrap_metrics({"before": before}, labels, clusters=None, spec=BootstrapSpec(n_resamples=10))
    with pytest.raises(DataError, match=re.escape("Did you mean 'before'?")):
        res.get("ece", "befor")


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_a_further_sum_statistic_gets_bootstrap_intervals_interval_bit_for_bit(method: str) -> None:
    """``extra``: the top-label O/E on the metrics' resamples is the interval bootstrap_interval gives."""
    rng = np.random.default_rng(4)
    n = 240
    probs = rng.dirichlet(np.ones(3), n)
    labels = rng.integers(0, 3, n)
    patients = np.array([f"p{i // 3:03d}" for i in range(n)])
    strata = np.array(["a", "b"])[(np.arange(n) // 3) % 2]
    spec = BootstrapSpec(n_resamples=150, seed=11, method=method)
    res = bootstrap_metrics(
        {"before": probs, "after": _sharpened(probs)},
        labels,
        clusters=patients,
        strata=strata,
        metrics=("ece", "nll"),
        spec=spec,
        extra={"oe": TopLabelOEStatistic()},
    )
    assert res.metrics == ("ece", "nll", "oe")
    for stage in ("before", "after"):
        p = probs if stage == "before" else _sharpened(probs)
        alone = bootstrap_interval(
            TopLabelOEStatistic(),
            (p, labels),
            clusters=patients,
            strata=strata,
            n_resamples=150,
            seed=11,
            method=method,
        )
        got = res.get("oe", stage)
        assert (got.estimate, got.low, got.high, got.standard_error) == (
            alone.estimate,
            alone.low,
            alone.high,
            alone.standard_error,
        )
    # the metrics themselves are those of a call without the further statistic
    plain = bootstrap_metrics(
        {"before": probs}, labels, clusters=patients, strata=strata, metrics=("ece", "nll"), spec=spec
    )
    assert np.array_equal(plain.replicates[:, 0], res.replicates[:2, 0])


def _sharpened(probs: np.ndarray) -> np.ndarray:
    return probs**1.3 / (probs**1.3).sum(axis=1, keepdims=True)


def test_a_further_statistic_must_be_a_new_name_and_a_sum_statistic() -> None:
    probs = np.full((4, 2), 0.5)
    labels = np.array([0, 1, 0, 1])
    with pytest.raises(DataError, match=r"'extra'.*'nll'"):
        bootstrap_metrics(
            {"p": probs}, labels, clusters=None, metrics=("nll",), extra={"nll": TopLabelOEStatistic()}
        )
    with pytest.raises(DataError, match=r"'extra'.*'mean'"):
        bootstrap_metrics({"p": probs}, labels, clusters=None, metrics=("nll",), extra={"mean": np.mean})  # type: ignore[dict-item]
