"""The weighted forms used by the bootstrap equal the metric on the resampled (repeated) rows."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sitecal.errors import DataError
from sitecal.metrics import METRIC_NAMES, metric_statistic, softmax
from sitecal.metrics.registry import metric

#: The weighted smooth ECE bins the rows on the exact function's grid and both resolve the bandwidth's fixed
#: point to a tolerance (tests/metrics/test_smooth_weighted.py measures the gap); the others are exact.
TOLERANCE = {"smooth_ece": 1e-5}


def _plain(name: str, probs: np.ndarray, labels: np.ndarray) -> float:
    # the registry's function (checked against independent references in test_registry.py)
    return metric(name)(probs, labels)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16), n=st.integers(1, 60), c=st.integers(2, 4), name=st.sampled_from(METRIC_NAMES)
)
def test_weights_equal_repeated_rows(seed: int, n: int, c: int, name: str) -> None:
    rng = np.random.default_rng(seed)
    # coarse logits give tied confidences, which the equal-mass rule must handle like the plain metric
    probs = softmax(rng.integers(-2, 3, size=(n, c)).astype(float))
    labels = rng.integers(0, c, n)
    weights = rng.multinomial(n, np.ones(n) / n, size=3).astype(float)
    stat = metric_statistic(name)
    values = stat(probs, labels, weights=weights)
    for b in range(3):
        rows = np.repeat(np.arange(n), weights[b].astype(int))
        assert values[b] == pytest.approx(
            _plain(name, probs[rows], labels[rows]), abs=TOLERANCE.get(name, 1e-12)
        )
    ones = stat(probs, labels, weights=np.ones((1, n)))
    assert ones[0] == pytest.approx(_plain(name, probs, labels), abs=TOLERANCE.get(name, 1e-12))


def test_metric_statistic_errors() -> None:
    with pytest.raises(
        DataError,
        match=re.escape("The 'name' parameter of metric_statistic must be one of 'ece', 'ece_mass', "),
    ):
        metric_statistic("eec")
    with pytest.raises(DataError, match=re.escape("Did you mean 'brier'?")):
        metric_statistic("brierr")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(2, 70), n_bins=st.integers(1, 16), coarse=st.booleans())
def test_mass_ece_fast_jackknife_is_exact(seed: int, n: int, n_bins: int, coarse: bool) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.integers(-2, 3, size=(n, 3)).astype(float) if coarse else rng.normal(size=(n, 3))
    probs, labels = softmax(logits), rng.integers(0, 3, n)
    _, cluster_of_row = np.unique(rng.integers(0, max(2, n // 3), n), return_inverse=True)
    k = int(cluster_of_row.max()) + 1
    if k == 1:  # leaving out the only cluster leaves nothing; the engine never asks for it
        return
    stat = metric_statistic("ece_mass", n_bins=n_bins)
    prepared = stat.prepare(probs, labels)  # type: ignore[union-attr]
    fast = stat.jackknife(prepared, cluster_of_row, k)  # type: ignore[union-attr]
    leave_out = (cluster_of_row[None, :] != np.arange(k)[:, None]).astype(float)
    slow = stat.evaluate(prepared, leave_out)  # type: ignore[union-attr]
    assert np.allclose(fast, slow, atol=1e-12)
