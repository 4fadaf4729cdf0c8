"""Results (metric tables and figures) and acceptance criteria sections."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from reportlab.lib.units import inch
from reportlab.platypus import Flowable, Image, KeepTogether

from sitecal.metrics.registry import ECE, ECE_DEBIASED, SMOOTH_ECE
from sitecal.metrics.registry import names as metric_names

from . import figures
from ._context import Context, interval_level, verdict_text
from ._inputs import get
from ._styles import Palette, table
from ._text import NOT_RECORDED, format_count, format_interval, format_value, name_text, para_text
from ._wording import criterion_text, margin_text

__all__ = ["acceptance", "results"]


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


def _metric_table(ctx: Context, groups: Sequence[Mapping[str, Any]], first_column: str) -> Any:
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
        for i, metric in enumerate(metrics):
            entry = group["metrics"][metric]
            cells = []
            for stage in ("before", "after"):
                s = entry[stage]
                cells.append(
                    ctx.cell(format_interval(s.get("estimate"), s.get("low"), s.get("high")), style=num)
                )
            diff = entry.get("difference")
            if isinstance(diff, Mapping):
                change = format_interval(diff.get("estimate"), diff.get("low"), diff.get("high"), signed=True)
            else:
                change = NOT_RECORDED
            rows.append(
                [
                    _group_cell(ctx, group) if i == 0 else "",
                    ctx.cell(ctx.metric_name(metric)),
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
        "beyond resampling noise. Shaded groups are below the minimum size."
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
            "al. 2019; an l2 error, at least as large as the l1 ECE): the difference between the two is the "
            "plug-in estimate's bias. Its percentile interval is approximate: in sitecal's simulations "
            "(benchmarks/coverage_ece.md, 200 to 5,000 studies) it contained a calibrated group's true value "
            "85–88% of the time and an over-confident group's 92–94%, short of the nominal 95%."
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
    story += ctx.table_block(_title(ctx, "All studies"), _metric_table(ctx, [ev["overall"]], "Cohort"))
    for attribute, groups in ev["subgroups"].items():
        label = ctx.attribute_label(attribute)
        story.append(ctx.h2(label))
        if not groups:
            story.append(ctx.p(f"No {para_text(label.lower())} groups were recorded."))
            continue
        story += ctx.table_block(
            _title(ctx, f"By {para_text(label.lower())}"), _metric_table(ctx, groups, label)
        )

    width_in = min(ctx.width / inch, 6.9)
    heading = ctx.h2("Calibration error by subgroup")
    if ECE.name in ev["metrics"]:
        forest = figures.forest_figure(ev, metric=ECE.name, width_in=width_in)
        story += _figure(
            ctx,
            forest,
            "forest_ece.png",
            lead=[heading],
            caption=f"{ctx.next_figure()}. ECE per group before (open circle) and after (filled square) "
            f"calibration with {ctx.level_text()} intervals; vertical lines are acceptance thresholds "
            "on ECE. * marks groups below the minimum size.",
        )
    else:
        story += [heading, ctx.p("ECE is not among the protocol's metrics; no forest plot is drawn.")]

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


RECALIBRATION_METRICS = frozenset(metric_names(recalibration=True))


def _rule_text(ctx: Context, criterion: Mapping[str, Any]) -> tuple[str, str]:
    """Describe in words what a criterion measures and its rule: ``(measured, rule)``."""
    metric = para_text(ctx.metric_name(criterion.get("metric") or NOT_RECORDED))
    stage = criterion.get("stage")
    measured = f"{metric} {stage} calibration" if stage in ("before", "after") else metric
    level = interval_level(criterion.get("level"))
    if level is not None:
        one_sided = f"{(1 + level) / 2 * 100:g}%"
        measured += (
            f", judged on its whole two-sided {level * 100:g}% interval (each end a one-sided "
            f"{one_sided} bound): pass when the interval clears the margin, fail when it lies beyond it, "
            "inconclusive when it straddles it"
        )
    name = criterion.get("metric")
    if isinstance(name, str) and name in RECALIBRATION_METRICS:
        measured += (
            "; the estimate and interval are those of the recalibration analysis (Sensitivity analyses: "
            "cluster-robust Wald for slope and intercept, patient-cluster bootstrap for O:E)"
        )
    return measured, para_text(margin_text(criterion))


def _estimate_interval(result: Mapping[str, Any]) -> str:
    """'0.031 [0.018, 0.047]', or 'not estimable' where the estimate is missing."""
    estimate = result.get("estimate")
    if not isinstance(estimate, int | float) or estimate != estimate:
        return "not estimable"
    return format_interval(estimate, result.get("low"), result.get("high"))


def acceptance(ctx: Context) -> list[Flowable]:
    """Each criterion with its per-group values and verdicts, then the overall verdict."""
    ev = ctx.evaluation
    criteria = ev["acceptance"]
    planning = ev.get("planning") if criteria and isinstance(ev.get("planning"), Mapping) else None
    story: list[Flowable] = []
    lead: list[Flowable] = [ctx.h1("Acceptance criteria")]
    if not criteria:
        lead.append(ctx.p("The protocol defines no acceptance criteria."))
    else:
        lead.append(
            ctx.p(
                "The criteria below were set in the protocol. Each is judged in every group of its "
                "scope; the verdicts are those the evaluation recorded."
            )
        )
    for criterion in criteria:
        measured, rule = _rule_text(ctx, criterion)
        scope = criterion.get("scope")
        scope_text = (
            "all studies"
            if scope in (None, "overall")
            else f"every {para_text(ctx.attribute_label(scope).lower())} group"
        )
        word, ink, _ = verdict_text(criterion["verdict"])
        header = ctx.p(
            f"<b>{para_text(criterion['id'])}</b>&nbsp;&nbsp;"
            f'<font color="{ink.hexval()}"><b>{para_text(word.upper())}</b></font>',
            ctx.styles.h3,
        )
        text = ctx.p(
            f"{para_text(criterion.get('description') or criterion_text(criterion))}<br/>"
            f'<font color="{Palette.muted.hexval()}">Measured: {measured}; rule: {rule}; '
            f"scope: {scope_text}.</font>",
            ctx.styles.small,
        )
        head = [
            ctx.head("Group"),
            ctx.head("n", right=True),
            ctx.head("Estimate [interval]", right=True),
            ctx.head("Margin", right=True),
        ]
        if planning is not None:
            head.append(ctx.head(f"Needed n ({_percent(planning.get('target_power'))})", right=True))
        rows: list[list[Any]] = [[*head, ctx.head("Verdict")]]
        extra: list[tuple[Any, ...]] = []
        for j, result in enumerate(criterion["results"], start=1):
            cells = [
                ctx.cell(result["group"]),
                ctx.cell(format_count(result.get("n")), style=ctx.styles.cell_num),
                ctx.cell(_estimate_interval(result), style=ctx.styles.cell_num),
                ctx.p(rule, ctx.styles.cell_num),
            ]
            if planning is not None:
                cells.append(ctx.cell(_needed_text(result, planning), style=ctx.styles.cell_num))
            rows.append([*cells, ctx.verdict_cell(result["verdict"])])
            extra.append(("BACKGROUND", (len(cells), j), (len(cells), j), verdict_text(result["verdict"])[2]))
        w = ctx.width
        widths = [0.4, 0.06, 0.24, 0.12, 0.18] if planning is None else [0.38, 0.06, 0.18, 0.12, 0.09, 0.17]
        results_table = table(rows, [w * f for f in widths], extra=extra)
        story.append(
            KeepTogether(
                [
                    *lead,
                    header,
                    text,
                    *ctx.table_block(f"Criterion {para_text(criterion['id'])}.", results_table),
                ]
            )
        )
        lead = []
    word, ink, background = verdict_text(ev["verdict"])
    box = table(
        [
            [
                ctx.p(
                    f'<font size="12"><b>Overall verdict: <font color="{ink.hexval()}">'
                    f"{para_text(word.upper())}</font></b></font>",
                    ctx.styles.body,
                )
            ]
        ],
        [ctx.width],
        header=False,
        extra=[
            ("BACKGROUND", (0, 0), (-1, -1), background),
            ("BOX", (0, 0), (-1, -1), 1, ink),
            ("TOPPADDING", (0, 0), (-1, -1), 6),
            ("BOTTOMPADDING", (0, 0), (-1, -1), 6),
            ("LEFTPADDING", (0, 0), (-1, -1), 8),
        ],
    )
    return [*lead, *story, box, *([] if planning is None else _study_size(ctx, planning))]


def _percent(share: object) -> str:
    return f"{share * 100:g}%" if isinstance(share, int | float) else NOT_RECORDED


def _needed_text(result: Mapping[str, Any], planning: Mapping[str, Any]) -> str:
    """A judged row's planned size ('400', or '> 1600' when no planned size reached the target); else '–'."""
    size = result.get("study_size")
    if not isinstance(size, Mapping):
        return "\u2013"
    needed = size.get("needed")
    if needed is None:
        sizes = planning.get("sizes") or [NOT_RECORDED]
        return f"> {sizes[-1]}"
    return str(needed)


