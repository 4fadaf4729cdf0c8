"""The group membership fingerprint: equal for the same set of rows, whatever its form; no identifiers."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from sitecal.evaluation._group_identity import DIGEST_CHARS, membership_digest


def _reference(indices: list[int]) -> str:
    # written independently of the module: the prefix, then each sorted index as a little-endian int64
    payload = b"sitecal group membership v1\n" + b"".join(struct.pack("<q", i) for i in sorted(indices))
    return hashlib.sha256(payload).hexdigest()[:16]


def test_the_digest_is_the_truncated_sha256_of_the_sorted_indices() -> None:
    assert DIGEST_CHARS == 16
    assert membership_digest([7, 1, 300]) == _reference([1, 7, 300])
    # the empty set has a digest too: the prefix alone
    assert (
        membership_digest(np.array([], dtype=int))
        == hashlib.sha256(b"sitecal group membership v1\n").hexdigest()[:16]
    )


def test_a_mask_and_its_indices_in_any_order_give_the_same_digest() -> None:
    mask = np.zeros(2000, dtype=bool)
    mask[[3, 17, 585, 1999]] = True
    assert membership_digest(mask) == membership_digest([1999, 585, 3, 17]) == _reference([3, 17, 585, 1999])


def test_another_set_of_the_same_size_gives_another_digest() -> None:
    # sizes alone are not proof: 585 rows starting at 0 and 585 rows starting at 1
    assert membership_digest(np.arange(585)) != membership_digest(np.arange(1, 586))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (np.zeros((2, 2), dtype=bool), r"must be one-dimensional\. Got shape \(2, 2\)\."),
        ([1, -1], r"must hold row indices >= 0\. Got -1\."),
        ([1, 1], r"must name each row once\. Got a repeated index\."),
        ([0.5], r"must be a boolean mask or integer row indices\. Got dtype float64\."),
    ],
)
def test_bad_rows_are_refused_with_the_parameter_named(rows: object, message: str) -> None:
    with pytest.raises(ValueError, match=r"The 'rows' parameter of membership_digest " + message):
        membership_digest(rows)  # type: ignore[arg-type]
