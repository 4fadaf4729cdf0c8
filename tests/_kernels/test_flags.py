"""The size-matched flags' kernels (sitecal._kernels._flags) held to their plain-numpy references.

Layouts and assignments are integers (compared exactly); the grouped sums add rows in order, a row's
entries in order, as a ``numpy.bincount`` over the same keys does: compared bit for bit.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from tests._kernels.drawn_arrays import SMALL

from sitecal._kernels import assign_rows, grouped_row_sums, layout_starts
from sitecal._kernels._flags import assign_rows_reference, grouped_row_sums_reference, layout_starts_reference

#: the narrow integer dtypes the callers pass (group codes of ``numpy.min_scalar_type``), and int64
CODES = st.sampled_from([np.uint8, np.uint16, np.int64])


@st.composite
def patients(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """A random order of ``K`` patients (``rank``, a permutation) and each one's number of rows."""
    k = draw(st.integers(0, 6))
    rank = np.array(draw(st.permutations(range(k))), dtype=np.int64)
    size = np.array(draw(st.lists(st.integers(0, 4), min_size=k, max_size=k)), dtype=np.int64)
    return rank, size


@SMALL
@given(layout=patients())
def test_layout_starts_are_the_sizes_of_the_patients_placed_before(
    layout: tuple[np.ndarray, np.ndarray],
) -> None:
    rank, size = layout
    assert np.array_equal(layout_starts(rank, size), layout_starts_reference(rank, size))


@SMALL
@given(layout=patients(), dtype=CODES, data=st.data())
def test_assign_rows_read_each_rows_group_at_its_new_place(
    layout: tuple[np.ndarray, np.ndarray], dtype: type, data: st.DataObject
) -> None:
    rank, size = layout
    n = int(size.sum())
    patient = np.repeat(np.arange(rank.shape[0]), size)
    within = np.arange(n) - np.repeat(np.cumsum(size) - size, size)
    order = np.array(data.draw(st.permutations(range(n))), dtype=np.int64)  # rows in any order
    patient, within = patient[order], within[order]
    labels = np.array(data.draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)), dtype=dtype)
    before = layout_starts_reference(rank, size)
    got = assign_rows(before, patient, within, labels)
    assert got.dtype == labels.dtype
    assert np.array_equal(got, assign_rows_reference(before, patient, within, labels))


@SMALL
@given(assigned_dtype=CODES, columns_dtype=CODES, data=st.data())
def test_grouped_row_sums_add_each_groups_rows_in_row_order(
    assigned_dtype: type, columns_dtype: type, data: st.DataObject
) -> None:
    p, n, k = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 7)), data.draw(st.integers(1, 3))
    n_groups, n_columns = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    group = st.integers(0, n_groups - 1)
    assigned = np.array(data.draw(st.lists(group, min_size=p * n, max_size=p * n)), dtype=assigned_dtype)
    column = st.integers(0, n_columns - 1)  # columns fed by several entries too: still in (row, entry) order
    columns = np.array(data.draw(st.lists(column, min_size=n * k, max_size=n * k)), dtype=columns_dtype)
    value = st.sampled_from([0.0, -0.0, 1.0, 0.1]) | st.floats(-1e6, 1e6)
    values = np.array(data.draw(st.lists(value, min_size=n * k, max_size=n * k)), dtype=np.float64)
    args = (assigned.reshape(p, n), columns.reshape(n, k), values.reshape(n, k), n_columns, n_groups)
    got = grouped_row_sums(*args)
    assert got.shape == (p, n_groups, n_columns)
    assert np.array_equal(got, grouped_row_sums_reference(*args))