def _study_size(ctx: Context, planning: Mapping[str, Any]) -> list[Flowable]:
    """How the Needed n column was obtained, and how to read it (TRIPOD+AI 10, CLAIM 21)."""
    n_sim = planning.get("n_simulations")
    target = planning.get("target_power")
    sizes = ", ".join(str(n) for n in planning.get("sizes") or [])
    mcse = (
        " (Monte Carlo standard error about "
        f"{(target * (1 - target) / n_sim) ** 0.5 * 100:.0f} percentage points)"
        if isinstance(n_sim, int) and n_sim > 0 and isinstance(target, int | float)
        else ""
    )
    miss = _percent(round(1 - target, 6)) if isinstance(target, int | float) else NOT_RECORDED
    split = get(ctx.evaluation, "split")
    fraction = split.get("fit_fraction") if isinstance(split, Mapping) else None
    if isinstance(split, Mapping) and split.get("method") == "crossfit":
        whole = "Under cross-fitting every study is evaluated, so the size is the group's whole size."
    elif isinstance(fraction, int | float) and 0 < fraction < 1:
        whole = (
            "Only the evaluation part of the split counts: with a fit fraction of "
            f"{fraction:g}, a group needs about {1 / (1 - fraction):.2g} times as many studies in all."
        )
    else:
        whole = ""
    sentences = [
        "The <i>Needed n</i> column gives, for every judged group, the evaluation studies it would need for "
        f"a chance of {_percent(target)} to pass its criterion if the model were calibrated, with that "
        "group's own distribution of probabilities (the planning question of Riley et al., Stat Med 2021).",
        f"It was simulated with this run's engine: {format_count(n_sim)} groups of each size were drawn from "
        "the group's probabilities at the criterion's stage, each label drawn from its study's own "
        "probabilities (so the model is calibrated by construction), and each was judged with the "
        "criterion's rule on an interval computed as this run computes it "
        f"({format_count(planning.get('n_resamples'))} bootstrap resamples each).",
        f"The size shown is the smallest of {sizes} studies whose pass rate reached "
        f"{_percent(target)}{mcse}; <i>&gt; n</i> means none did.",
        f"The {ctx.fitted()} is taken as known, so a refitted interval is wider than planned: read each size "
        "as a lower bound.",
        whole,
        "A group judged inconclusive with fewer studies than it needs lacked the evidence to pass, which is "
        "not evidence of miscalibration; a calibrated group with at least the studies it needs fails to pass "
        f"at most {miss} of the time.",
        "The command <i>sitecal plan</i> gives the whole curve of pass rates, and plans before data "
        "collection from an assumed prevalence and accuracy.",
    ]
    return [ctx.h2("Study size"), ctx.p(" ".join(s for s in sentences if s))]
