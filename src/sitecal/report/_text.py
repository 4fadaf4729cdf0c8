r"""Text handling for the report: literal escaping and the number formats the report prints.

Every string that comes from outside sitecal (protocol text, DICOM header values such as an
``InstitutionName``, file paths, the command line) reaches a reportlab ``Paragraph`` only through
:func:`para_text`, and a matplotlib text only through :func:`plot_text`, so that markup-looking input
such as ``<b>St. Mary's & "Ünïcødé"`` is printed as typed and never interpreted. On the way:

- control characters become U+FFFD (visible, and valid in the PDF), and explicit direction controls
  (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C) are dropped, so that a header value cannot make
  text read in another order than the characters it holds;
- right-to-left text (Hebrew, Arabic) is put in display order with the Unicode bidirectional algorithm
  (``python-bidi``), Arabic letters first joined into their contextual forms (``arabic-reshaper``),
  since neither reportlab nor matplotlib does either; text without right-to-left characters is untouched.
  Each line is reordered as one line, so right-to-left text that wraps over several lines reads its
  lines top to bottom in the wrapping order;
- characters DejaVu Sans lacks (CJK, emoji, other scripts) are set in a font that has them
  (:mod:`._fonts`);
- a header value holding several values (a list, as DICOM's backslash-separated multi-values are read)
  prints as ``A\B``, the way DICOM writes it, not as a Python list.

Number formats (one rule for the whole document, so a reader can compare any two cells):

- a statistic: 3 decimals, ``0.123``, rounded from the stored binary double as Python's ``format``
  does (so 0.0915, stored as 0.0914999…, prints ``0.091``); a negative zero prints as ``0.000``;
- an estimate with its interval: ``0.123 [0.101, 0.145]`` (:func:`format_interval`);
- a change (after - before): signed, ``-0.081 [-0.100, -0.060]``, ``+0.004 [-0.010, +0.020]``;
- a count: thousands separated, ``1,999``;
- a value the pipeline recorded as null: ``not estimable``; a field that is absent: ``not recorded``.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import unicodedata
from datetime import UTC, datetime
from numbers import Real
from typing import Any, TypeGuard
from xml.sax.saxutils import escape

from ._fonts import font_runs, matplotlib_lays_out_bidi

try:  # the bidirectional algorithm and Arabic joining: dependencies, but the report prints without them
    from bidi.algorithm import get_display as _get_display
except ImportError:  # pragma: no cover - exercised only where python-bidi is not installed
    _get_display = None
try:
    from arabic_reshaper import reshape as _reshape
except ImportError:  # pragma: no cover - exercised only where arabic-reshaper is not installed
    _reshape = None

__all__ = [
    "NAME_CHARS",
    "NOT_ESTIMABLE",
    "NOT_RECORDED",
    "display_order",
    "format_count",
    "format_interval",
    "format_utc",
    "format_value",
    "name_text",
    "para_text",
    "plain_text",
    "plot_text",
    "short_sha",
]

NOT_RECORDED = "not recorded"
NOT_ESTIMABLE = "not estimable"
#: characters of a group name printed in a sentence or beside its numbers; longer names are cut
NAME_CHARS = 120

log = logging.getLogger(__name__)

# C0/C1 control characters other than tab and newline: not valid in XML and invisible in print.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Explicit direction marks, embeddings, overrides and isolates: invisible, they only reorder text.
_DIRECTION_CONTROL = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_RTL_CLASSES = frozenset({"R", "AL"})


def _clean(value: object) -> str:
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        value = "\\".join(value)  # DICOM's multi-value separator
    return _DIRECTION_CONTROL.sub("", _CONTROL.sub("\ufffd", str(value)))


@functools.cache  # once per process
def _missing(package: str, effect: str) -> None:
    log.warning("%s is not installed, so %s; install it with: pip install %s", package, effect, package)


def _has_rtl(text: str) -> bool:
    return not text.isascii() and any(unicodedata.bidirectional(c) in _RTL_CLASSES for c in text)


def display_order(text: str) -> str:
    """Return one line of ``text`` in the order it is drawn, left to right.

    Text with no right-to-left character is returned as it is. Otherwise Arabic letters are replaced by
    their joined (contextual) forms and the line is reordered by the Unicode bidirectional algorithm,
    its base direction taken from its first strong character.

    Examples
    --------
    >>> display_order("Site 1")
    'Site 1'
    >>> display_order("שלום 12")
    '12 םולש'
    """
    if not _has_rtl(text):
        return text
    if _reshape is not None:
        if any(unicodedata.bidirectional(c) == "AL" for c in text):
            text = _reshape(text)
    else:
        _missing("arabic-reshaper", "Arabic letters print unjoined")
    if _get_display is None:
        _missing("python-bidi", "right-to-left text prints in stored order")
        return text
    return str(_get_display(text))


def _markup_line(text: str) -> str:
    runs = font_runs(display_order(text))
    return "".join(
        escape(t) if font is None else f'<font face="{font}">{escape(t)}</font>' for font, t in runs
    )


def para_text(value: object, *, missing: str = NOT_RECORDED, max_chars: int | None = None) -> str:
    r"""Return ``value`` as Paragraph markup that prints literally.

    Parameters
    ----------
    value : object
        Any value; ``None`` prints as ``missing``. Non-strings are converted with ``str``.
    missing : str, default "not recorded"
        Text for ``None``.
    max_chars : int, optional
        Longer text is cut to ``max_chars - 1`` characters plus ``…``, followed by a note giving the
        length it had (:data:`NAME_CHARS` for a group name printed beside its numbers).

    Returns
    -------
    str
        The text with control characters replaced by U+FFFD and ``&``, ``<``, ``>`` escaped
        (``xml.sax.saxutils.escape``), newlines kept as ``<br/>``; right-to-left lines in display order,
        and runs DejaVu Sans cannot set wrapped in ``<font face="...">`` (see the module docstring).

    Examples
    --------
    >>> para_text('<b>St. Mary & "x"')
    '&lt;b&gt;St. Mary &amp; "x"'
    """
    if value is None:
        return escape(missing)
    text = _clean(value)
    note = ""
    if max_chars is not None and len(text) > max_chars:
        note = f" (shortened from {len(text):,} characters)"
        text = text[: max_chars - 1] + "…"
    return "<br/>".join(_markup_line(line) for line in text.split("\n")) + note


def name_text(value: object) -> str:
    """Return a name (a subgroup's value, read from a header) as markup, cut to :data:`NAME_CHARS`."""
    return para_text(value, max_chars=NAME_CHARS)


def plain_text(value: object, *, max_chars: int) -> str:
    r"""Return ``value`` as one line of plain text, in stored order, at most ``max_chars`` long.

    For text outside paragraphs (PDF bookmarks, the running header): control characters replaced,
    whitespace runs made one space, and over-long text cut to ``max_chars - 1`` characters plus ``…``.

    Examples
    --------
    >>> plain_text("a\n  b", max_chars=10)
    'a b'
    >>> plain_text("abcdef", max_chars=4)
    'abc…'
    """
    text = " ".join(_clean(value).split())
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text


def plot_text(value: object, *, max_chars: int = 48) -> str:
    r"""Return ``value`` as a one-line label for a matplotlib figure.

    Control characters are replaced, over-long labels end in an ellipsis, and ``$`` is escaped as
    ``\$`` so that matplotlib's mathtext prints it as typed instead of starting a formula. Right-to-left
    text is wrapped in a first-strong isolate (U+2068 ... U+2069) for a matplotlib that orders text
    itself (:func:`._fonts.matplotlib_lays_out_bidi`), so that the label it sits in stays left to right;
    for one that does not, it is put in display order here.

    Parameters
    ----------
    value : object
        The label.
    max_chars : int, default 48
        Labels longer than this are cut to ``max_chars - 1`` characters plus ``…``.

    Returns
    -------
    str
        The label.
    """
    text = plain_text(value, max_chars=max_chars).replace("$", r"\$")
    if not _has_rtl(text):
        return text
    if matplotlib_lays_out_bidi():
        # matplotlib orders it; an isolate keeps the label around it (" (n = 282)") left to right
        return f"\u2068{text}\u2069"
    return display_order(text)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, Real) and not isinstance(value, bool)


