"""Figures of the monitoring report: one metric of one group over the windows, and the tests' evidence.

Drawn from ``monitoring.json`` content only (:class:`sitecal.results.MonitoringDocument`): every point,
interval, margin, threshold and alarm is read from the document as stored; nothing is computed but the
x positions. Like :mod:`.figures`, each figure is a :class:`matplotlib.figure.Figure` with an Agg canvas,
made at its printed size, never through ``pyplot``.

The x axis holds every window from the first to the last of the document, calendar windows in which no
study arrived included (:func:`window_axis`), so that a gap in the data is a gap in the figure.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sitecal.results import Interval

from ._figure_style import AFTER, FIGURE_DPI, INK, LABEL_PT, SMALL_PT, THRESHOLD, style_axis
from ._fonts import figure_fonts
from ._text import plot_text

__all__ = [
    "MAX_AXIS_WINDOWS",
    "AlarmMark",
    "EvidenceSeries",
    "evidence_figure",
    "trend_figure",
    "window_axis",
]

#: Windows an axis is filled to at most (ten years of weeks); a longer span keeps the document's windows.
MAX_AXIS_WINDOWS = 520
#: Tick labels printed at most; with more windows every k-th is labelled.
_MAX_TICKS = 14
_SERIES_COLOURS = ("#1f4e79", "#8c8c8c", "#b35806", "#4d9221", "#542788", "#c51b7d", "#35978f", "#7f3b08")

_MONTH = re.compile(r"(\d{4})-(\d{2})")
_QUARTER = re.compile(r"(\d{4})-Q([1-4])")
_WEEK = re.compile(r"(\d{4})-W(\d{2})")


def _index(label: str, kind: str) -> int:
    """The window's position on a calendar line; ValueError if the label is not one of ``kind``."""
    if kind == "month" and (m := _MONTH.fullmatch(label)) and 1 <= int(m[2]) <= 12:
        return int(m[1]) * 12 + int(m[2]) - 1
    if kind == "quarter" and (m := _QUARTER.fullmatch(label)):
        return int(m[1]) * 4 + int(m[2]) - 1
    if kind == "week" and (m := _WEEK.fullmatch(label)):
        monday = dt.date.fromisocalendar(int(m[1]), int(m[2]), 1)  # ValueError for a week 54
        return (monday.toordinal() - 1) // 7  # ordinal 1 (0001-01-01) is a Monday
    raise ValueError(label)


def _label(index: int, kind: str) -> str:
    if kind == "month":
        return f"{index // 12:04d}-{index % 12 + 1:02d}"
    if kind == "quarter":
        return f"{index // 4:04d}-Q{index % 4 + 1}"
    year, week, _ = dt.date.fromordinal(index * 7 + 1).isocalendar()
    return f"{year:04d}-W{week:02d}"


def window_axis(labels: Iterable[str], kind: str) -> list[str]:
    """Every window from the first to the last of ``labels``, in calendar order.

    Parameters
    ----------
    labels : iterable of str
        The windows of the document (``2027-03``, ``2027-W09``, ``2027-Q1``), repeats allowed.
    kind : {"week", "month", "quarter"}
        The document's window kind.

    Returns
    -------
    list of str
        The windows, with the calendar windows between them that hold no study; the sorted labels as
        they are where one does not parse as ``kind`` or the span exceeds :data:`MAX_AXIS_WINDOWS`.

    Examples
    --------
    >>> window_axis(["2027-03", "2027-01"], "month")
    ['2027-01', '2027-02', '2027-03']
    >>> window_axis(["2026-W52", "2027-W01"], "week")
    ['2026-W52', '2026-W53', '2027-W01']
    """
    ordered = sorted(set(labels))
    try:
        positions = [_index(label, kind) for label in ordered]
    except ValueError:
        return ordered
    if len(ordered) < 2 or positions[-1] - positions[0] >= MAX_AXIS_WINDOWS:
        return ordered
    return [_label(i, kind) for i in range(positions[0], positions[-1] + 1)]


@dataclass(frozen=True)
class AlarmMark:
    """A window where a test of the group first alarmed, and what alarmed (plain text)."""

    window: str
    text: str


@dataclass(frozen=True)
class EvidenceSeries:
    """One test's log e-value per window of the axis (None: the group had no window there)."""

    label: str
    values: tuple[float | None, ...]
    threshold: float


def _new_figure(width_in: float, height_in: float) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width_in, height_in), dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _x_axis(ax: Any, axis: Sequence[str]) -> None:
    """Window labels as ticks, every k-th where there are many; a little room at both ends."""
    step = max(1, math.ceil(len(axis) / _MAX_TICKS))
    ticks = list(range(0, len(axis), step))
    ax.set_xticks(ticks)
    ax.set_xticklabels(
        [plot_text(axis[i], max_chars=12) for i in ticks], rotation=30 if len(ticks) > 6 else 0, ha="right"
    )
    ax.set_xlim(-0.6, max(len(axis) - 0.4, 0.6))


