"""The number formats and the literal-text escaping the report relies on."""

from __future__ import annotations

import pytest
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.platypus import Paragraph

from sitecal.report import format_interval, format_value
from sitecal.report._text import format_count, format_utc, para_text, plot_text, short_sha

NASTY = '<b>St. Mary\'s & "Ünïcødé" <font color=red>'


@pytest.mark.parametrize(
    ("value", "kwargs", "expected"),
    [
        (0.12345, {}, "0.123"),
        (0.0919, {}, "0.092"),
        (0.0915, {}, "0.091"),  # the double nearest 0.0915 is 0.09149999999999999967: it rounds down
        (1.0, {}, "1.000"),
        (-0.0001, {}, "0.000"),  # a negative zero has no sign
        (0.0042, {"signed": True}, "+0.004"),
        (-0.081, {"signed": True}, "-0.081"),
        (0.0, {"signed": True}, "0.000"),  # no change: no sign either
        (None, {}, "not estimable"),
        (float("nan"), {}, "not estimable"),
        (float("inf"), {}, "+inf"),
        (3, {}, "3.000"),
        (1.7688, {"digits": 2}, "1.77"),
    ],
)
def test_format_value(value: object, kwargs: dict[str, object], expected: str) -> None:
    assert format_value(value, **kwargs) == expected  # type: ignore[arg-type]


def test_format_interval_matches_documented_format() -> None:
    # the schema example of evaluation.json: ECE before 0.112 [0.090, 0.140]
    assert format_interval(0.112, 0.090, 0.140) == "0.112 [0.090, 0.140]"
    assert format_interval(-0.081, -0.10, -0.06, signed=True) == "-0.081 [-0.100, -0.060]"
    assert format_interval(0.004, -0.01, 0.02, signed=True) == "+0.004 [-0.010, +0.020]"
    assert format_interval(0.123, None, 0.2) == "0.123 [interval not estimable]"
    assert format_interval(None, None, None) == "not estimable"


def test_counts_hashes_and_times() -> None:
    assert format_count(1999) == "1,999"
    assert format_count(None) == "not recorded"
    assert short_sha("6507c704747f83734695568d169827") == "6507c704747f"
    assert short_sha(None) == "not recorded"
    assert format_utc("2026-12-02T18:00:00Z") == "2026-12-02 18:00 UTC"
    assert format_utc("2026-12-02T19:30:00+01:00") == "2026-12-02 18:30 UTC"
    assert format_utc("yesterday") == "yesterday"  # shown as recorded, not dropped


def test_para_text_escapes_markup_so_paragraph_prints_it_literally() -> None:
    markup = para_text(NASTY)
    assert markup == '&lt;b&gt;St. Mary\'s &amp; "Ünïcødé" &lt;font color=red&gt;'
    # reportlab parses the escaped text back to exactly the original characters
    paragraph = Paragraph(markup, getSampleStyleSheet()["Normal"])
    assert "".join(frag.text for frag in paragraph.frags) == NASTY


def test_para_text_replaces_control_characters_and_keeps_newlines() -> None:
    assert para_text("a\x00b\x1bc") == "a\ufffdb\ufffdc"
    assert para_text("line 1\nline 2") == "line 1<br/>line 2"
    assert para_text(None) == "not recorded"


def test_plot_text_escapes_dollar_and_truncates() -> None:
    assert plot_text("cost $5 and $6") == r"cost \$5 and \$6"
    assert plot_text("x" * 60, max_chars=10) == "x" * 9 + "…"
    assert plot_text("two\n  lines") == "two lines"
