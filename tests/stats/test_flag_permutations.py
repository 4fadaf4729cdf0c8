"""The flag tests' shared steps: the rows laid out by patient and the options checked once."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.stats._flag_permutations import PatientLayout, PermutationOptions


def test_the_layout_of_a_hand_made_cohort() -> None:
    # rows 0..3 of patients c, a, c, b (numbered a=0, b=1, c=2): in patient order the rows are 1 (a),
    # 3 (b), 0 and 2 (c); row 2 is patient c's second row
    layout = PatientLayout.of(4, ["c", "a", "c", "b"], func="f")
    assert layout.patient.tolist() == [2, 0, 2, 1]
    assert layout.n_patients == 3
    assert layout.by_patient.tolist() == [1, 3, 0, 2]
    assert layout.within.tolist() == [0, 0, 1, 0]
    assert layout.size.tolist() == [1, 1, 2]
    # patients laid out b, c, a: b's row at 0, c's rows at 1 and 2, a's at 3; the group sequence in
    # patient order (rows 1, 3, 0, 2 of groups 1, 1, 0, 1) is laid over rows 3, 0, 2, 1
    sequence = np.array([0, 1, 1, 1])[layout.by_patient]
    assert layout.assign(np.array([3, 0, 1]), sequence).tolist() == [1, 1, 0, 1]


def test_every_permutation_keeps_each_groups_number_of_rows() -> None:
    rng = np.random.default_rng(0)
    patients = rng.integers(0, 40, 150)
    codes = rng.integers(0, 4, 150)
    layout = PatientLayout.of(150, patients, func="f")
    sequence = codes[layout.by_patient]
    draws = np.random.default_rng(5)
    for _ in range(20):
        assigned = layout.assign(layout.starts(draws), sequence)
        assert np.bincount(assigned, minlength=4).tolist() == np.bincount(codes, minlength=4).tolist()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0.95, 0, "worse"), "The 'n_permutations' parameter of f must be an int >= 1. Got 0."),
        ((10, 1.5, 0, "worse"), "The 'level' parameter of f must be a float in (0, 1). Got 1.5."),
        ((10, 0.9, -1, "worse"), "The 'seed' parameter of f must be an int >= 0. Got -1."),
        (
            (10, 0.9, 0, "less"),
            "The 'alternative' parameter of f must be one of 'worse', 'two-sided'. Got 'less'.",
        ),
    ],
)
def test_the_options_are_checked_once_with_the_callers_name(args: tuple, message: str) -> None:
    with pytest.raises(DataError) as caught:
        PermutationOptions.checked(*args, func="f")
    assert str(caught.value) == message


def test_checked_options_are_kept_as_given() -> None:
    assert PermutationOptions.checked(10, 0.9, 3, "two-sided", func="f") == PermutationOptions(
        10, 0.9, 3, "two-sided"
    )
