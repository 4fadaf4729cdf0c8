"""Numbers that need a word beside them: a clamped debiased ECE, an estimate outside its own interval.

Two cases would mislead a reader if printed bare, and each is printed with a mark that a legend line
below the table explains:

- **A clamped debiased ECE.** The debiased ECE (``ece_debiased``, ``ece_debiased_mass``) is the square
  root of an unbiased estimate of the squared calibration error, and that estimate can be negative (the
  observed gaps between accuracy and confidence are smaller than sampling noise). The stored estimate is
  then ``sqrt(max(D, 0)) == 0.0``: not a measured error of 0, but "the data cannot tell the error from 0".
  It prints as ``< noise [0.000, 0.116]`` (:data:`CLAMPED`), never as ``0.000``.
- **An estimate outside its own interval** (``0.024 [0.025, 0.062]``): a percentile bootstrap interval
  lies where the resampled values fall, and resampling patients biases a plug-in calibration error
  upward, so the interval of a small group's plug-in ECE can sit wholly above the estimate. The numbers
  are printed as computed, followed by :data:`OUTSIDE`.

A table builder formats its cells through one :class:`Marks` and puts :meth:`Marks.legend` under the
table: only the marks the table used are explained. Nothing is computed: the marks compare stored numbers.

>>> marks = Marks()
>>> marks.interval({"estimate": 0.0, "low": 0.0, "high": 0.116}, metric="ece_debiased")
'< noise [0.000, 0.116]'
>>> marks.interval({"estimate": 0.024, "low": 0.025, "high": 0.062}, metric="ece")
'0.024 [0.025, 0.062] †'
>>> sorted(marks.used)
['clamped', 'outside']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sitecal.metrics.registry import ECE_DEBIASED, ECE_DEBIASED_MASS, METRICS

from ._text import format_interval, format_value

__all__ = [
    "CLAMPED",
    "CLAMPED_METRICS",
    "LEGEND",
    "OUTSIDE",
    "Marks",
    "is_clamped",
    "is_outside",
    "near_margin",
]

#: Metrics whose stored estimate is the square root of a clamped squared-error estimate.
CLAMPED_METRICS = frozenset(
    {m.name for m in METRICS if getattr(m, "squared", False)} | {ECE_DEBIASED.name, ECE_DEBIASED_MASS.name}
)
#: Printed in place of a clamped estimate.
CLAMPED = "< noise"
#: Printed after an estimate that lies outside its own interval.
OUTSIDE = "†"

#: The legend line of each mark (plain text: callers escape it for reportlab).
LEGEND = {
    "clamped": (
        f"{CLAMPED}: a debiased ECE clamped at 0 (its squared-error estimate was negative): the data "
        "cannot distinguish the error from 0, not a measured 0; the upper bound of its interval is the "
        "largest error the data allow."
    ),
    "outside": (
        f"{OUTSIDE} the estimate lies outside its own interval. A percentile bootstrap interval lies where "
        "the resampled values fall, and resampling patients (some drawn twice) biases a plug-in estimate "
        "such as ECE upward, most in small groups, so its interval can sit above the estimate. The "
        "numbers are printed as computed."
    ),
}


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def is_clamped(metric: object, estimate: object) -> bool:
    """Whether ``estimate`` of ``metric`` is a debiased ECE clamped at 0 (its squared estimate was < 0).

    >>> is_clamped("ece_debiased", 0.0), is_clamped("ece_debiased", 0.01), is_clamped("ece", 0.0)
    (True, False, False)
    """
    return str(metric) in CLAMPED_METRICS and _number(estimate) == 0.0


def is_outside(estimate: object, low: object, high: object) -> bool:
    """Whether the stored ``estimate`` lies outside ``[low, high]`` (False where any is missing).

    >>> is_outside(0.024, 0.025, 0.062), is_outside(0.03, 0.025, 0.062), is_outside(0.03, None, 0.06)
    (True, False, False)
    """
    est, lo, hi = _number(estimate), _number(low), _number(high)
    if est is None or lo is None or hi is None:
        return False
    return est < lo or est > hi


@dataclass
class Marks:
    """Formats estimates with their marks and remembers which marks it used, for one legend."""

    used: set[str] = field(default_factory=set)

    def interval(
        self, entry: object, *, metric: object = None, signed: bool = False, squared: bool = False
    ) -> str:
        """``entry``'s ``estimate [low, high]`` as the report prints it, with its mark.

        Parameters
        ----------
        entry : Mapping
            With ``estimate``, ``low``, ``high`` (and, where the evaluation stored it, the signed
            ``squared_estimate`` of a debiased ECE).
        metric : str, optional
            The metric the estimate is of; None for a difference or a gap (never clamped).
        signed : bool, default False
            Print a sign on positive numbers (a change or a gap).
        squared : bool, default False
            After a clamped estimate, print its signed squared-error estimate where it is stored.
        """
        if not isinstance(entry, Mapping):
            entry = {}
        estimate, low, high = entry.get("estimate"), entry.get("low"), entry.get("high")
        if metric is not None and is_clamped(metric, estimate):
            self.used.add("clamped")
            text = CLAMPED
            d = _number(entry.get("squared_estimate"))
            if squared and d is not None:
                text += f" (squared estimate {format_value(d, digits=4)})"
            if _number(low) is None or _number(high) is None:
                return text
            return f"{text} [{format_value(low)}, {format_value(high)}]"
        text = format_interval(estimate, low, high, signed=signed)
        if is_outside(estimate, low, high):
            self.used.add("outside")
            text += f" {OUTSIDE}"
        return text

    def legend(self) -> list[str]:
        """The legend lines of the marks used so far, in a fixed order (plain text)."""
        return [LEGEND[key] for key in LEGEND if key in self.used]


def near_margin(result: Mapping[str, Any], criterion: Mapping[str, Any]) -> bool:
    """Whether a judged group's estimate lies closer to a margin than half its interval's width.

    Such a group may stay inconclusive at any size: its interval narrows around an estimate that sits
    near the margin. (A comparison of stored numbers, not a statistic.)

    >>> near_margin({"estimate": 0.081, "low": 0.05, "high": 0.129}, {"upper_margin": 0.1})
    True
    >>> near_margin({"estimate": 0.016, "low": 0.0, "high": 0.112}, {"upper_margin": 0.1})
    False
    """
    est, low, high = (_number(result.get(k)) for k in ("estimate", "low", "high"))
    if est is None or low is None or high is None:
        return False
    margins = [
        m for m in (_number(criterion.get(k)) for k in ("lower_margin", "upper_margin")) if m is not None
    ]
    return any(abs(est - m) < (high - low) / 2 for m in margins)
