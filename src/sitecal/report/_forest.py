"""The forest plot of the Results section: one metric for every group, before and after calibration.

Drawn from ``evaluation.json`` content only, like :mod:`sitecal.report.figures`: estimates, intervals and
criterion margins are read as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sitecal.metrics.registry import ECE, METRICS

from ._figure_style import AFTER, BEFORE, FIGURE_DPI, INK, LABEL_PT, THRESHOLD, style_axis
from ._fonts import figure_fonts
from ._inputs import get
from ._marks import CLAMPED_METRICS
from ._text import format_value, plot_text

__all__ = ["forest_figure"]

#: The printed label of each metric of the registry, by name.
METRIC_LABELS = {m.name: m.label for m in METRICS}


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


def _number(value: object) -> float | None:
    """``value`` as a float, or None for a missing, boolean or NaN value."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


_Row = tuple[str, Mapping[str, Any] | None, str | None]
"""A forest row: its printed label, its group (None for a heading) and the text drawn in its place."""


def _forest_rows(
    evaluation: Mapping[str, Any], same_as: Mapping[tuple[str, str], str]
) -> tuple[list[_Row], dict[str, tuple[int, int]]]:
    """The rows top to bottom (a heading, then its groups, per scope) and each scope's group rows.

    The second value maps a scope (``"overall"`` or an attribute) to the first and last row index of
    its groups.
    """
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
    rows: list[_Row] = []
    block_rows: dict[str, tuple[int, int]] = {}  # scope -> (first, last) row index of its groups
    for scope, heading, groups in blocks:
        rows.append((heading, None, None))
        block_rows[scope] = (len(rows), len(rows) + len(groups) - 1)
        for g in groups:
            mark = " *" if get(g, "small") else ""
            twin = same_as.get((scope, str(g.get("group"))))
            rows.append((f"{plot_text(g['group'], max_chars=34)}  (n = {g['n']}){mark}", g, twin))
    return rows, block_rows


def _draw_estimates(ax: Any, rows: list[_Row], y: np.ndarray, metric: str) -> tuple[float, bool]:
    """Draw each group's estimates and intervals, before and after, or its ``same_as`` text.

    Returns the largest value drawn (0 if none) and whether a clamped estimate was drawn.
    """
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
    return x_max, clamped_any


def _estimate_handles(*, clamped_any: bool) -> list[Any]:
    """Legend handles of the before and after points, and of the clamped mark when one was drawn."""
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
    return handles


def _draw_margins(
    ax: Any,
    margins: list[tuple[float, str, str, str]],
    *,
    block_rows: Mapping[str, tuple[int, int]],
    y: np.ndarray,
    x_max: float,
    handles: list[Any],
) -> float:
    """Draw each criterion margin across the rows it judges and add its legend handle to ``handles``.

    Returns ``x_max`` widened to the margins drawn.
    """
    for i, (threshold, ids, scope, stage) in enumerate(margins):
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
    return x_max


def _finish_forest_axes(ax: Any, rows: list[_Row], y: np.ndarray, *, metric: str, x_max: float) -> None:
    """Separate the blocks, label the rows (headings bold), and set the limits and the x label."""
    for (_, row, _), yi in zip(rows, y, strict=True):
        if row is None and yi < y[0]:
            ax.axhline(yi + 0.5, color="0.8", lw=0.5, zorder=0)
    ax.set_yticks(y, labels=[label for label, _, _ in rows])
    for tick, (_, row, _) in zip(ax.get_yticklabels(), rows, strict=True):
        tick.set_fontweight("bold" if row is None else "normal")
    ax.set_ylim(y[-1] - 0.7, y[0] + 0.7)
    ax.set_xlim(0.0, max(x_max * 1.06, 1e-3))
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(
        f"{plot_text(METRIC_LABELS.get(metric, metric))} (estimate and interval)", fontsize=LABEL_PT
    )
    ax.grid(axis="x", lw=0.3, color="0.88", zorder=0)
    style_axis(ax)


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
    rows, block_rows = _forest_rows(evaluation, same_as or {})
    height = 0.85 + 0.205 * len(rows)
    fig = Figure(figsize=(width_in, height), dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1].astype(float)
    x_max, clamped_any = _draw_estimates(ax, rows, y, metric)
    handles = _estimate_handles(clamped_any=clamped_any)
    x_max = _draw_margins(
        ax, _criterion_margins(evaluation, metric), block_rows=block_rows, y=y, x_max=x_max, handles=handles
    )
    _finish_forest_axes(ax, rows, y, metric=metric, x_max=x_max)
    # a figure legend outside the axes: constrained layout sizes it once, so every draw is the same
    fig.legend(handles=handles, loc="outside upper center", ncols=2, fontsize=6.5, frameon=False)
    return fig
