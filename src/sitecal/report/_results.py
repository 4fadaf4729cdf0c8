"""Results (metric tables and figures) and acceptance criteria sections."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from reportlab.lib.units import inch
from reportlab.platypus import Flowable, Image, KeepTogether

from sitecal.metrics.registry import ECE, ECE_DEBIASED, SMOOTH_ECE

from . import figures
from ._context import Context
from ._inputs import get
from ._marks import CLAMPED, CLAMPED_METRICS, OUTSIDE, Marks
from ._same_groups import Twin
from ._styles import Palette, table
from ._text import NOT_RECORDED, format_count, format_value, name_text, para_text, plain_text
from ._wording import margin_text

__all__ = ["guide_text", "results"]


def _slug(text: object, limit: int = 40) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:limit] or "group"


def _group_cell(ctx: Context, group: Mapping[str, Any]) -> list[Any]:
    lines = [f"<b>{name_text(group['group'])}</b>", f"n = {format_count(group['n'])} studies"]
    if group.get("n_patients") is not None:
        lines.append(f"{format_count(group['n_patients'])} patients")
    if group.get("temperature") is not None:
        lines.append(f"T = {format_value(group['temperature'])}")
    if group.get("small"):
        minimum = ctx.min_group_size()
        limit = f"n &lt; {para_text(minimum)}" if minimum is not None else "small group"
        lines.append(
            f'<font color="{Palette.unjudged.hexval()}"><i>{limit}: interpret with caution</i></font>'
        )
    return [ctx.p("<br/>".join(lines), ctx.styles.cell)]


def _metric_table(
    ctx: Context, groups: Sequence[Mapping[str, Any]], first_column: str, attribute: str, marks: Marks
) -> Any:
    metrics = ctx.evaluation["metrics"]
    rows: list[list[Any]] = [
        [
            ctx.head(first_column),
            ctx.head("Metric"),
            ctx.head("Before calibration", right=True),
            ctx.head("After calibration", right=True),
            ctx.head("After − before", right=True),
        ]
    ]
    extra: list[tuple[Any, ...]] = []
    num = ctx.styles.cell_num
    for group in groups:
        start = len(rows)
        twin = ctx.twin(attribute, group.get("group"))
        if twin is not None:  # the same studies as an earlier row: shown there, once
            rows.append(
                [
                    _group_cell(ctx, group),
                    ctx.p(
                        f"<i>The {ctx.twin_text(twin)}: its metrics are shown there, once.</i>",
                        ctx.styles.cell,
                    ),
                    "",
                    "",
                    "",
                ]
            )
            extra += [
                ("SPAN", (1, start), (-1, start)),
                ("LINEBELOW", (0, start), (-1, start), 0.6, Palette.rule),
            ]
            continue
        for i, metric in enumerate(metrics):
            entry = group["metrics"][metric]
            cells = [
                ctx.cell(marks.interval(entry[stage], metric=metric), style=num)
                for stage in ("before", "after")
            ]
            diff = entry.get("difference")
            change = marks.interval(diff, signed=True) if isinstance(diff, Mapping) else NOT_RECORDED
            rows.append(
                [
                    _group_cell(ctx, group) if i == 0 else "",
                    ctx.cell(ctx.metric_name(metric) + (" (plug-in)" if metric == ECE.name else "")),
                    *cells,
                    ctx.cell(change, style=num),
                ]
            )
        end = len(rows) - 1
        extra += [
            ("SPAN", (0, start), (0, end)),
            ("NOSPLIT", (0, start), (-1, end)),
            ("LINEBELOW", (0, end), (-1, end), 0.6, Palette.rule),
        ]
        if group.get("small"):
            extra.append(("BACKGROUND", (0, start), (-1, end), Palette.small_bg))
    w = ctx.width
    return table(rows, [w * 0.25, w * 0.13, w * 0.2, w * 0.2, w * 0.22], extra=extra)


def _table_legend(ctx: Context, marks: Marks) -> list[str]:
    """The legend under a metric table: what the plug-in label says, then the marks used."""
    lines = []
    if ECE.name in (ctx.evaluation.get("metrics") or []):
        lines.append(
            "ECE (plug-in) is biased upward in small groups: a perfectly calibrated group of 200 studies "
            "shows about 0.07 from sampling noise alone."
        )
    return lines + marks.legend()


def _title(ctx: Context, what: str) -> str:
    return f"{what}: estimate [{ctx.level_text()} interval], evaluation split."


def _figure(
    ctx: Context, fig: Any, name: str, caption: str, *, lead: Sequence[Flowable] = ()
) -> list[Flowable]:
    """Save ``fig`` and place it at its printed size, kept together with ``lead`` and its caption."""
    path = figures.save_png(fig, ctx.figures_dir / name)
    ctx.figures.append(path)
    width_in, height_in = fig.get_size_inches()
    image = Image(str(path), width=width_in * inch, height=height_in * inch)
    return [KeepTogether([*lead, image, ctx.p(caption, ctx.styles.caption)])]


#: The smooth ECE's measured coverage (benchmarks/coverage_smooth_ece.md), for the results guide.
SMOOTH_ECE_COVERAGE = (
    "never contained a calibrated group's true value of 0 in sitecal's simulations (0% coverage at 100 to "
    "1,000 studies, patients resampled: a calibrated group of 100 studies shows about 0.05 from sampling "
    "noise alone, of 1,000 about 0.02), and contained an over-confident group's true value 95–98% of the "
    "time, against the nominal 95% (benchmarks/coverage_smooth_ece.md)"
)


def guide_text(ctx: Context) -> str:
    """The paragraph that opens the Results: how to read a cell, and what each calibration error is."""
    ev = ctx.evaluation
    higher = [ctx.metric_name(m) for m in ev["metrics"] if not ctx.lower_is_better(m)]
    lower = [ctx.metric_name(m) for m in ev["metrics"] if ctx.lower_is_better(m)]
    guide = (
        f"Every cell reads <i>estimate [lower, upper]</i> of the {ctx.level_text()} bootstrap interval, "
        "measured on the evaluation split. "
    )
    if lower:
        guide += f"Lower is better for {para_text(', '.join(lower))}"
        guide += f"; higher is better for {para_text(', '.join(higher))}. " if higher else ". "
    guide += (
        "The change after − before has its own paired interval: an interval that excludes 0 is a change "
        f"beyond resampling noise. Shaded groups are below the minimum size. {OUTSIDE} marks an estimate "
        "that lies outside its own interval (the legend under each table says why)."
    )
    metrics = ev.get("metrics") or []
    if ECE.name in metrics:
        guide += (
            " ECE is the plug-in estimate: biased upward in small groups (a perfectly calibrated group of "
            "200 studies shows about 0.07 from sampling noise alone), and its percentile interval, built "
            "around that biased estimate, does not cover a well calibrated group's true ECE."
        )
        guide += (
            f" {para_text(ctx.metric_name(ECE_DEBIASED.name))} beside it removes the noise term (Kumar et "
            "al. 2019): it estimates the binned l2 (root-mean-square) calibration error. As quantities, the "
            "binned l2 error bounds the binned l1 error (what ECE estimates) from above; as estimates, the "
            "plug-in ECE is biased upward in small groups, so the debiased estimate can be the lower of the "
            "two, and much of the difference between them is the plug-in estimate's bias. When the "
            "observed gaps are smaller than sampling noise, its unbiased estimate of the squared error is "
            f"negative and the value is clamped at 0: printed {para_text(CLAMPED)} with its interval, never "
            "as an error of 0. Its interval is the studentised bootstrap of the unclamped squared "
            "estimate (each resample's estimate scaled by its own standard error and centred on the "
            "sample's plug-in value, which a resample's squared error centres on), with the square root "
            "taken last: in sitecal's simulations (benchmarks/coverage_debiased.md, 50 to 1,000 studies, "
            "before and after calibration) it contained the true value 91–99% of the time, the misses of "
            "groups at or beyond a 0.10 margin on the high side up to 6% of the time."
            if ECE_DEBIASED.name in metrics
            else " Add ece_debiased to evaluation.metrics to see the estimate without that bias."
        )
    if SMOOTH_ECE.name in metrics:
        guide += (
            f" {para_text(ctx.metric_name(SMOOTH_ECE.name))} (Błasiok &amp; Nakkiran 2023) needs no bins and "
            "is a consistent calibration measure: the residuals are smoothed by a Gaussian kernel whose "
            "width is the fixed point where it equals the error it measures. It is still a plug-in estimate "
            "of a non-negative quantity, biased upward in small groups, and its percentile interval, built "
            f"around that biased estimate, {SMOOTH_ECE_COVERAGE}."
        )
    return guide


def results(ctx: Context) -> list[Flowable]:
    """Overall and per-attribute metric tables, the forest plot and the reliability diagrams."""
    ev = ctx.evaluation
    guide = guide_text(ctx)
    story: list[Flowable] = [ctx.h1("Results"), ctx.p(guide), ctx.h2("Overall")]
    marks = Marks()
    body = _metric_table(ctx, [ev["overall"]], "Cohort", "overall", marks)
    story += ctx.table_block(_title(ctx, "All studies"), body, legend=_table_legend(ctx, marks))
    for attribute, groups in ev["subgroups"].items():
        label = ctx.attribute_label(attribute)
        story.append(ctx.h2(label))
        if not groups:
            story.append(ctx.p(f"No {para_text(label.lower())} groups were recorded."))
            continue
        marks = Marks()
        body = _metric_table(ctx, groups, label, attribute, marks)
        story += ctx.table_block(
            _title(ctx, f"By {para_text(label.lower())}"), body, legend=_table_legend(ctx, marks)
        )
    story += _forest_plots(ctx)
    width_in = min(ctx.width / inch, 6.9)

    attribute = ev.get("calibration_attribute") or get(ctx.calibration, "per")
    lead: list[Flowable] = [
        ctx.h2("Reliability diagrams"),
        ctx.p(
            "Left: before calibration; right: after. Upper panels: bars show the observed accuracy in "
            "each confidence bin, points the bin's mean confidence (x) and accuracy (y); the dashed diagonal "
            "is perfect calibration, so a point below it marks over-confidence. Lower panels: studies per "
            "bin, on the same scale before and after. Empty bins are left as gaps."
        ),
    ]
    targets: list[tuple[str, Mapping[str, Any], str]] = [("All studies", ev["overall"], "overall")]
    groups = ev["subgroups"].get(attribute, []) if attribute else []
    label = ctx.attribute_label(attribute) if attribute else "Group"
    for i, group in enumerate(groups):
        targets.append((f"{label}: {group['group']}", group, f"subgroups.{attribute}[{i}]"))
    for i, (title, group, path) in enumerate(targets):
        facts = f"n = {format_count(group['n'])} studies"
        if group.get("temperature") is not None:
            facts += f", T = {format_value(group['temperature'])}"
        if group.get("small"):
            facts += ", below the minimum size: interpret with caution"
        if not isinstance(group.get("reliability"), Mapping):
            story += [*lead, ctx.p(f"Reliability data for {para_text(title)}: {NOT_RECORDED}.")]
            lead = []
            continue
        fig = figures.reliability_figure(group, title=f"{title}  ({facts})", path=path, width_in=width_in)
        name = (
            "reliability_overall.png"
            if i == 0
            else f"reliability_{_slug(attribute)}_{i:02d}_{_slug(group['group'])}.png"
        )
        story += _figure(
            ctx,
            fig,
            name,
            f"{ctx.next_figure()}. Reliability diagram, {para_text(title)} ({para_text(facts)}).",
            lead=lead,
        )
        lead = []
    return [*story, *lead]


def _forest_caption(ctx: Context, metric: str, judged: bool) -> str:
    """What a forest plot draws, exactly: the metric, the markers, the margin lines, the marks."""
    ev = ctx.evaluation
    name = para_text(ctx.metric_name(metric))
    text = (
        f"{ctx.next_figure()}. {name} per group before (open circle) and after (filled square) calibration "
        f"with {ctx.level_text()} intervals, as in the tables. "
    )
    criteria = [
        c
        for c in ev.get("acceptance") or []
        if c.get("metric") == metric and c.get("stage") in ("before", "after")
    ]
    if judged and criteria:
        lines = "; ".join(
            f"{para_text(c.get('id'))}: {para_text(margin_text(c))} on the value {para_text(c.get('stage'))} "
            f"calibration, across the rows of "
            + (
                "all studies"
                if c.get("scope") in (None, "overall")
                else f"the {para_text(ctx.attribute_label(c.get('scope')).lower())} groups"
            )
            for c in criteria
        )
        text += f"Red vertical lines are the acceptance margins of the criteria on {name} ({lines}). "
    else:
        text += f"No acceptance criterion is on {name}: no margin is drawn. "
    if metric == ECE.name:
        text += "Plug-in ECE is biased upward in small groups. "
    if metric in CLAMPED_METRICS:
        text += (
            "A triangle at 0 is an estimate clamped at 0: its squared-error estimate was negative (below "
            "sampling noise), so the data cannot tell the error from 0; the interval's upper end is what the "
            "data allow. "
        )
    text += "* marks groups below the minimum size."
    if any(ctx.twin(a, g.get("group")) for a, gs in ev["subgroups"].items() for g in gs):
        text += " A row that names another group holds the same studies, drawn once on that row."
    return text


def _forest_plots(ctx: Context) -> list[Flowable]:
    """A forest plot of each metric an acceptance criterion judges, with its margins; else of ECE."""
    ev = ctx.evaluation
    width_in = min(ctx.width / inch, 6.9)
    heading = ctx.h2("Judged metrics by subgroup")
    metrics = figures.criterion_metrics(ev)
    judged = bool(metrics)
    if not metrics:
        metrics = [m for m in (ECE_DEBIASED.name, ECE.name) if m in ev["metrics"]][:1]
    if not metrics:
        return [
            heading,
            ctx.p("No calibration error is among the protocol's metrics; no forest plot is drawn."),
        ]
    same_as = {
        (a, str(g.get("group"))): plain_text(_twin_plain(ctx, twin), max_chars=80)
        for a, gs in ev["subgroups"].items()
        for g in gs
        if (twin := ctx.twin(a, g.get("group"))) is not None
    }
    story: list[Flowable] = []
    lead: list[Flowable] = [heading]
    for metric in metrics:
        forest = figures.forest_figure(ev, metric=metric, width_in=width_in, same_as=same_as)
        story += _figure(
            ctx,
            forest,
            f"forest_{_slug(metric).replace('-', '_')}.png",
            lead=lead,
            caption=_forest_caption(ctx, metric, judged),
        )
        lead = []
    return story


def _twin_plain(ctx: Context, twin: Twin) -> str:
    where = (
        "all studies"
        if twin.attribute == "overall"
        else f"{ctx.attribute_label(twin.attribute)}: {twin.group}"
    )
    return f"same studies as {where}"