def _mark_alarms(ax: Any, axis: Sequence[str], alarms: Sequence[AlarmMark]) -> None:
    """A red vertical line at each window where a test of the group first alarmed, labelled."""
    at: dict[int, list[str]] = {}
    for mark in alarms:
        if mark.window in axis:
            at.setdefault(axis.index(mark.window), []).append(mark.text)
    for x, texts in sorted(at.items()):
        ax.axvline(x, color=THRESHOLD, lw=1.0, ls=":", zorder=1)
        label = "alarm: " + "; ".join(texts)
        ax.annotate(
            plot_text(label, max_chars=70),
            xy=(x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3 if x < len(axis) / 2 else -3, -2),
            textcoords="offset points",
            va="top",
            ha="left" if x < len(axis) / 2 else "right",
            fontsize=SMALL_PT - 0.5,
            color=THRESHOLD,
        )


@figure_fonts
def trend_figure(
    axis: Sequence[str],
    points: Sequence[Interval | None],
    *,
    title: str,
    ylabel: str,
    margins: Sequence[float] = (),
    reference: float | None = None,
    alarms: Sequence[AlarmMark] = (),
    width_in: float = 6.7,
) -> Figure:
    """Draw one metric of one group over the windows: estimate, interval, margins and alarms.

    Parameters
    ----------
    axis : sequence of str
        The windows, in order (:func:`window_axis`).
    points : sequence of Interval or None
        The metric in each window of ``axis``: a point at the estimate and a bar from ``low`` to
        ``high`` (a window's own interval); None leaves a gap (no labelled data, or no window).
    title, ylabel : str
        Printed literally (:func:`._text.plot_text`).
    margins : sequence of float
        The margins of the group's tests on this metric, as dashed red lines.
    reference : float, optional
        The value of no change (a temperature of 1, a gap of 0), as a thin grey line.
    alarms : sequence of AlarmMark
        Where a test of the group first alarmed.
    width_in : float, default 6.7
        Printed width in inches.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if len(points) != len(axis):
        raise ValueError(f"trend_figure: {len(points)} points for {len(axis)} windows.")
    fig, ax = _new_figure(width_in, 1.95)
    xs: list[int] = []
    ys: list[float] = []
    for i, p in enumerate(points):
        if p is None or not math.isfinite(p.estimate):
            continue
        xs.append(i)
        ys.append(p.estimate)
        if math.isfinite(p.low) and math.isfinite(p.high):
            ax.vlines(i, min(p.low, p.high), max(p.low, p.high), color=AFTER, lw=1.1, zorder=3)
    ax.plot(xs, ys, "o", ms=3.2, color=AFTER, zorder=4)
    if reference is not None:
        ax.axhline(reference, color="0.6", lw=0.6, zorder=0)
    for value in sorted(set(margins)):
        ax.axhline(value, color=THRESHOLD, lw=0.9, ls="--", zorder=2)
    _mark_alarms(ax, axis, alarms)
    _x_axis(ax, axis)
    ax.set_ylabel(plot_text(ylabel, max_chars=40), fontsize=LABEL_PT)
    ax.set_title(plot_text(title, max_chars=110), fontsize=LABEL_PT, loc="left", color=INK)
    ax.grid(axis="y", lw=0.3, color="0.88", zorder=0)
    style_axis(ax)
    return fig


@figure_fonts
def evidence_figure(
    axis: Sequence[str],
    series: Sequence[EvidenceSeries],
    *,
    title: str,
    alarms: Sequence[AlarmMark] = (),
    width_in: float = 6.7,
) -> Figure:
    """Draw each test's log e-value over the windows, with its alarm threshold.

    Parameters
    ----------
    axis : sequence of str
        The windows, in order.
    series : sequence of EvidenceSeries
        One line per test; a None value is a window without the group (the line breaks there).
    title : str
        Printed literally.
    alarms : sequence of AlarmMark
        Where a test of the group first alarmed.
    width_in : float, default 6.7
        Printed width in inches.
    """
    fig, ax = _new_figure(width_in, 2.2)
    for k, line in enumerate(series):
        if len(line.values) != len(axis):
            raise ValueError(f"evidence_figure: {len(line.values)} values for {len(axis)} windows.")
        ys = [math.nan if v is None or not math.isfinite(v) else v for v in line.values]
        colour = _SERIES_COLOURS[k % len(_SERIES_COLOURS)]
        ax.plot(
            range(len(axis)),
            ys,
            "-o",
            ms=2.4,
            lw=0.9,
            color=colour,
            label=plot_text(line.label, max_chars=60),
        )
    for value in sorted({line.threshold for line in series}):
        ax.axhline(value, color=THRESHOLD, lw=0.9, ls="--", zorder=2)
        ax.annotate(
            f"alarm threshold {value:.2f}",
            xy=(0.0, value),
            xycoords=("axes fraction", "data"),
            xytext=(2, 2),
            textcoords="offset points",
            fontsize=SMALL_PT - 0.5,
            color=THRESHOLD,
        )
    ax.axhline(0.0, color="0.6", lw=0.6, zorder=0)
    _mark_alarms(ax, axis, alarms)
    _x_axis(ax, axis)
    ax.set_ylabel("log e-value", fontsize=LABEL_PT)
    ax.set_title(plot_text(title, max_chars=110), fontsize=LABEL_PT, loc="left", color=INK)
    ax.grid(axis="y", lw=0.3, color="0.88", zorder=0)
    style_axis(ax)
    if series:
        fig.legend(loc="outside lower center", ncols=2, fontsize=6.3, frameon=False, handlelength=1.6)
    return fig
