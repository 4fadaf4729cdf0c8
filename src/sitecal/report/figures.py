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
from sitecal.metrics.registry import ECE, METRICS

from ._fonts import figure_fonts
from ._inputs import get
from ._marks import CLAMPED_METRICS, Marks
from ._text import format_value, plot_text

__all__ = ["FIGURE_DPI", "criterion_metrics", "forest_figure", "reliability_figure", "save_png"]

FIGURE_DPI = 200
"""Resolution of the PNG files; figures are drawn at print size, so this is also the printed dpi."""

BEFORE = "#8c8c8c"  # grey: the uncalibrated model
AFTER = "#1f4e79"  # dark blue: after temperature scaling
BEFORE_FILL = "#d9d9d9"
AFTER_FILL = "#b7cde3"
THRESHOLD = "#a61c1c"
INK = "#222222"

#: The printed label of each metric of the registry, by name.
METRIC_LABELS = {m.name: m.label for m in METRICS}

_SMALL = 7.0
_LABEL = 8.0


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


def _style_axis(ax: Any) -> None:
    ax.tick_params(labelsize=_SMALL, width=0.6, length=2.5, color="0.3")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_linewidth(0.6)


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
    stages = (
        ("before", "Before calibration", BEFORE, BEFORE_FILL),
        ("after", "After calibration", AFTER, AFTER_FILL),
    )
    curves = [
        _reliability_arrays(get(group, "reliability", s), f"{path}.reliability.{s}") for s, *_ in stages
    ]
    count_max = max(float(np.nanmax(c[3])) if np.isfinite(c[3]).any() else 0.0 for c in curves)
    for col, ((stage, label, ink, fill), (edges, conf, acc, count)) in enumerate(
        zip(stages, curves, strict=True)
    ):
        top = fig.add_subplot(grid[0, col])
        bottom = fig.add_subplot(grid[1, col], sharex=top)
        lo, width = edges[:-1], np.diff(edges)
        shown = (count > 0) & np.isfinite(acc)
        top.bar(
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
        top.plot(conf[with_conf], acc[with_conf], "o", ms=2.8, color=ink, zorder=4)
        top.plot([edges[0], edges[-1]], [edges[0], edges[-1]], ls="--", lw=0.8, color=INK, zorder=3)
        top.set_xlim(edges[0], edges[-1])
        top.set_ylim(0.0, 1.0)
        top.set_ylabel("Observed accuracy", fontsize=_LABEL)
        top.tick_params(labelbottom=False)
        ece = get(group, "metrics", ECE.name, stage)
        heading = label
        if isinstance(ece, Mapping):
            heading += "   ECE (plug-in) " + Marks().interval(ece)  # † where outside its interval
        top.set_title(heading, fontsize=_LABEL, loc="left", color=INK)
        top.grid(axis="y", lw=0.3, color="0.85", zorder=0)
        _style_axis(top)
        counts = np.nan_to_num(count)
        bottom.bar(
            lo[counts > 0],
            counts[counts > 0],
            width=width[counts > 0],
            align="edge",
            color=fill,
            edgecolor=ink,
            linewidth=0.5,
        )
        bottom.set_ylim(0.0, max(count_max, 1.0) * 1.1)
        bottom.set_xlabel("Confidence (top-label probability)", fontsize=_LABEL)
        bottom.set_ylabel("Studies", fontsize=_LABEL)
        _style_axis(bottom)
    fig.suptitle(plot_text(title, max_chars=110), fontsize=9, x=0.01, ha="left", color=INK)
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
    return fig


def _criterion_margins(evaluation: Mapping[str, Any], metric: str) -> list[tuple[float, str, str, str]]:
    """``(margin, criterion ids, scope, stage)`` for every margin end of the criteria on ``metric``."""
    found: dict[tuple[float, str, str], list[str]] = {}
    for criterion in get(evaluation, "acceptance") or []:
        stage = get(criterion, "stage")
        if get(criterion, "metric") != metric or stage not in ("before", "after"):
            continue
        scope = str(get(criterion, "scope") or "overall")
        for key in ("lower_margin", "upper_margin"):
            value = get(criterion, key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                ids = found.setdefault((float(value), scope, str(stage)), [])
                ids.append(str(get(criterion, "id") or "criterion"))
    return sorted((value, ", ".join(ids), scope, stage) for (value, scope, stage), ids in found.items())


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


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


@figure_fonts
def forest_figure(
    evaluation: Mapping[str, Any],
    *,
    metric: str = ECE.name,
    width_in: float = 6.7,
    same_as: Mapping[tuple[str, str], str] | None = None,
) -> Figure:
    """Draw a forest plot of one metric for every group, before and after calibration, with intervals.

    Rows are "All studies" and then each subgroup attribute in the order of ``evaluation.subgroups``.
    Each acceptance criterion on this metric (stage before or after) adds a vertical line at each end of
    its margin, drawn only across the rows of the groups it judges, and named with its stage in the
    legend. Groups flagged ``small`` are marked with an asterisk. A debiased ECE clamped at 0 (its
    squared-error estimate was negative: below sampling noise) is drawn as a triangle at 0, not as an
    estimate of 0. A group listed in ``same_as`` holds the same studies as an earlier row: its row
    carries that text instead of its points, so the same studies are drawn once.

    Parameters
    ----------
    evaluation : Mapping
        ``evaluation.json`` content.
    metric : str, default "ece"
        Key in each group's ``metrics``.
    width_in : float, default 6.7
        Printed width in inches; the height grows with the number of groups.
    same_as : Mapping, optional
        ``{(attribute, group): text}`` for the groups drawn elsewhere (plain text, e.g.
        ``"same studies as Scanner: DRX Demo"``).

    Returns
    -------
    matplotlib.figure.Figure
    """
    same_as = same_as or {}
    labels_of = get(evaluation, "attribute_labels") or {}
    blocks: list[tuple[str, str, list[Mapping[str, Any]]]] = [("overall", "Overall", [evaluation["overall"]])]
    for attribute, groups in evaluation["subgroups"].items():
        blocks.append(
            (
                attribute,
                str(labels_of.get(attribute) or attribute.replace("_", " ").capitalize()),
                list(groups),
            )
        )
    rows: list[tuple[str, Mapping[str, Any] | None, str | None]] = []
    block_rows: dict[str, tuple[int, int]] = {}  # scope -> (first, last) row index of its groups
    for scope, heading, groups in blocks:
        rows.append((heading, None, None))
        block_rows[scope] = (len(rows), len(rows) + len(groups) - 1)
        for g in groups:
            mark = " *" if get(g, "small") else ""
            twin = same_as.get((scope, str(g.get("group"))))
            rows.append((f"{plot_text(g['group'], max_chars=34)}  (n = {g['n']}){mark}", g, twin))
    height = 0.85 + 0.205 * len(rows)
    fig = Figure(figsize=(width_in, height), dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1].astype(float)
    x_max = 0.0
    clamped_any = False
    clamp_metric = metric in CLAMPED_METRICS
    for (_, row, twin), yi in zip(rows, y, strict=True):
        if row is None:
            continue
        if twin is not None:
            ax.text(
                0.0,
                yi,
                f"  {plot_text(twin, max_chars=70)}",
                fontsize=6.3,
                va="center",
                color="0.35",
                style="italic",
            )
            continue
        for stage, ink, dy, marker, face in (
            ("before", BEFORE, 0.17, "o", "white"),
            ("after", AFTER, -0.17, "s", AFTER),
        ):
            s = get(row, "metrics", metric, stage) or {}
            est, low, high = _number(s.get("estimate")), _number(s.get("low")), _number(s.get("high"))
            if low is not None and high is not None:
                ax.plot([low, high], [yi + dy, yi + dy], color=ink, lw=1.0, solid_capstyle="butt")
                x_max = max(x_max, high)
            if est is None:
                continue
            if clamp_metric and est == 0.0:  # clamped: below noise, not an estimate of 0
                clamped_any = True
                ax.plot(
                    [0.0], [yi + dy], marker="<", ms=4.2, mfc=face, mec=ink, mew=0.9, ls="", clip_on=False
                )
            else:
                ax.plot([est], [yi + dy], marker=marker, ms=3.6, mfc=face, mec=ink, mew=0.9, ls="")
            x_max = max(x_max, est)
    handles: list[Any] = [
        Line2D(
            [],
            [],
            color=BEFORE,
            marker="o",
            mfc="white",
            mec=BEFORE,
            ms=3.6,
            lw=1.0,
            label="before calibration",
        ),
        Line2D(
            [], [], color=AFTER, marker="s", mfc=AFTER, mec=AFTER, ms=3.6, lw=1.0, label="after calibration"
        ),
    ]
    if clamped_any:
        handles.append(
            Line2D(
                [],
                [],
                color=INK,
                marker="<",
                mfc="white",
                mec=INK,
                ms=4.2,
                ls="",
                label="clamped at 0: below sampling noise",
            )
        )
    for i, (threshold, ids, scope, stage) in enumerate(_criterion_margins(evaluation, metric)):
        if scope not in block_rows or block_rows[scope][1] < block_rows[scope][0]:
            continue  # a scope with no rows: the criterion judges nothing drawn here
        style = ("--", ":", "-.")[i % 3]
        first, last = block_rows[scope]
        # only across the rows the criterion judges
        ax.vlines(threshold, y[last] - 0.45, y[first] + 0.45, color=THRESHOLD, lw=1.2, ls=style, zorder=1)
        handles.append(
            Line2D(
                [],
                [],
                color=THRESHOLD,
                lw=1.2,
                ls=style,
                label=f"margin {format_value(threshold)} on {stage} calibration "
                f"({plot_text(ids, max_chars=40)})",
            )
        )
        x_max = max(x_max, threshold)
    for (_, row, _), yi in zip(rows, y, strict=True):
        if row is None and yi < y[0]:
            ax.axhline(yi + 0.5, color="0.8", lw=0.5, zorder=0)
    ax.set_yticks(y, labels=[label for label, _, _ in rows])
    for tick, (_, row, _) in zip(ax.get_yticklabels(), rows, strict=True):
        tick.set_fontweight("bold" if row is None else "normal")
    ax.set_ylim(y[-1] - 0.7, y[0] + 0.7)
    ax.set_xlim(0.0, max(x_max * 1.06, 1e-3))
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"{plot_text(METRIC_LABELS.get(metric, metric))} (estimate and interval)", fontsize=_LABEL)
    ax.grid(axis="x", lw=0.3, color="0.88", zorder=0)
    _style_axis(ax)
    # a figure legend outside the axes: constrained layout sizes it once, so every draw is the same
    fig.legend(handles=handles, loc="outside upper center", ncols=2, fontsize=6.5, frameon=False)
    return fig


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