def format_value(value: object, *, digits: int = 3, signed: bool = False) -> str:
    """Format one statistic with a fixed number of decimals.

    Parameters
    ----------
    value : float or None
        The number; ``None`` gives ``"not estimable"``; a non-number is printed as ``str(value)``.
    digits : int, default 3
        Decimals.
    signed : bool, default False
        Prefix positive values with ``+`` (used for changes after - before).

    Returns
    -------
    str
        For example ``"0.123"``, ``"+0.004"``, ``"-0.081"``; a negative zero prints unsigned.

    Examples
    --------
    >>> format_value(0.12345)
    '0.123'
    >>> format_value(-0.0001)
    '0.000'
    >>> format_value(0.0042, signed=True)
    '+0.004'
    """
    if value is None:
        return NOT_ESTIMABLE
    if not _is_number(value):
        return _clean(value)
    x = float(value)
    if math.isnan(x):
        return NOT_ESTIMABLE
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    text = f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    if float(text) == 0.0:  # -0.000 and +0.000 read as a change that has a sign
        text = f"{0.0:.{digits}f}"
    return text


def format_interval(
    estimate: object, low: object, high: object, *, digits: int = 3, signed: bool = False
) -> str:
    """Format an estimate and its confidence interval as the report prints them.

    Parameters
    ----------
    estimate, low, high : float or None
        Point estimate and interval bounds, as stored in ``evaluation.json``.
    digits : int, default 3
        Decimals, the same for all three numbers.
    signed : bool, default False
        Show the sign of positive numbers (for changes).

    Returns
    -------
    str
        ``"0.123 [0.101, 0.145]"``; ``"0.123 [interval not estimable]"`` when a bound is null;
        ``"not estimable"`` when the estimate is null.

    Examples
    --------
    >>> format_interval(0.112, 0.09, 0.14)
    '0.112 [0.090, 0.140]'
    >>> format_interval(-0.081, -0.1, -0.06, signed=True)
    '-0.081 [-0.100, -0.060]'
    """
    est = format_value(estimate, digits=digits, signed=signed)
    if estimate is None:
        return est
    if low is None or high is None:
        return f"{est} [interval {NOT_ESTIMABLE}]"
    lo = format_value(low, digits=digits, signed=signed)
    hi = format_value(high, digits=digits, signed=signed)
    return f"{est} [{lo}, {hi}]"


def format_count(value: object) -> str:
    """Format a count with thousands separators (``1,999``); ``None`` gives ``"not recorded"``."""
    if value is None:
        return NOT_RECORDED
    if _is_number(value) and float(value) == int(value):
        return f"{int(value):,}"
    return _clean(value)


def short_sha(value: object, *, n: int = 12) -> str:
    """Return the first ``n`` hex digits of a sha256 (``None`` gives ``"not recorded"``)."""
    if value is None or value == "":
        return NOT_RECORDED
    return _clean(value)[:n]


def format_utc(value: object) -> str:
    """Format an ISO 8601 UTC time as ``2026-12-02 18:00 UTC``.

    A value that does not parse is printed as given, so a reader still sees what was recorded.
    """
    if value is None or value == "":
        return NOT_RECORDED
    text = _clean(value)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def words(value: Any) -> str:
    """Turn an identifier such as ``global_fallback`` into ``global fallback``."""
    return _clean(value).replace("_", " ")
