"""Figures of the validation report, drawn from ``evaluation.json`` content only.

Each function takes the stored dicts and returns a :class:`matplotlib.figure.Figure` made at its
printed size, so that 8 pt in the figure is 8 pt on paper. No statistic is computed here: bar heights,
counts, intervals and thresholds are read from the evaluation as they are.

The figures are built on ``Figure`` objects with an Agg canvas, never through ``pyplot``, so rendering a
report changes no global matplotlib state (backend, rcParams, open figures).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sitecal._io import write_bytes_atomic
from sitecal.errors import DataError
from sitecal.metrics.registry import ECE

from ._figure_style import AFTER, AFTER_FILL, BEFORE, BEFORE_FILL, FIGURE_DPI, INK, LABEL_PT, style_axis
from ._fonts import figure_fonts
from ._forest import forest_figure
from ._inputs import get
from ._marks import Marks
from ._text import plot_text

__all__ = ["FIGURE_DPI", "criterion_metrics", "forest_figure", "reliability_figure", "save_png"]


def _reliability_arrays(curve: Any, path: str) -> tuple[np.ndarray, ...]:
    keys = ("bin_edges", "confidence", "accuracy", "count")
    if not isinstance(curve, Mapping) or any(not isinstance(curve.get(k), Sequence) for k in keys):
        raise DataError(
            f"evaluation.json: '{path}' must hold the lists {', '.join(keys)}; regenerate the evaluation."
        )
    edges = np.asarray(curve["bin_edges"], dtype=float)
    n_bins = len(edges) - 1
    lengths = {k: len(curve[k]) for k in keys[1:]}
    if n_bins < 1 or any(v != n_bins for v in lengths.values()):
        raise DataError(
            f"evaluation.json: '{path}' has {len(edges)} bin edges, so it needs {max(n_bins, 0)} values in "
            f"each of confidence, accuracy and count; got {lengths}. Regenerate the evaluation."
        )

    def floats(values: Sequence[Any]) -> np.ndarray:
        return np.array([np.nan if v is None else float(v) for v in values], dtype=float)

    return edges, floats(curve["confidence"]), floats(curve["accuracy"]), floats(curve["count"])


_STAGES = (
    ("before", "Before calibration", BEFORE, BEFORE_FILL),
    ("after", "After calibration", AFTER, AFTER_FILL),
)
"""``(stage, panel title, line colour, fill colour)`` of the two columns of a reliability diagram."""


def _draw_accuracy_panel(
    ax: Any, curve: tuple[np.ndarray, ...], *, heading: str, ink: str, fill: str
) -> None:
    """Draw one stage's accuracy bars, mean-confidence points and the diagonal on ``ax``."""
    edges, conf, acc, count = curve
    lo, width = edges[:-1], np.diff(edges)
    shown = (count > 0) & np.isfinite(acc)
    ax.bar(
        lo[shown],
        acc[shown],
        width=width[shown],
        align="edge",
        color=fill,
        edgecolor=ink,
        linewidth=0.6,
        zorder=2,
    )
    with_conf = shown & np.isfinite(conf)
    ax.plot(conf[with_conf], acc[with_conf], "o", ms=2.8, color=ink, zorder=4)
    ax.plot([edges[0], edges[-1]], [edges[0], edges[-1]], ls="--", lw=0.8, color=INK, zorder=3)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("Observed accuracy", fontsize=LABEL_PT)
    ax.tick_params(labelbottom=False)
    ax.set_title(heading, fontsize=LABEL_PT, loc="left", color=INK)
    ax.grid(axis="y", lw=0.3, color="0.85", zorder=0)
    style_axis(ax)


def _draw_count_panel(
    ax: Any, edges: np.ndarray, count: np.ndarray, *, count_max: float, ink: str, fill: str
) -> None:
    """Draw one stage's studies per bin on ``ax``, on a scale shared by both stages (``count_max``)."""
    lo, width = edges[:-1], np.diff(edges)
    counts = np.nan_to_num(count)
    ax.bar(
        lo[counts > 0],
        counts[counts > 0],
        width=width[counts > 0],
        align="edge",
        color=fill,
        edgecolor=ink,
        linewidth=0.5,
    )
    ax.set_ylim(0.0, max(count_max, 1.0) * 1.1)
    ax.set_xlabel("Confidence (top-label probability)", fontsize=LABEL_PT)
    ax.set_ylabel("Studies", fontsize=LABEL_PT)
    style_axis(ax)


def _panel_heading(group: Mapping[str, Any], stage: str, label: str) -> str:
    """The panel title: the stage, with the group's plug-in ECE and interval when it has one."""
    ece = get(group, "metrics", ECE.name, stage)
    heading = label
    if isinstance(ece, Mapping):
        heading += "   ECE (plug-in) " + Marks().interval(ece)  # † where outside its interval
    return heading


