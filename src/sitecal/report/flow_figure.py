"""The flow diagram of the Data section: files found → instances → images chosen → studies → analysed.

Drawn from ``evaluation.json`` → ``cohort_flow`` (counts and exclusions as stored), in the style of a
CONSORT / STARD participant flow: the main column holds the count at each step, and beside each step a
box counts what that step left out, with its most frequent reasons. Like :mod:`sitecal.report.figures` it
draws on a ``Figure`` with an Agg canvas, never through ``pyplot``.

When the model's outputs were read from a predictions file without a DICOM folder
(``cohort_flow.source == "predictions_file"``), the flow starts at the file's rows instead: rows →
usable rows (one study each) → labelled → analysed. The number of rows is not in ``cohort_flow``; it is
``provenance.json``'s ``predictions_file.rows``, passed in as ``predictions_rows``. A predictions file row
that cannot be used or matches no study (unit ``prediction``), like a label row naming no study (unit
``label``), removes no study: it is listed beside the flow, not counted in it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ._figure_style import FIGURE_DPI, INK
from ._fonts import figure_fonts
from ._inputs import get
from ._text import format_count, plot_text

__all__ = ["FlowStep", "flow_figure", "flow_steps"]

_BOX = "#eef3f8"
_EXCLUDED = "#fbeeee"
_EDGE = "#1f4e79"
_EXCLUDED_EDGE = "#a61c1c"
_MAX_REASONS = 4
# layout in axis units: x runs 0-100 across the figure, y counts "lines" down from the top
_MAIN_X, _MAIN_W = 4.0, 40.0  # the main column's left edge and width
_CENTRE = _MAIN_X + _MAIN_W / 2
_BOX_H = 1.5  # height of a box
_SPLIT_GAP = 1.3  # from the last step down to the split's boxes


@dataclass(frozen=True)
class FlowStep:
    """One box of the main column and what was left out on the way to it."""

    label: str
    count: object
    # exclusions of this stage (or these stages) are drawn beside the arrow into this box
    excluded_stage: str | tuple[str, ...] | None


#: units of exclusions that remove no study: a label row, a predictions file row
_NOT_A_STUDY = {"label": "Label rows", "prediction": "Predictions file rows"}
#: where a study joined to a predictions file may be left out: no label, or no row of the file
_JOINED = ("labels", "predictions")


def flow_steps(
    flow: Mapping[str, Any], *, predictions_rows: object = None, predictions_file: bool = False
) -> list[FlowStep]:
    """The steps of the diagram for a stored cohort flow (volumes get a series step).

    Parameters
    ----------
    flow : Mapping
        ``evaluation.json`` → ``cohort_flow``.
    predictions_rows : int or None, default None
        Rows of the predictions file (``provenance.json`` → ``predictions_file.rows``): the first step of
        a flow without DICOM (``flow["source"] == "predictions_file"``); ``None`` prints "not recorded".
    predictions_file : bool, default False
        Whether the model's outputs were read from a predictions file joined to the DICOM studies: a
        study needs a label and a row of the file to go on.
    """
    if flow.get("source") == "predictions_file":
        return [
            FlowStep("Rows in the predictions file", predictions_rows, None),
            FlowStep("Usable rows (one study each)", flow.get("studies"), "predictions"),
            FlowStep("Studies with a label", flow.get("labelled"), "labels"),
            FlowStep("Studies analysed", flow.get("analysed"), "inference"),
        ]
    steps = [
        # studies a PACS listed but could not send are drawn beside the arrow into the files found
        FlowStep("Files found", flow.get("files_found"), "retrieve"),
        FlowStep("DICOM image instances", flow.get("dicom_instances"), "scan"),
    ]
    if flow.get("series_found") is not None:
        # studies first: a study without a qualifying series is left out at the series step
        selected = f"{format_count(flow.get('series_selected'))} of {format_count(flow['series_found'])}"
        steps.append(FlowStep("Studies", flow.get("studies"), None))
        steps.append(FlowStep("Series selected (one per study)", selected, "series"))
    else:
        steps.append(FlowStep("Studies (one image each)", flow.get("studies"), "studies"))
    if predictions_file:  # a study without a row of the file is left out where labels are joined
        steps.append(FlowStep("Studies with a label and a prediction", flow.get("labelled"), _JOINED))
    else:
        steps.append(FlowStep("Studies with a label", flow.get("labelled"), "labels"))
    steps.append(FlowStep("Studies analysed", flow.get("analysed"), "inference"))
    return steps


def _unit(item: Mapping[str, Any]) -> str:
    """What an exclusion left out (``cohort_flow.exclusions[].unit``); older documents: ``study``."""
    return str(get(item, "unit") or "study")


def _reason_lines(items: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for item in items[:_MAX_REASONS]:
        reason = plot_text(get(item, "reason"), max_chars=140)
        wrapped = textwrap.wrap(f"{format_count(get(item, 'count'))}  {reason}", 50, subsequent_indent="    ")
        lines += ["• " + wrapped[0], *["  " + w for w in wrapped[1:]]]
    if len(items) > _MAX_REASONS:
        lines.append(f"• {len(items) - _MAX_REASONS} more reasons (table of exclusions)")
    return lines


def _total(items: Sequence[Mapping[str, Any]]) -> int:
    return sum(int(get(e, "count") or 0) for e in items)


def _excluded_text(exclusions: Sequence[Mapping[str, Any]], stage: str | tuple[str, ...]) -> str | None:
    stages = (stage,) if isinstance(stage, str) else stage
    items = sorted(
        (e for e in exclusions if get(e, "stage") in stages),
        key=lambda e: (-int(get(e, "count") or 0), str(get(e, "reason"))),
    )
    # a label or predictions file row that names no study removes no study: listed beside the count
    removed = [e for e in items if _unit(e) not in _NOT_A_STUDY]
    lines: list[str] = []
    if stage == "series":  # series set aside, and studies left without one: counted apart
        studies = [e for e in removed if _unit(e) == "study"]
        series = [e for e in removed if _unit(e) != "study"]
        if series:
            lines += [f"Series not selected: {format_count(_total(series))}", *_reason_lines(series)]
        if studies:
            lines += [f"Studies excluded: {format_count(_total(studies))}", *_reason_lines(studies)]
    elif removed:
        lines += [f"Excluded: {format_count(_total(removed))}"]
        lines += _reason_lines(removed)
    for unit, rows in _NOT_A_STUDY.items():
        listed = [e for e in items if _unit(e) == unit]
        if not listed:
            continue
        title = "without a study" if unit == "label" else "not used"
        lines += [f"{rows} {title} (no study removed): {format_count(_total(listed))}"]
        lines += _reason_lines(listed)
    return "\n".join(lines) or None


@figure_fonts
def flow_figure(
    evaluation: Mapping[str, Any],
    *,
    width_in: float = 6.7,
    predictions_rows: object = None,
    predictions_file: bool = False,
) -> Figure:
    """Draw the flow from files found (or predictions file rows) to the studies analysed and their split.

    Parameters
    ----------
    evaluation : Mapping
        ``evaluation.json`` content; only ``cohort_flow`` and ``split`` are read.
    width_in : float, default 6.7
        Printed width in inches; the height follows the number of steps and exclusion lines.
    predictions_rows, predictions_file
        As for :func:`flow_steps`: the rows of a predictions file read without DICOM, and whether the
        model's outputs were read from such a file.

    Returns
    -------
    matplotlib.figure.Figure
    """
    flow = get(evaluation, "cohort_flow") or {}
    split = get(evaluation, "split") or {}
    exclusions = flow.get("exclusions") or []
    steps = flow_steps(flow, predictions_rows=predictions_rows, predictions_file=predictions_file)
    side = [_excluded_text(exclusions, s.excluded_stage) if s.excluded_stage else None for s in steps]
    # vertical budget in "lines": a step box is 2 lines high; an exclusion box sits in the gap above its step
    gaps = [0.0] + [max(1.6, (text.count("\n") + 1) * 0.62 + 0.5) if text else 1.2 for text in side[1:]]
    total = sum(gaps) + _BOX_H * len(steps) + _SPLIT_GAP + _BOX_H
    line_in = 0.2
    fig = Figure(figsize=(width_in, total * line_in + 0.2), dpi=FIGURE_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, 100)
    ax.set_ylim(total + 0.5, -0.5)
    ax.axis("off")
    bottom = _draw_steps(ax, steps, gaps, side)
    _draw_split(ax, _split_halves(flow, split), y=bottom + _SPLIT_GAP, top=bottom)
    return fig


def _draw_steps(
    ax: Any, steps: Sequence[FlowStep], gaps: Sequence[float], side: Sequence[str | None]
) -> float:
    """Draw the main column top down, each step's exclusions beside the arrow into it.

    Returns the bottom of the last box.
    """
    y = 0.0
    previous_bottom: float | None = None
    for step, gap, text in zip(steps, gaps, side, strict=True):
        y += gap
        if previous_bottom is not None:
            _arrow(ax, (_CENTRE, y), (_CENTRE, previous_bottom))
        if text and previous_bottom is not None:
            mid = (previous_bottom + y) / 2
            ax.plot([_CENTRE, 50.0], [mid, mid], color=_EXCLUDED_EDGE, lw=0.7)
            ax.text(
                50.5,
                mid,
                text,
                ha="left",
                va="center",
                fontsize=6.3,
                color=INK,
                linespacing=1.25,
                bbox={"boxstyle": "round,pad=0.45", "fc": _EXCLUDED, "ec": _EXCLUDED_EDGE, "lw": 0.6},
            )
        _box(ax, _MAIN_X, y, _MAIN_W, _BOX_H, f"{step.label}\n{format_count(step.count)}")
        previous_bottom = y + _BOX_H
        y += _BOX_H
    assert previous_bottom is not None
    return previous_bottom


_Half = tuple[str, object, object]
"""A box of the split: its label, its studies (or a text in their place) and its patients."""


def _split_halves(flow: Mapping[str, Any], split: Mapping[str, Any]) -> tuple[_Half, ...]:
    """The two boxes below the column: the fit split and the evaluation split."""
    # under cross-fitting every study is in both: fitted for the other folds, evaluated once
    if split.get("method") == "crossfit":
        folds = format_count(split.get("folds"))
        return (
            (f"{folds} folds: temperatures of each", "fitted on the other folds", None),
            (
                "Every study evaluated once",
                flow.get("evaluation", split.get("n_evaluation")),
                split.get("patients_evaluation"),
            ),
        )
    return (
        ("Fit split (temperatures)", flow.get("fit", split.get("n_fit")), split.get("patients_fit")),
        (
            "Evaluation split (metrics)",
            flow.get("evaluation", split.get("n_evaluation")),
            split.get("patients_evaluation"),
        ),
    )


def _draw_split(ax: Any, halves: Sequence[_Half], *, y: float, top: float) -> None:
    """Draw the split's boxes side by side at height ``y``, each with an arrow from the column (``top``)."""
    for i, (label, n, patients) in enumerate(halves):
        x = _MAIN_X + i * (_MAIN_W / 2 + 1.0) - (1.0 if i else 0)
        w = _MAIN_W / 2 - 0.5
        who = f" · {format_count(patients)} patients" if patients is not None else ""
        count = n if isinstance(n, str) else f"{format_count(n)} studies{who}"
        _arrow(ax, (x + w / 2, y), (_CENTRE, top))
        _box(ax, x, y, w, _BOX_H, f"{label}\n{count}", size=6.3)


def _arrow(ax: Any, tip: tuple[float, float], tail: tuple[float, float]) -> None:
    """Draw an arrow from ``tail`` to ``tip`` (data coordinates)."""
    ax.annotate(
        "",
        xy=tip,
        xytext=tail,
        arrowprops={"arrowstyle": "-|>", "color": INK, "lw": 0.8, "shrinkA": 0, "shrinkB": 0},
    )


def _box(ax: Any, x: float, y: float, w: float, h: float, text: str, *, size: float = 7.2) -> None:
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="square,pad=0", fc=_BOX, ec=_EDGE, lw=0.7))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=INK, linespacing=1.3)
