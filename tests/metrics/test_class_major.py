"""Class-major sparse terms against the row-major dense terms they replace in the refit bootstraps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sitecal.metrics import SumMetricStatistic, metric_statistic
from sitecal.metrics._class_major import accuracy_t, brier_t, nll_t
from sitecal.metrics._scores import accuracy_terms, brier_terms, nll_terms
from sitecal.metrics._softmax import _softmax, softmax_class_major
from sitecal.metrics.registry import METRIC_NAMES
from sitecal.stats._term_sums import weighted_term_sums

SUMMABLE = [m for m in METRIC_NAMES if isinstance(metric_statistic(m, n_bins=15), SumMetricStatistic)]


def _data(seed: int, n: int, c: int, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * 3.0
    if ties:  # exact ties between classes, and rows at the bin edges' confidences
        z[: n // 3, 1] = z[: n // 3, 0]
        z[n // 3 : n // 2] = 0.0
    return z, rng.integers(0, c, n)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), c=st.integers(2, 9), ties=st.booleans())
def test_class_major_softmax_and_scores_equal_the_row_major_ones(
    seed: int, n: int, c: int, ties: bool
) -> None:
    z, y = _data(seed, n, c, ties)
    rows = _softmax(z)
    shifted = z - z.max(axis=1, keepdims=True)
    plain = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    assert np.array_equal(rows, plain)  # the plain row softmax, bit for bit
    probs_t = softmax_class_major(np.array(z.T, order="C"))
    if c <= 7:
        assert np.array_equal(probs_t.T, rows)
    else:  # numpy sums 8 or more terms of a row in a different order
        np.testing.assert_allclose(probs_t.T, rows, rtol=1e-14, atol=1e-16)
    p_t = np.ascontiguousarray(rows.T)
    assert np.array_equal(nll_t(p_t, y), nll_terms(rows, y))
    assert np.array_equal(accuracy_t(p_t, y), accuracy_terms(rows, y))
    np.testing.assert_allclose(brier_t(p_t, y), brier_terms(rows, y), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("metric", SUMMABLE)
@pytest.mark.parametrize(("c", "ties"), [(2, False), (3, True), (5, False), (9, True)])
def test_sparse_terms_rebuild_the_dense_terms(metric: str, c: int, ties: bool) -> None:
    stat = metric_statistic(metric, n_bins=15)
    assert isinstance(stat, SumMetricStatistic)
    z, y = _data(3, 400, c, ties)
    probs = _softmax(z)
    dense = stat.row_terms(probs, y)
    columns, values = stat.sparse_terms(np.ascontiguousarray(probs.T), y)
    rebuilt = np.zeros_like(dense)
    rows = np.broadcast_to(np.arange(y.shape[0]), columns.shape)
    np.add.at(rebuilt, (rows, columns), values)
    np.testing.assert_allclose(rebuilt, dense, rtol=1e-14, atol=1e-15)
    # every column is fed by one entry only (weighted_term_sums adds a column's rows in row order)
    for j in range(columns.shape[0]):
        others = np.delete(columns, j, axis=0)
        assert not np.isin(np.unique(columns[j]), others).any() or np.unique(columns[j]).size == 0


@pytest.mark.parametrize("metric", SUMMABLE)
def test_weighted_term_sums_equal_dense_group_sums(metric: str) -> None:
    stat = metric_statistic(metric, n_bins=10)
    assert isinstance(stat, SumMetricStatistic)
    z, y = _data(5, 300, 3, True)
    probs = _softmax(z)
    groups = np.random.default_rng(1).integers(0, 4, 300)
    weights = np.random.default_rng(2).poisson(1.0, (6, 300)).astype(float)
    dense = stat.row_terms(probs, y)
    expected = np.stack([[w[groups == g] @ dense[groups == g] for g in range(4)] for w in weights])
    columns, values = stat.sparse_terms(np.ascontiguousarray(probs.T), y)
    got = weighted_term_sums(columns, values, weights, dense.shape[1], groups, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # per resample terms (R, k, N) give the same sums; chunks of resamples do not move them
    per_resample = weighted_term_sums(
        np.broadcast_to(columns, (6, *columns.shape)),
        np.broadcast_to(values, (6, *values.shape)),
        weights,
        dense.shape[1],
        groups,
        4,
    )
    assert np.array_equal(per_resample, got)
    halves = np.concatenate(
        [
            weighted_term_sums(columns, values, w, dense.shape[1], groups, 4)
            for w in (weights[:2], weights[2:])
        ]
    )
    assert np.array_equal(halves, got)


@pytest.mark.parametrize("n_bins", [1, 7, 15, 40])
def test_compiled_top_label_entries_equal_numpy_bins_and_arg_max_at_every_edge(n_bins: int) -> None:
    """The compiled loop puts each row in the (lo, hi] bin numpy.searchsorted gives, edges included."""
    from sitecal._kernels import top_label_entries
    from sitecal.metrics._binning import assign_bins, bin_edges

    edges = bin_edges(np.empty(0), n_bins, "width")
    rng = np.random.default_rng(n_bins)
    on_edges = edges[edges >= 0.5]  # a top-label confidence of two classes is at least 1/2
    near = np.concatenate([on_edges, np.nextafter(on_edges, 0.0), np.nextafter(on_edges, 1.0)]).clip(0.5, 1.0)
    top = np.concatenate([near, rng.uniform(0.34, 1.0, 500)])
    probs = np.stack([top, 1.0 - top, np.zeros_like(top)])  # class-major (C, N)
    probs[:, ::3] = probs[[1, 0, 2]][:, ::3]  # the arg-max in another class for some rows
    probs[:, 1::7] = probs[[2, 1, 0]][:, 1::7]
    y = rng.integers(0, 3, top.shape[0])
    columns, values = top_label_entries(probs, y, edges, "ngac")
    predicted = probs.argmax(axis=0)
    confidence = probs.max(axis=0)
    correct = (predicted == y).astype(np.float64)
    index = assign_bins(confidence, edges)
    assert np.array_equal(columns[0], np.zeros_like(y)) and np.array_equal(values[0], np.ones(y.shape[0]))
    for j, expected in enumerate([np.ones(y.shape[0]), correct - confidence, correct, confidence]):
        assert np.array_equal(columns[j + 1], index + 1 + j * n_bins)
        assert np.array_equal(values[j + 1], expected)
