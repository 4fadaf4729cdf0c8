"""The surrogate fits' root finder (sitecal._kernels._surrogate) held to its plain-numpy reference.

The kernel runs each row's Newton steps to its own end with the same arithmetic as the reference's array
steps (Clenshaw's recurrence, the same comparisons): the roots, slopes and flags compared bit for bit.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numpy.polynomial import chebyshev
from tests._kernels.drawn_arrays import SMALL

from sitecal._kernels import surrogate_roots
from sitecal._kernels._surrogate import surrogate_roots_reference


@st.composite
def gradient_series(draw: st.DrawFn, q: int) -> list[float]:
    """One row's Chebyshev coefficients (``q`` of them): a random series, or one of the edge cases.

    Mostly increasing (bracketed: Newton steps), a zero gradient, a root exactly at 0 (``g == 0`` at the
    first step), or a NaN coefficient (never bracketed).
    """
    coeffs = draw(st.lists(st.floats(-3.0, 3.0), min_size=q, max_size=q))
    # increasing rows three times out of seven: most examples take Newton steps
    kinds = ["increasing", "random", "increasing", "zero", "root at 0", "increasing", "nan"]
    kind = draw(st.sampled_from(kinds))
    if kind == "increasing" and q > 1:
        coeffs[1] += 4.0
    elif kind == "zero":
        coeffs = [0.0] * q
    elif kind == "root at 0" and q > 1:
        coeffs = [0.0, 1.0] + [0.0] * (q - 2)
    elif kind == "nan":
        coeffs[0] = np.nan
    return coeffs


@SMALL
@given(data=st.data(), q=st.integers(1, 7))
def test_surrogate_roots_are_the_array_newton_steps(data: st.DataObject, q: int) -> None:
    b = data.draw(st.integers(0, 12))
    coeffs = np.array(data.draw(st.lists(gradient_series(q), min_size=b, max_size=b)), dtype=np.float64)
    coeffs = coeffs.reshape(b, q)
    dcoeffs = np.asarray(chebyshev.chebder(coeffs, axis=1), dtype=np.float64)
    # error bounds: none, small, or so large that no gradient is bracketed beyond them
    errors = np.array(
        data.draw(st.lists(st.floats(0.0, 0.5) | st.sampled_from([0.0, 1e9]), min_size=b, max_size=b))
    )
    got = surrogate_roots(coeffs, dcoeffs, errors)
    want = surrogate_roots_reference(coeffs, dcoeffs, errors)
    for a, w in zip(got, want, strict=True):  # a loop over the root, the slope there and the bracket flag
        np.testing.assert_array_equal(a, w)  # NaNs in the same places
    assert not got[2][np.isnan(coeffs[:, 0])].any()
