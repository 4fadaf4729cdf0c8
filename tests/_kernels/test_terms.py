"""The sparse-terms kernels (sitecal._kernels._terms) held to their plain-numpy references.

The weighted sums add entry by entry, rows in order, as a ``numpy.bincount`` over the same keys does,
and the top-label terms are comparisons and one subtraction: both compared bit for bit.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from tests._kernels.drawn_arrays import SMALL, floats, ints

from sitecal._kernels import top_label_entries, weighted_entry_sums
from sitecal._kernels._terms import top_label_entries_reference, weighted_entry_sums_reference


@SMALL
@given(data=st.data(), grouped=st.booleans(), shared_columns=st.booleans())
def test_weighted_entry_sums_add_each_groups_weighted_rows_in_row_order(
    data: st.DataObject, grouped: bool, shared_columns: bool
) -> None:
    k, n, n_columns = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 8)), data.draw(st.integers(1, 5))
    # one column per entry for every row (a read-only broadcast view, as a mean score's terms come) or a
    # column per row (a binned metric's)
    if shared_columns:
        columns = np.broadcast_to(ints(data, (k, 1), n_columns), (k, n))
    else:
        columns = ints(data, (k, n), n_columns)
    values = floats(data, (k, n), st.sampled_from([0.0, 1.0, -0.5]) | st.floats(-1e6, 1e6))
    # bootstrap weights: rows never drawn (0, skipped), drawn once or many times, and fractional ones
    weights = floats(data, (n,), st.sampled_from([0.0, 1.0, 2.0, 7.0]) | st.floats(0.0, 10.0))
    n_groups = data.draw(st.integers(1, 3)) if grouped else 1
    groups = ints(data, (n,), n_groups) if grouped else None
    got = weighted_entry_sums(columns, values, weights, n_columns, groups, n_groups)
    assert got.shape == (n_groups, n_columns)
    assert np.array_equal(
        got, weighted_entry_sums_reference(columns, values, weights, n_columns, groups, n_groups)
    )


@SMALL
@given(data=st.data(), parts=st.text(alphabet="ngac", max_size=4))
def test_top_label_entries_are_numpys_arg_max_bin_and_values(data: st.DataObject, parts: str) -> None:
    c, n, n_bins = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 8)), data.draw(st.integers(1, 6))
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # probabilities on the bin edges (a confidence of exactly 0, 1 or an inner edge) and ties between
    # classes (the same edge drawn twice in a row: the first arg-max counts), among any in [0, 1]
    probs_t = floats(data, (c, n), st.sampled_from(edges.tolist()) | st.floats(0.0, 1.0))
    labels = ints(data, (n,), c)
    got = top_label_entries(probs_t, labels, edges, parts)
    want = top_label_entries_reference(probs_t, labels, edges, parts)
    assert got[0].shape == got[1].shape == (len(parts) + 1, n)
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])


def test_columns_broadcast_from_one_row_read_no_row_past_the_groups() -> None:
    # columns of shape (k, 1) feed every row; the default groups must then cover every row of values
    columns, values, weights = np.array([[0], [1], [1]]), np.ones((3, 6)), np.ones(6)
    got = weighted_entry_sums(columns, values, weights, 2)
    assert np.array_equal(got, weighted_entry_sums_reference(columns, values, weights, 2))
    assert got.tolist() == [[6.0, 12.0]]
