"""The counting kernels of the resamples (sitecal._kernels._draws) held to their plain-numpy references.

Each kernel adds in a fixed order (clusters or patients in order, their entries in order) that a
``numpy.bincount`` over the same keys follows: the sums are compared bit for bit.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from tests._kernels.drawn_arrays import SMALL

from sitecal._kernels import counted_sums, draw_counts, membership_sums, stratified_draws
from sitecal._kernels._draws import (
    counted_sums_reference,
    draw_counts_reference,
    membership_sums_reference,
    stratified_draws_reference,
)

#: nonzero finite values (``counted_sums`` stores nonzero values), exact ones among them
#: and ones whose sums depend on the order of the additions (0.1 + 0.2 + 0.3, 1e16 + 1 - 1e16)
NONZERO = st.sampled_from([1.0, -1.0, 0.1, 0.2, 0.3, 1e16, -1e16]) | st.floats(
    -1e3, 1e3, allow_subnormal=False
).filter(bool)
INFINITE = st.sampled_from([np.inf, -np.inf])


@st.composite
def drawn_clusters(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Indices (R, D) of ``k`` clusters: no resample (an empty chunk) or a few, each drawing a few times.

    Few clusters for up to 8 draws: a cluster drawn many times and one never drawn come up often.
    """
    k = draw(st.integers(1, 5))
    r = draw(st.sampled_from([1, 2, 4, 0]))  # one resample has a path of its own in counted_sums
    d = draw(st.integers(0, 8))
    flat = draw(st.lists(st.integers(0, k - 1), min_size=r * d, max_size=r * d))
    return np.array(flat, dtype=np.int64).reshape(r, d), k


@SMALL
@given(drawn=drawn_clusters())
def test_draw_counts_are_the_bincounts_of_each_resample(drawn: tuple[np.ndarray, int]) -> None:
    indices, k = drawn
    got = draw_counts(indices, k)
    assert got.dtype == np.float64
    assert np.array_equal(got, draw_counts_reference(indices, k))


@SMALL
@given(drawn=drawn_clusters(), data=st.data())
def test_counted_sums_are_the_count_weighted_sums_in_entry_order(
    drawn: tuple[np.ndarray, int], data: st.DataObject
) -> None:
    indices, k = drawn
    sizes = np.array(data.draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)))  # a cluster may be empty
    stop = np.cumsum(sizes).astype(np.int64)
    start = stop - sizes
    n_entries, n_columns = int(stop[-1]), data.draw(st.integers(1, 3))
    cols = np.array(
        data.draw(st.lists(st.integers(0, n_columns - 1), min_size=n_entries, max_size=n_entries))
    )
    infinite = data.draw(st.booleans())  # the non-finite path: clusters not drawn are skipped, not 0 * inf
    value = NONZERO | INFINITE if infinite else NONZERO
    vals = np.array(data.draw(st.lists(value, min_size=n_entries, max_size=n_entries)), dtype=np.float64)
    finite = data.draw(st.sampled_from([None, False] if infinite else [None, True, False]))
    got = counted_sums(indices, start, stop, cols.astype(np.int64), vals, n_columns, finite)
    want = counted_sums_reference(indices, start, stop, cols.astype(np.int64), vals, n_columns, finite)
    assert got.shape == (indices.shape[0], n_columns)
    assert np.array_equal(got, want, equal_nan=True)  # inf - inf in a column is NaN in both


@SMALL
@given(data=st.data())
def test_stratified_draws_are_the_clipped_floor_of_each_uniform(data: st.DataObject) -> None:
    d, r = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 3))
    size = np.array(data.draw(st.lists(st.integers(1, 7), min_size=d, max_size=d)), dtype=np.int64)
    start = np.array(data.draw(st.lists(st.integers(0, 20), min_size=d, max_size=d)), dtype=np.int64)
    # the ends of [0, 1), and the largest uniform below 1, whose product with a size may round up to it
    uniform = st.sampled_from([0.0, 0.5, np.nextafter(1.0, 0.0)]) | st.floats(0.0, 1.0, exclude_max=True)
    u = np.array(data.draw(st.lists(uniform, min_size=r * d, max_size=r * d)), dtype=np.float64)
    u = u.reshape(r, d)
    got = stratified_draws(u, size, start)
    assert np.array_equal(got, stratified_draws_reference(u, size, start))
    assert ((got >= start) & (got < start + size)).all()


@SMALL
@given(drawn=drawn_clusters(), data=st.data())
def test_membership_sums_are_the_count_weighted_sums_of_each_block_in_patient_order(
    drawn: tuple[np.ndarray, int], data: st.DataObject
) -> None:
    indices, k = drawn
    n_patients = data.draw(st.integers(1, 4))
    patient_of_cluster = np.array(data.draw(st.lists(st.integers(0, n_patients - 1), min_size=k, max_size=k)))
    rows = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n_patients, max_size=n_patients)))
    ptr = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)  # a patient may hold no rows
    n_rows, n_blocks, width = int(ptr[-1]), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    block = np.array(data.draw(st.lists(st.integers(0, n_blocks - 1), min_size=n_rows, max_size=n_rows)))
    # zeros, and infinities in rows of patients never drawn (skipped, not multiplied by 0)
    value = st.sampled_from([0.0, 1.0, -2.5]) | NONZERO | INFINITE
    table = np.array(data.draw(st.lists(value, min_size=n_rows * width, max_size=n_rows * width)))
    table = table.reshape(n_rows, width).astype(np.float64)
    args = (indices, patient_of_cluster.astype(np.int64), ptr, block.astype(np.int64), table, n_blocks)
    got = membership_sums(*args)
    assert got.shape == (indices.shape[0], n_blocks, width)
    assert np.array_equal(got, membership_sums_reference(*args), equal_nan=True)
