from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sitecal.errors import DataError
from sitecal.metrics import softmax


def test_by_hand() -> None:
    # softmax([0, 2] / 2) = [1, e] / (1 + e)
    p = softmax([[0.0, 2.0]], temperature=2.0)
    assert p[0, 1] == pytest.approx(math.e / (1 + math.e), rel=1e-15)
    assert p.dtype == np.float64


def test_stable_for_huge_logits() -> None:
    p = softmax(np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32))
    assert np.all(np.isfinite(p)) and p[0, 0] == 1.0


def test_single_logit_is_sigmoid() -> None:
    z = np.array([-3.0, 0.0, 2.0])
    p = softmax(z, temperature=2.0)
    assert np.allclose(p[:, 1], 1 / (1 + np.exp(-z / 2)), rtol=1e-15)
    assert np.array_equal(softmax(z[:, None]), softmax(z))


def test_per_row_temperature() -> None:
    z = np.array([[0.0, 1.0], [0.0, 1.0]])
    p = softmax(z, temperature=np.array([1.0, 2.0]))
    assert np.allclose(p[0], softmax(z[:1])[0]) and np.allclose(p[1], softmax(z[:1], temperature=2.0)[0])


@settings(max_examples=50, deadline=None)
@given(
    logits=arrays(np.float64, st.tuples(st.integers(1, 20), st.integers(2, 6)), elements=st.floats(-50, 50)),
    t=st.floats(0.05, 100.0),
)
@example(logits=np.array([[0.0, 2.220446049250313e-16, 0.0]]), t=2.0)
def test_temperature_never_changes_argmax(logits: np.ndarray, t: float) -> None:
    # row-wise: where the argmax is unique, scaling by 1/T keeps it. "Unique" as float64 probabilities can
    # tell: the top two come out as exp(0) and exp(-gap / T), equal once gap / T is below about 1e-16
    # (hypothesis found logits [0, 2.2e-16, 0] at T = 2), so gaps under 1e-12 after scaling are ties.
    top2 = np.sort(logits, axis=1)[:, -2:]
    unique = (top2[:, 1] - top2[:, 0]) / max(t, 1.0) > 1e-12
    p1, pt = softmax(logits), softmax(logits, temperature=t)
    assert np.array_equal(p1.argmax(axis=1)[unique], pt.argmax(axis=1)[unique])
    assert np.allclose(pt.sum(axis=1), 1.0)


def test_errors() -> None:
    with pytest.raises(
        DataError, match=re.escape("The 'temperature' parameter of softmax must be a float > 0. Got 0.0.")
    ):
        softmax([[0.0, 1.0]], temperature=0.0)
    with pytest.raises(DataError, match=re.escape("must be > 0 and finite. Got -1.0 at index 1.")):
        softmax([[0.0, 1.0], [1.0, 0.0]], temperature=np.array([1.0, -1.0]))
    with pytest.raises(
        DataError, match=re.escape("The 'logits' parameter of softmax must be finite. Got inf")
    ):
        softmax([[0.0, np.inf]])
