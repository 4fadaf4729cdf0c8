"""Study dates to monitoring windows: ISO weeks, calendar months or quarters.

A date is read as ``YYYY-MM-DD`` or as DICOM writes StudyDate, ``YYYYMMDD``; nothing else is guessed
(``03/04/2027`` is March or April depending on who wrote it). Dates after ``today`` are refused: a study
cannot have been read before it was made, so a future date is a clock or an export gone wrong, and a
window built on it would be judged before it has happened.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from sitecal.errors import DataError

__all__ = [
    "EARLY_DATE",
    "FUTURE_DATE",
    "NOT_A_DATE",
    "WindowKind",
    "parse_dates",
    "read_date",
    "window_label",
    "window_labels",
    "window_start",
]

WindowKind = Literal["week", "month", "quarter"]

_DATE = re.compile(r"([0-9]{4})-?([0-9]{2})-?([0-9]{2})")  # ASCII digits only
#: Earliest date taken: older is a placeholder (DICOM's 19000101, a spreadsheet's 1899-12-30) or a typo.
_EARLIEST = dt.date(1990, 1, 1)
_EPOCH = dt.date(1970, 1, 1)


def parse_dates(values: Sequence[str], *, where: str, today: dt.date | None = None) -> NDArray[np.int64]:
    """Each text as a date (days since 1970-01-01), or :class:`DataError` naming the first bad row.

    Parameters
    ----------
    values : sequence of str
        ``YYYY-MM-DD`` or ``YYYYMMDD`` per row (surrounding spaces ignored).
    where : str
        Names the column in messages (``predictions.csv: column 'study_date'``).
    today : date, optional
        The latest date accepted (default: today, UTC).

    Raises
    ------
    DataError
        A date that is empty, not of either form, not a calendar date, before 1990 or after ``today``
        (the row, counted from 1 after the header, and the value's form, never the value: a date may be a
        patient's).
    """
    latest = today or dt.datetime.now(dt.UTC).date()
    days = np.empty(len(values), dtype=np.int64)
    for row, text in enumerate(values, start=1):
        day = read_date(text, latest=latest)
        if isinstance(day, str):
            what = (
                "not a date (expected YYYY-MM-DD or YYYYMMDD). Fix the export, or leave the row out"
                if day == NOT_A_DATE
                else f"{day}: a clock or an export gone wrong. Fix the row"
            )
            raise DataError(f"{where}: row {row}: {what}; nothing was monitored.")
        days[row - 1] = day
    return days


#: :func:`read_date`'s reasons (the value's form, never the value: a date may be a patient's).
NOT_A_DATE = "not a date"
FUTURE_DATE = "a date in the future"
EARLY_DATE = "a date before 1990"


def read_date(text: object, *, latest: dt.date) -> int | str:
    """One ``YYYY-MM-DD`` or ``YYYYMMDD`` text as days since 1970-01-01, or why it is not one.

    >>> end = dt.date(2027, 12, 31)
    >>> read_date("2027-03-04", latest=end), read_date(" 20270304", latest=end)
    (20881, 20881)
    >>> read_date("20270230", latest=end), read_date("20280101", latest=end), read_date("", latest=end)
    ('not a date', 'a date in the future', 'not a date')
    >>> read_date("２０２７０３０４", latest=end)  # full-width digits: not as DICOM writes a date
    'not a date'
    """
    match = _DATE.fullmatch(str(text if text is not None else "").strip())
    if match is None:
        return NOT_A_DATE
    try:
        date = dt.date(*(int(part) for part in match.groups()))
    except ValueError:
        return NOT_A_DATE
    if date > latest:
        return FUTURE_DATE
    if date < _EARLIEST:
        return EARLY_DATE
    return (date - _EPOCH).days


def window_label(day: dt.date, kind: WindowKind) -> str:
    """The window holding ``day``: ``2027-W09`` (ISO week), ``2027-03`` (month) or ``2027-Q1`` (quarter).

    >>> window_label(dt.date(2027, 3, 4), "week"), window_label(dt.date(2027, 3, 4), "month")
    ('2027-W09', '2027-03')
    >>> window_label(dt.date(2027, 3, 4), "quarter"), window_label(dt.date(2027, 1, 1), "week")
    ('2027-Q1', '2026-W53')
    """
    if kind == "week":
        year, week, _ = day.isocalendar()
        return f"{year}-W{week:02d}"
    if kind == "month":
        return f"{day.year}-{day.month:02d}"
    return f"{day.year}-Q{(day.month - 1) // 3 + 1}"


def window_start(label: str, kind: WindowKind) -> dt.date:
    """The first day of the window ``label`` names (its inverse: ``window_label(window_start(w)) == w``)."""
    if kind == "week":
        year, week = label.split("-W")
        return dt.date.fromisocalendar(int(year), int(week), 1)
    if kind == "month":
        year, month = label.split("-")
        return dt.date(int(year), int(month), 1)
    year, quarter = label.split("-Q")
    return dt.date(int(year), 3 * (int(quarter) - 1) + 1, 1)


def window_labels(days: NDArray[np.int64], kind: WindowKind) -> NDArray[np.str_]:
    """:func:`window_label` of each day (days since 1970-01-01), computed once per distinct day."""
    unique, inverse = np.unique(days, return_inverse=True)
    epoch = dt.date(1970, 1, 1)
    labels = np.array([window_label(epoch + dt.timedelta(days=int(d)), kind) for d in unique], dtype=str)
    out: NDArray[np.str_] = labels[inverse.reshape(-1)]
    return out
