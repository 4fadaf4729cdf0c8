from __future__ import annotations

import re

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.stats._drawn_sums import DrawnSums
from sitecal.stats._resample import draw, draw_weights, make_plan, weight_chunks


def test_strata_keep_their_cluster_counts() -> None:
    # clusters p0..p5; p0-p3 in stratum "a" (rows 0-5), p4-p5 in "b"
    clusters = np.array(["p0", "p0", "p1", "p2", "p3", "p3", "p4", "p5", "p5"])
    strata = np.array(["a"] * 6 + ["b"] * 3)
    plan = make_plan(9, clusters, strata, func="test")
    assert (plan.n_clusters, plan.n_strata) == (6, 2)
    w = draw_weights(plan, np.random.default_rng(0), 500)
    in_a = plan.stratum_start == 0
    assert np.all(w[:, in_a].sum(axis=1) == 4) and np.all(w[:, ~in_a].sum(axis=1) == 2)
    # every cluster of a stratum is drawn with the same frequency (1 per resample on average)
    assert np.allclose(w.mean(axis=0), 1.0, atol=0.15)


def test_weights_stream_does_not_depend_on_chunking() -> None:
    plan = make_plan(30, np.arange(30) // 2, None, func="test")
    a = np.concatenate(list(weight_chunks(plan, seed=5, n_resamples=100, chunk_size=7)))
    b = np.concatenate(list(weight_chunks(plan, seed=5, n_resamples=100, chunk_size=100)))
    assert np.array_equal(a, b)


def test_cluster_in_two_strata_is_an_error() -> None:
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'clusters' parameter of test must nest within 'strata': cluster 'p1' has rows in strata "
        ),
    ):
        make_plan(3, np.array(["p1", "p1", "p2"]), np.array(["A", "B", "B"]), func="test")


def test_nan_cluster_ids_are_an_error() -> None:
    with pytest.raises(DataError, match="must not contain NaN"):
        make_plan(2, np.array([1.0, np.nan]), None, func="test")


def test_drawn_sums_equal_weighted_sums_for_sparse_dense_and_constant_columns() -> None:
    rng = np.random.default_rng(4)
    k = 300
    sums = np.zeros((k, 7))
    sums[:, 0] = 1.0  # constant
    sums[:, 1] = rng.normal(size=k)  # dense
    bins = rng.integers(2, 7, size=(k, 3))  # up to three sparse entries per cluster (multi-row clusters)
    np.add.at(sums, (np.repeat(np.arange(k), 3), bins.reshape(-1)), rng.normal(size=3 * k))
    sums[rng.random(k) < 0.3, 2:] = 0.0  # some clusters with no sparse entry at all
    drawn = DrawnSums(sums)
    plan = make_plan(k, None, None, func="test")
    draws = draw(plan, np.random.default_rng(1), 40)
    np.testing.assert_allclose(drawn(draws.indices), draws.weights @ sums, rtol=1e-12, atol=1e-12)
    assert drawn(draws.indices)[:, 0].tolist() == [float(k)] * 40


def test_drawn_sums_depend_on_each_resamples_counts_only() -> None:
    """A resample's sums are the same whatever the chunk it is in or the order of its draws."""
    rng = np.random.default_rng(7)
    k, j = 500, 40
    sums = np.zeros((k, j))
    sums[:, 0] = rng.integers(1, 3, k)  # dense
    entries = np.where(rng.random(k) < 0.02, 12, 1)  # a few clusters with many entries
    for c in range(k):  # a loop over clusters
        sums[c, 1 + rng.choice(j - 1, entries[c], replace=False)] = rng.normal(size=entries[c])
    drawn = DrawnSums(sums)
    plan = make_plan(k, None, None, func="test")
    draws = draw(plan, np.random.default_rng(2), 25)
    whole = drawn(draws.indices)
    one_by_one = np.concatenate([drawn(draws.indices[b : b + 1]) for b in range(25)])
    shuffled = drawn(np.sort(draws.indices, axis=1)[:, ::-1])
    assert np.array_equal(whole, one_by_one) and np.array_equal(whole, shuffled)
    np.testing.assert_allclose(whole, draws.weights @ sums, rtol=1e-12, atol=1e-12)
    # integer-valued columns sum exactly
    assert whole[:, 0].tolist() == (draws.weights @ sums[:, 0]).tolist()


def test_integer_draws_are_below_the_stratum_size() -> None:
    # one stratum draws integers in [0, k); several strata floor(u * size) clamped to size - 1
    plan = make_plan(10, np.arange(10) % 3, None, func="test")
    d = draw(plan, np.random.default_rng(0), 2000)
    assert d.indices.min() == 0 and d.indices.max() == plan.n_clusters - 1
    strata = make_plan(9, None, np.array(list("aaabbbbcc")), func="test")
    d = draw(strata, np.random.default_rng(0), 2000)
    assert set(np.unique(d.indices[:, :3])) == {0, 1, 2} and set(np.unique(d.indices[:, 7:])) == {7, 8}


def test_threads_do_not_change_a_single_bit() -> None:
    from sitecal.metrics import softmax
    from sitecal.stats import BootstrapSpec, bootstrap_metrics

    rng = np.random.default_rng(2)
    probs, y = softmax(rng.normal(size=(3000, 4)) * 2), rng.integers(0, 4, 3000)
    patients = np.arange(3000) // 3
    runs = [
        bootstrap_metrics(
            {"m": probs}, y, clusters=patients, spec=BootstrapSpec(n_resamples=64, chunk_size=5, workers=w)
        )
        for w in (1, 2, 3)
    ]
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0].replicates, other.replicates)
