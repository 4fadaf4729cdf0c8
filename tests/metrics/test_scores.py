from __future__ import annotations

import math
import re

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.metrics import NLL_CLIP, accuracy, brier_score, negative_log_likelihood

PROBS = np.array([[0.5, 0.5], [0.1, 0.9], [0.8, 0.2]])
LABELS = np.array([0, 1, 1])


def test_nll_by_hand() -> None:
    # -(log .5 + log .9 + log .2) / 3
    expected = -(math.log(0.5) + math.log(0.9) + math.log(0.2)) / 3
    assert negative_log_likelihood(PROBS, LABELS) == pytest.approx(expected, rel=1e-15)


def test_nll_clips_at_1e_12() -> None:
    # p_y = 0 costs -log(1e-12) = 27.631... instead of infinity
    assert negative_log_likelihood([[1.0, 0.0]], [1]) == pytest.approx(-math.log(NLL_CLIP))
    assert NLL_CLIP == 1e-12


def test_brier_by_hand() -> None:
    # row 1: .25 + .25; row 2: .01 + .01; row 3: .64 + .64 -> (0.5 + 0.02 + 1.28) / 3 = 0.6
    assert brier_score(PROBS, LABELS) == pytest.approx(0.6, abs=1e-15)
    # multiclass form reaches 2 for a confident wrong answer
    assert brier_score([[1.0, 0.0, 0.0]], [2]) == 2.0


def test_accuracy_by_hand_with_tie_to_lowest_index() -> None:
    # row 1 ties (0.5, 0.5): argmax is class 0, which is right; row 2 right; row 3 wrong
    assert accuracy(PROBS, LABELS) == pytest.approx(2 / 3)


def test_score_errors() -> None:
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'probs' parameter of brier_score must hold probabilities in [0, 1]. "
            "Got -0.5 at index (0, 0)."
        ),
    ):
        brier_score([[-0.5, 1.5]], [0])
    with pytest.raises(
        DataError, match=re.escape("The 'labels' parameter of accuracy must hold integer class")
    ):
        accuracy(PROBS, np.array([0.0, 1.5, 1.0]))
    with pytest.raises(DataError, match=re.escape("Got non-integer floats (e.g. NaN for a missing label)")):
        negative_log_likelihood(PROBS, np.array([0.0, np.nan, 1.0]))
    # integer-valued floats (labels read from CSV) are accepted
    assert accuracy(PROBS, LABELS.astype(float)) == accuracy(PROBS, LABELS)
