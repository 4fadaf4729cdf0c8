"""The refit bootstraps' kernels (sitecal._kernels._calibrated) held to their plain-numpy references.

Both kernels compute the array code's operations in its order (sums over classes in class order, rows in
row order, numpy's own ``exp`` and ``log``): compared bit for bit.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from tests._kernels.drawn_arrays import SMALL, floats, ints

from sitecal._kernels import PROGRAMS, calibrated_entry_sums, nll_row_terms
from sitecal._kernels._calibrated import calibrated_entry_sums_reference, nll_row_terms_reference

#: logits with exact ties between classes (the first arg-max counts) and far apart ones (a probability
#: below the clip of the log-probability, 1e-12), among any
LOGITS = st.sampled_from([-1.0, 0.0, 2.0, -30.0, 30.0]) | st.floats(-8.0, 8.0)


#: a metric's program and its blocks: top-label blocks in any order (the metrics use "g", "ng", "nac"),
#: or a mean score
PROGRAM = st.text(alphabet="ngac", max_size=3).map(lambda blocks: ("top_label", blocks)) | st.sampled_from(
    [(name, "") for name in PROGRAMS if name != "top_label"]
)


@SMALL
@given(data=st.data(), programs=st.lists(PROGRAM, min_size=1, max_size=3), reuse=st.booleans())
def test_calibrated_entry_sums_are_the_array_codes_softmax_terms_and_sums(
    data: st.DataObject, programs: list[tuple[str, str]], reuse: bool
) -> None:
    # up to 10 classes: numpy adds 8 or more terms along a contiguous axis pairwise, not in class order
    c, n, n_bins = data.draw(st.integers(2, 10)), data.draw(st.integers(0, 8)), data.draw(st.integers(1, 6))
    logits_t = floats(data, (c, n), LOGITS)
    labels = ints(data, (n,), c)
    n_groups = data.draw(st.integers(1, 3))
    groups = ints(data, (n,), n_groups)
    # rows share clusters: a cluster not drawn (weight 0, its rows skipped) or drawn many times
    n_clusters = data.draw(st.integers(1, 4))
    row_cluster = ints(data, (n,), n_clusters)
    cluster_weights = floats(data, (n_clusters,), st.sampled_from([0.0, 1.0, 2.0, 5.0]))
    # rows share temperatures (a fold's refit), one of them exactly 1
    n_scales = data.draw(st.integers(1, 3))
    row_scale = ints(data, (n,), n_scales)
    scales = floats(data, (n_scales,), st.sampled_from([1.0]) | st.floats(0.2, 5.0))
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    widths = [1 + len(blocks) * n_bins if name == "top_label" else 2 for name, blocks in programs]
    # a caller's workspace holds the previous resample's values: the sums must not depend on them
    workspace = np.full((c + 7, n), np.nan) if reuse else None
    args = (logits_t, labels, groups, n_groups, row_cluster, cluster_weights, row_scale, scales, edges)
    got = calibrated_entry_sums(*args, programs, widths, workspace)
    assert got.shape == (n_groups, sum(widths))
    assert np.array_equal(got, calibrated_entry_sums_reference(*args, programs, widths))


@SMALL
@given(
    data=st.data(),
    beta=st.sampled_from([1.0]) | st.floats(0.05, 20.0),
    reuse=st.booleans(),
    order=st.sampled_from("CF"),
)
def test_nll_row_terms_are_the_temperature_fits_array_code(
    data: st.DataObject, beta: float, reuse: bool, order: str
) -> None:
    c, n = data.draw(st.integers(1, 10)), data.draw(st.integers(0, 8))
    # d = x - x_y as the fit builds it: the true class's entry 0, the others any (ties included); in
    # either memory order (the sums over classes stay in class order)
    d_t = floats(data, (c, n), LOGITS)
    d_t[ints(data, (n,), c), np.arange(n)] = 0.0
    d_t = np.asarray(d_t, order=order)
    workspace = np.full((c + 4, n), np.nan) if reuse else None
    got = nll_row_terms(d_t, beta, workspace)
    want = nll_row_terms_reference(d_t, beta)
    for a, b in zip(got, want, strict=True):  # a loop over the four terms: max, sum, mean, variance
        assert np.array_equal(a, b)
