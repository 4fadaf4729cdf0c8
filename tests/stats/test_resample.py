from __future__ import annotations

import re

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.stats._resample import draw_weights, make_plan, weight_chunks


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