def _reliability_legend(fig: Figure) -> None:
    """Add the legend shared by both columns below the panels."""
    fig.legend(
        handles=[
            Patch(facecolor=BEFORE_FILL, edgecolor=BEFORE, lw=0.6, label="accuracy in bin (before)"),
            Patch(facecolor=AFTER_FILL, edgecolor=AFTER, lw=0.6, label="accuracy in bin (after)"),
            Line2D([], [], ls="", marker="o", ms=2.8, color=INK, label="bin mean confidence"),
            Line2D([], [], ls="--", lw=0.8, color=INK, label="perfect calibration"),
        ],
        loc="outside lower center",
        ncols=4,
        fontsize=6.5,
        frameon=False,
        handlelength=1.6,
    )


@figure_fonts
def reliability_figure(
    group: Mapping[str, Any], *, title: str, path: str = "group", width_in: float = 6.7
) -> Figure:
    """Draw the reliability diagram of one group, before and after calibration side by side.

    The upper panels show, per confidence bin, the observed accuracy as a bar spanning the bin and
    the bin's mean confidence as a point at the bar's top; the diagonal is perfect calibration, so a
    point's vertical distance from it is that bin's calibration gap. The lower panels show how many
    studies fell in each bin (the same scale before and after). Empty bins are drawn as gaps.

    Parameters
    ----------
    group : Mapping
        A GROUP entry of ``evaluation.json`` with ``reliability.before`` and ``reliability.after``
        (``bin_edges`` (B + 1,), ``confidence``, ``accuracy``, ``count`` (B,), nulls for empty bins);
        ``metrics.ece`` is shown in the panel titles when present.
    title : str
        Figure title (printed literally).
    path : str, default "group"
        Where the group sits in ``evaluation.json``, for error messages.
    width_in : float, default 6.7
        Printed width in inches; the height follows.

    Returns
    -------
    matplotlib.figure.Figure
        The figure, with an Agg canvas attached.

    Raises
    ------
    DataError
        If the reliability lists are missing or their lengths disagree with the bin edges.
    """
    fig = Figure(figsize=(width_in, width_in * 0.56), dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 2, height_ratios=(3.0, 1.15))
    curves = [
        _reliability_arrays(get(group, "reliability", s), f"{path}.reliability.{s}") for s, *_ in _STAGES
    ]
    count_max = max(float(np.nanmax(c[3])) if np.isfinite(c[3]).any() else 0.0 for c in curves)
    for col, ((stage, label, ink, fill), curve) in enumerate(zip(_STAGES, curves, strict=True)):
        top = fig.add_subplot(grid[0, col])
        bottom = fig.add_subplot(grid[1, col], sharex=top)
        heading = _panel_heading(group, stage, label)
        _draw_accuracy_panel(top, curve, heading=heading, ink=ink, fill=fill)
        _draw_count_panel(bottom, curve[0], curve[3], count_max=count_max, ink=ink, fill=fill)
    fig.suptitle(plot_text(title, max_chars=110), fontsize=9, x=0.01, ha="left", color=INK)
    _reliability_legend(fig)
    return fig


def criterion_metrics(evaluation: Mapping[str, Any]) -> list[str]:
    """The metrics of the groups' tables that an acceptance criterion judges, in the criteria's order.

    A criterion on a stage (before or after calibration) of a metric every group carries; the slope,
    intercept and O:E criteria are judged on the recalibration analysis and are not among them.
    """
    reported = [str(m) for m in get(evaluation, "metrics") or []]
    found: list[str] = []
    for criterion in get(evaluation, "acceptance") or []:
        metric = get(criterion, "metric")
        if metric in reported and get(criterion, "stage") in ("before", "after") and metric not in found:
            found.append(str(metric))
    return found


@figure_fonts
def save_png(fig: Figure, path: Path, *, dpi: int = FIGURE_DPI) -> Path:
    """Write ``fig`` as a PNG at ``dpi`` and as an SVG beside it (``path`` with suffix ``.svg``).

    The SVG is for slides and notebooks. Each file is written atomically (temporary file in the same
    folder, then rename); the same figure gives the same bytes (no dates; fixed SVG ids).

    Raises
    ------
    OutputError
        If the folder cannot be written.
    """
    buffer = BytesIO()
    with warnings.catch_warnings():
        # A character that neither DejaVu Sans nor an installed fallback font has (see _fonts) loses its
        # glyph in the figure only; the tables print the full text. That is not a reason to fail the report.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font", category=UserWarning)
        fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": "sitecal report (matplotlib)"})
        vector = BytesIO()
        with matplotlib.rc_context({"svg.hashsalt": "sitecal", "svg.fonttype": "path"}):
            fig.savefig(
                vector, format="svg", metadata={"Date": None, "Creator": "sitecal report (matplotlib)"}
            )
    write_bytes_atomic(path, buffer.getvalue())
    write_bytes_atomic(path.with_suffix(".svg"), vector.getvalue())
    return path
