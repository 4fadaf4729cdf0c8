"""Text handling for the report: literal escaping and the number formats the report prints.

Every string that comes from outside sitecal (protocol text, DICOM header values such as an
``InstitutionName``, file paths, the command line) reaches a reportlab ``Paragraph`` only through
:func:`para_text`, and a matplotlib text only through :func:`plot_text`, so that markup-looking input
such as ``<b>St. Mary's & "Ünïcødé"`` is printed as typed and never interpreted.

Number formats (one rule for the whole document, so a reader can compare any two cells):

- a statistic: 3 decimals, ``0.123``, rounded from the stored binary double as Python's ``format``
  does (so 0.0915, stored as 0.0914999…, prints ``0.091``); a negative zero prints as ``0.000``;
- an estimate with its interval: ``0.123 [0.101, 0.145]`` (:func:`format_interval`);
- a change (after - before): signed, ``-0.081 [-0.100, -0.060]``, ``+0.004 [-0.010, +0.020]``;
- a count: thousands separated, ``1,999``;
- a value the pipeline recorded as null: ``not estimable``; a field that is absent: ``not recorded``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from numbers import Real
from typing import Any, TypeGuard
from xml.sax.saxutils import escape

__all__ = [
    "NOT_ESTIMABLE",
    "NOT_RECORDED",
    "format_count",
    "format_interval",
    "format_utc",
    "format_value",
    "para_text",
    "plot_text",
    "short_sha",
]

NOT_RECORDED = "not recorded"
NOT_ESTIMABLE = "not estimable"

# C0/C1 control characters other than tab and newline: not valid in XML and invisible in print.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _clean(value: object) -> str:
    return _CONTROL.sub("\ufffd", str(value))


def para_text(value: object, *, missing: str = NOT_RECORDED) -> str:
    r"""Return ``value`` as Paragraph markup that prints literally.

    Parameters
    ----------
    value : object
        Any value; ``None`` prints as ``missing``. Non-strings are converted with ``str``.
    missing : str, default "not recorded"
        Text for ``None``.

    Returns
    -------
    str
        The text with control characters replaced by U+FFFD and ``&``, ``<``, ``>`` escaped
        (``xml.sax.saxutils.escape``), newlines kept as ``<br/>``.

    Examples
    --------
    >>> para_text('<b>St. Mary & "x"')
    '&lt;b&gt;St. Mary &amp; "x"'
    """
    if value is None:
        return escape(missing)
    return escape(_clean(value)).replace("\n", "<br/>")


def plot_text(value: object, *, max_chars: int = 48) -> str:
    r"""Return ``value`` as a one-line label for a matplotlib figure.

    Control characters are replaced, over-long labels end in an ellipsis, and ``$`` is escaped as
    ``\$`` so that matplotlib's mathtext prints it as typed instead of starting a formula.

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
    text = " ".join(_clean(value).split())
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text.replace("$", r"\$")


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
