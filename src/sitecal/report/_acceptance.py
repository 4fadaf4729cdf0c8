"""Acceptance criteria section: each criterion's judged values, margins, verdicts and study sizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reportlab.platypus import Flowable, KeepTogether

from sitecal.metrics.registry import names as metric_names

from ._context import Context, interval_level, verdict_text
from ._inputs import get
from ._marks import Marks, near_margin
from ._styles import Palette, table
from ._text import NOT_RECORDED, format_count, para_text
from ._wording import criterion_text, margin_text

__all__ = ["acceptance", "needed_legend"]


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


def _estimate_interval(result: Mapping[str, Any], metric: object, marks: Marks) -> str:
    """'0.031 [0.018, 0.047]' with its mark, or 'not estimable' where the estimate is missing."""
    estimate = result.get("estimate")
    if not isinstance(estimate, int | float) or estimate != estimate:
        return "not estimable"
    return marks.interval(result, metric=metric, squared=True)


def needed_legend(target: object) -> str:
    """What the Needed n column assumes (plain text), from _study_size's simulation."""
    return (
        f"Needed n: the evaluation studies a group would need for a {_percent(target)} chance of a "
        "conclusive pass if it were perfectly calibrated at the criterion's stage (studies drawn from its "
        "own probabilities, each label drawn from them; the temperature taken as known, so a lower bound). "
        "It is not the number of studies that would settle this group: for a group whose estimate lies "
        "near the margin (closer to it than half its interval's width), more studies may not settle it."
    )


def _lead(ctx: Context, criteria: list[Any]) -> list[Flowable]:
    """The section heading and the paragraph that opens it, kept with the first criterion."""
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
    return lead


def _criterion_heading(
    ctx: Context, criterion: Mapping[str, Any], *, measured: str, rule: str
) -> tuple[Flowable, Flowable]:
    """The criterion's id with its verdict, and what it says, measures, requires and covers."""
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
    return header, text


def _results_table(
    ctx: Context,
    criterion: Mapping[str, Any],
    *,
    rule: str,
    planning: Mapping[str, Any] | None,
    marks: Marks,
) -> Flowable:
    """One row per judged group: n, estimate and interval, margin, needed n (when planned), verdict."""
    head = [
        ctx.head("Group"),
        ctx.head("n", right=True),
        ctx.head("Estimate [interval]", right=True),
        ctx.head("Margin", right=True),
    ]
    if planning is not None:
        head.append(
            ctx.head(f"Needed n if calibrated ({_percent(planning.get('target_power'))})", right=True)
        )
    rows: list[list[Any]] = [[*head, ctx.head("Verdict")]]
    extra: list[tuple[Any, ...]] = []
    scope = str(criterion.get("scope") or "overall")
    for j, result in enumerate(criterion["results"], start=1):
        twin = ctx.twin(scope, result.get("group")) if scope != "overall" else None
        group = para_text(result["group"]) + (f"<br/><i>{ctx.twin_text(twin)}</i>" if twin else "")
        cells = [
            ctx.p(group, ctx.styles.cell),
            ctx.cell(format_count(result.get("n")), style=ctx.styles.cell_num),
            ctx.cell(_estimate_interval(result, criterion.get("metric"), marks), style=ctx.styles.cell_num),
            ctx.p(rule, ctx.styles.cell_num),
        ]
        if planning is not None:
            cells.append(ctx.p(_needed_text(result, planning, criterion), ctx.styles.cell_num))
        rows.append([*cells, ctx.verdict_cell(result["verdict"])])
        extra.append(("BACKGROUND", (len(cells), j), (len(cells), j), verdict_text(result["verdict"])[2]))
    w = ctx.width
    widths = [0.4, 0.06, 0.24, 0.12, 0.18] if planning is None else [0.38, 0.06, 0.18, 0.09, 0.12, 0.17]
    return table(rows, [w * f for f in widths], extra=extra)


def _verdict_box(ctx: Context, verdict: object) -> Flowable:
    """The overall verdict in a box of its colour."""
    word, ink, background = verdict_text(verdict)
    return table(
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


def acceptance(ctx: Context) -> list[Flowable]:
    """Each criterion with its per-group values and verdicts, then the overall verdict."""
    ev = ctx.evaluation
    criteria = ev["acceptance"]
    planning = ev.get("planning") if criteria and isinstance(ev.get("planning"), Mapping) else None
    story: list[Flowable] = []
    lead = _lead(ctx, criteria)
    explained = False
    for criterion in criteria:
        measured, rule = _rule_text(ctx, criterion)
        header, text = _criterion_heading(ctx, criterion, measured=measured, rule=rule)
        marks = Marks()
        results_table = _results_table(ctx, criterion, rule=rule, planning=planning, marks=marks)
        legend = marks.legend()
        if planning is not None and not explained:  # once, under the first table with the column
            legend.append(needed_legend(planning.get("target_power")))
            explained = True
        story.append(
            KeepTogether(
                [
                    *lead,
                    header,
                    text,
                    *ctx.table_block(
                        f"Criterion {para_text(criterion['id'])}.", results_table, legend=legend
                    ),
                ]
            )
        )
        lead = []
    box = _verdict_box(ctx, ev["verdict"])
    return [*lead, *story, box, *([] if planning is None else _study_size(ctx, planning))]


def _percent(share: object) -> str:
    return f"{share * 100:g}%" if isinstance(share, int | float) else NOT_RECORDED


def _needed_text(result: Mapping[str, Any], planning: Mapping[str, Any], criterion: Mapping[str, Any]) -> str:
    """A judged row's planned size ('400', or '&gt; 1600' when no planned size reached the target); else '–'.

    Markup. Beside an inconclusive group whose estimate sits near the margin, a note that more studies
    may not settle it: the planned size is that of a calibrated group.
    """
    size = result.get("study_size")
    if not isinstance(size, Mapping):
        return "\u2013"
    needed = size.get("needed")
    if needed is None:
        sizes = planning.get("sizes") or [NOT_RECORDED]
        text = f"&gt; {para_text(sizes[-1])}"
    else:
        text = para_text(needed)
    if result.get("verdict") == "inconclusive" and near_margin(result, criterion):
        text += (
            f'<br/><font color="{Palette.muted.hexval()}"><i>estimate near the margin: more studies may '
            "not settle it</i></font>"
        )
    return text


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
