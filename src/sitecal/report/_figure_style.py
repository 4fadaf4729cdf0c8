"""The look the report's figures share: print resolution, colours, type sizes and axis style."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AFTER",
    "AFTER_FILL",
    "BEFORE",
    "BEFORE_FILL",
    "FIGURE_DPI",
    "INK",
    "LABEL_PT",
    "SMALL_PT",
    "THRESHOLD",
    "style_axis",
]

FIGURE_DPI = 200
"""Resolution of the PNG files; figures are drawn at print size, so this is also the printed dpi."""

BEFORE = "#8c8c8c"  # grey: the uncalibrated model
AFTER = "#1f4e79"  # dark blue: after temperature scaling
BEFORE_FILL = "#d9d9d9"
AFTER_FILL = "#b7cde3"
THRESHOLD = "#a61c1c"
INK = "#222222"

SMALL_PT = 7.0
"""Tick labels, in points."""
LABEL_PT = 8.0
"""Axis labels and panel titles, in points."""


def style_axis(ax: Any) -> None:
    """Thin ticks and spines, no top or right spine."""
    ax.tick_params(labelsize=SMALL_PT, width=0.6, length=2.5, color="0.3")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_linewidth(0.6)
