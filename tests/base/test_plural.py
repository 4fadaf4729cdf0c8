"""The words that follow a count in the command's messages."""

from __future__ import annotations

import pytest

from sitecal._text import plural


@pytest.mark.parametrize(
    ("count", "expected"),
    [(0, "studies"), (1, "study"), (2, "studies"), (-1, "studies"), (1_000, "studies")],
)
def test_the_singular_only_after_exactly_one(count: int, expected: str) -> None:
    # English: "1 study", "0 studies", "2 studies"
    assert plural(count, "study", "studies") == expected


def test_the_plural_adds_an_s_unless_given() -> None:
    assert [plural(n, "label row") for n in (0, 1, 2)] == ["label rows", "label row", "label rows"]
    assert [plural(n, "series", "series") for n in (1, 2)] == ["series", "series"]
