"""Fairness: disparities between subgroups with their own paired intervals, ranked; small groups listed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reportlab.platypus import Flowable, Paragraph

from sitecal.metrics.registry import METRICS

from ._context import Context
from ._inputs import get
from ._marks import Marks
from ._styles import Palette, table
from ._text import NOT_RECORDED, format_count, format_interval, format_value, name_text, para_text
from ._wording import word

__all__ = ["fairness", "ranked_gaps", "why_not_flagged"]

#: Which way is better for each metric of the registry ("target": a signed metric, tested both ways).
DIRECTIONS = {m.name: m.direction for m in METRICS}

_STAGES = ("after", "before")
NOT_COMPARED = "not compared"


def _interval(
    entry: object, *, signed: bool = False, marks: Marks | None = None, metric: str | None = None
) -> str:
    if not isinstance(entry, Mapping):
        return NOT_RECORDED
    if marks is not None:
        return marks.interval(entry, signed=signed, metric=metric)
    return format_interval(entry.get("estimate"), entry.get("low"), entry.get("high"), signed=signed)


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def why_not_flagged(
    metric: str, entry: object, flagged: object, expected: object, adjusted_p: object
) -> str | None:
    """Why a gap whose interval excludes 0 is not flagged (plain text), or None where there is no such gap.

    An interval that excludes 0 is not the test: the flag compares the gap with those of random patient
    sets of the group's size (whose mean is ``expected``), after the max-T adjustment (``adjusted_p``). A
    calibration error or score is tested on its worse side only, so a gap at or below the size-matched
    reference cannot be flagged; a signed metric (direction "target") is tested both ways.
    """
    if flagged is not False or not isinstance(entry, Mapping):
        return None
    est, low, high = (_number(entry.get(k)) for k in ("estimate", "low", "high"))
    if est is None or low is None or high is None or low <= 0.0 <= high:
        return None
    direction = DIRECTIONS.get(metric, "lower")
    reference = _number(expected)
    if direction != "target" and reference is not None:
        worse = est > reference if direction == "lower" else est < reference
        if not worse:
            side = "higher" if direction == "lower" else "lower"
            shown = format_value(reference, signed=True)
            return f"not flagged: no {side} than random sets of its size ({shown})"
    p = _number(adjusted_p)
    shown = f" (adjusted p {p:.2g})" if p is not None else ""
    return f"not flagged: as random sets of its size{shown}"


def _gap(entry: object, flagged: object, marks: Marks, reason: str | None = None) -> str:
    """A group − rest difference with its interval (markup), starred when flagged, else why not."""
    if entry is None:
        return NOT_COMPARED
    text = para_text(_interval(entry, signed=True, marks=marks)) + (" *" if flagged is True else "")
    if reason:
        text += f'<br/><font color="{Palette.muted.hexval()}"><i>{para_text(reason)}</i></font>'
    return text


def _expected(value: object) -> str:
    return format_value(value, signed=True) if isinstance(value, int | float) else NOT_RECORDED


def _spread(stage: object) -> str:
    if not isinstance(stage, Mapping) or "range" not in stage:
        return NOT_COMPARED
    return _interval(stage["range"])


def ranked_gaps(disparities: Mapping[str, Any], metric: str) -> list[dict[str, Any]]:
    """Every judged (attribute, group) with its gap to the rest after calibration, largest gap first.

    Rows carry ``attribute``, ``group``, ``n``, ``value`` (the group's metric after), ``after`` and
    ``before`` (the group − rest entries), ``expected_after`` / ``expected_before`` (the gap of a random
    patient set of the group's size), ``flagged_after`` / ``flagged_before`` and ``adjusted_p_after`` /
    ``adjusted_p_before``. Ties and missing estimates sort by
    attribute, then group.
    """
    rows = []
    for attribute, by_metric in disparities.items():
        stages = get(by_metric, metric) or {}
        after, before = stages.get("after") or {}, stages.get("before") or {}
        for group, gap in (after.get("versus_rest") or {}).items():
            rows.append(
                {
                    "attribute": attribute,
                    "group": group,
                    "n": get(after, "per_group", group, "n"),
                    "value": get(after, "per_group", group),
                    "after": gap,
                    "before": get(before, "versus_rest", group),
                    "expected_after": get(after, "expected_gap", group),
                    "expected_before": get(before, "expected_gap", group),
                    "flagged_after": get(after, "flagged", group),
                    "flagged_before": get(before, "flagged", group),
                    "adjusted_p_after": get(after, "adjusted_p", group),
                    "adjusted_p_before": get(before, "adjusted_p", group),
                }
            )
    return sorted(rows, key=_rank_key)


def _rank_key(row: Mapping[str, Any]) -> tuple[float, str, str]:
    estimate = get(row["after"], "estimate")
    first = -float(estimate) if isinstance(estimate, int | float) else float("inf")
    return first, str(row["attribute"]), str(row["group"])


def fairness(ctx: Context) -> list[Flowable]:
    """The Fairness section: ranked group-versus-rest gaps, the spread per attribute, groups too small."""
    disparities = get(ctx.evaluation, "disparities")
    story: list[Flowable] = [ctx.h1("Fairness")]
    if not isinstance(disparities, Mapping) or not disparities:
        return [
            *story,
            ctx.p(f"Disparities between subgroups: {NOT_RECORDED} in this run's evaluation.json."),
        ]
    metrics = sorted({m for by_metric in disparities.values() for m in (by_metric or {})})
    story.append(
        ctx.p(
            "Each group's metric is compared with the rest of the cohort (group − rest), with its own "
            f"{ctx.level_text()} paired bootstrap interval on the same patient resamples. That interval "
            "alone is not the test: binned ECE is biased upward in small groups, so a small, well "
            "calibrated group shows a positive gap from its size alone, and an attribute with many groups "
            "shows some large gaps by chance. A group is <b>flagged</b> (*) only when its gap differs from "
            "what random sets of the cohort's patients of the same size show (whole patients permuted "
            "between the groups, which carries the size bias into the reference), after a max-T "
            "adjustment over all the attribute's groups: in a cohort with no disparity, the chance that "
            f"any group of an attribute is flagged is at most {_alpha(ctx)}, whatever the group sizes. The "
            "column <i>expected for its size</i> gives the gap such a random set shows. A flag says the "
            "group differs from the rest, not why: a different case mix is enough. The spread (highest − "
            "lowest) is shown with its interval but is not a test: it is positive even with no disparity. "
            "A group's own interval here comes from the resamples shared by all the attribute's groups, "
            "stratified by that attribute"
            + (
                "; after calibration every temperature is refitted in each of them on the drawn patients "
                "it was fitted on, so the gaps' intervals include the temperatures' uncertainty (the flags "
                "hold the temperatures at their fitted values). It can differ a little from the Results "
                "table's (other resamples); both are the same estimate. "
                if _refitted(disparities)
                else f", with the {ctx.fitted(plural=True)} held at their fitted values"
                + (
                    f", so it can differ from the Results table's, where the {ctx.fitted()} is refitted in "
                    "every resample; both are the same estimate. "
                    if get(ctx.evaluation, "bootstrap", "refit") is True
                    else ", so it can differ a little from the Results table's (other resamples); both "
                    "are the same estimate. "
                )
            )
            + "Intersections of attributes are compared like any attribute. Groups below the minimum size "
            f"({para_text(ctx.min_group_size())} studies) are not compared; they are listed at the end of "
            "this section."
        )
    )
    for metric in metrics:
        name = ctx.metric_name(metric)
        if len(metrics) > 1:
            story.append(ctx.h2(name))
        story += _ranked_table(ctx, disparities, metric, name)
        story += _spread_table(ctx, disparities, metric, name)
    story += _too_small(ctx, disparities, metrics)
    return story


def _refitted(disparities: Mapping[str, Any]) -> bool:
    """Whether the after-calibration comparisons refitted the temperatures in every resample."""
    return any(
        isinstance(stages, Mapping) and get(stages, "after", "refit") is True
        for by_metric in disparities.values()
        for stages in (by_metric or {}).values()
    )


def _ranked_table(ctx: Context, disparities: Mapping[str, Any], metric: str, name: str) -> list[Flowable]:
    rows_data = ranked_gaps(disparities, metric)
    if not rows_data:
        return [ctx.p(f"No two groups of any attribute were large enough to compare on {para_text(name)}.")]
    num = ctx.styles.cell_num
    direction = "higher" if ctx.lower_is_better(metric) else "lower"
    rows: list[list[Any]] = [
        [
            ctx.head("#", right=True),
            ctx.head("Group"),
            ctx.head("n", right=True),
            ctx.head(f"{name} after", right=True),
            ctx.head("Group − rest, after", right=True),
            ctx.head("Expected for its size", right=True),
            ctx.head("Group − rest, before", right=True),
        ]
    ]
    extra: list[tuple[Any, ...]] = []
    marks = Marks()
    # a group that holds the same studies as an earlier one is shown once, on the earlier one's row
    shown = [row for row in rows_data if ctx.twin(row["attribute"], row["group"]) is None]
    also: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows_data:
        twin = ctx.twin(row["attribute"], row["group"])
        if twin is not None:
            also.setdefault((twin.attribute, twin.group), []).append(row)
    for rank, row in enumerate(shown, 1):
        who = f"{para_text(ctx.attribute_label(row['attribute']))}: {para_text(row['group'])}"
        for other in also.get((row["attribute"], str(row["group"])), []):
            who += f"<br/><i>{_also_text(ctx, row, other)}</i>"
        reasons = _reasons(metric, row)
        rows.append(
            [
                ctx.cell(str(rank), style=num),
                ctx.p(who, ctx.styles.cell),
                ctx.cell(format_count(row["n"]), style=num),
                ctx.cell(_interval(row["value"], marks=marks, metric=metric), style=num),
                ctx.p(_gap(row["after"], row["flagged_after"], marks, reasons["after"]), num),
                ctx.cell(_expected(row["expected_after"]), style=num),
                ctx.p(_gap(row["before"], row["flagged_before"], marks, reasons["before"]), num),
            ]
        )
        if row["flagged_after"] is True:
            extra.append(("BACKGROUND", (0, len(rows) - 1), (-1, len(rows) - 1), Palette.small_bg))
    w = ctx.width
    title = (
        f"{para_text(name)} of each group against the rest of the cohort, ranked by the gap after "
        f"calibration (a positive gap: the group is {direction} than the rest). * and shading: flagged, "
        "the gap differs from that of random patient sets of the group's size after the max-T adjustment."
    )
    legend = marks.legend()
    if any(reason for row in rows_data for reason in _reasons(metric, row).values()):
        legend.append(
            "not flagged: the gap's interval excludes 0, but the flag compares it with the gaps of random "
            "patient sets of the group's size: 'as random sets' when it is within their variation (adjusted "
            "p above the level), 'no worse than random sets' when it lies on the side that is not tested."
        )
    if also:
        basis = {
            twin.basis
            for rows in also.values()
            for r in rows
            if (twin := ctx.twin(r["attribute"], r["group"]))
        }
        legend.append(
            "= a group of another attribute that holds the same studies, shown once on this row"
            + (
                " (identified by identical sizes, reliability curves and estimates: this evaluation.json "
                "records no group membership)."
                if "statistics" in basis
                else "."
            )
        )
    widths = [w * 0.05, w * 0.18, w * 0.05, w * 0.19, w * 0.21, w * 0.10, w * 0.22]
    return ctx.table_block(title, table(rows, widths, extra=extra), legend=legend)


def _reasons(metric: str, row: Mapping[str, Any]) -> dict[str, str | None]:
    """Why each stage's gap of a ranked row is not flagged, where its interval excludes 0."""
    return {
        stage: why_not_flagged(
            metric, row[stage], row[f"flagged_{stage}"], row[f"expected_{stage}"], row[f"adjusted_p_{stage}"]
        )
        for stage in ("after", "before")
    }


def _also_text(ctx: Context, row: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    """The note on a row for a group of another attribute with the same studies (markup)."""
    text = (
        f"= {para_text(ctx.attribute_label(other['attribute']))}: {para_text(other['group'])}, the same "
        f"{format_count(other['n'])} studies"
    )
    if other["flagged_after"] is True and row["flagged_after"] is True:
        text += "; flagged as both"
    elif other["flagged_after"] is True:
        text += f"; flagged as a {para_text(ctx.attribute_label(other['attribute']).lower())} group only"
    elif row["flagged_after"] is True:
        text += f"; flagged as a {para_text(ctx.attribute_label(row['attribute']).lower())} group only"
    return text


def _alpha(ctx: Context) -> str:
    level = ctx.level()
    return "one minus the interval level" if level is None else f"{(1 - level) * 100:.3g}%"


def _spread_table(ctx: Context, disparities: Mapping[str, Any], metric: str, name: str) -> list[Flowable]:
    num = ctx.styles.cell_num
    rows: list[list[Any]] = [
        [
            ctx.head("Attribute"),
            ctx.head("Groups compared", right=True),
            ctx.head("Groups at the extremes (after)"),
            ctx.head("Spread before", right=True),
            ctx.head("Spread after", right=True),
        ]
    ]
    notes: list[Flowable] = []
    for attribute, by_metric in disparities.items():
        stages = get(by_metric, metric)
        if not isinstance(stages, Mapping):
            continue
        label = ctx.attribute_label(attribute)
        for stage in ("before", "after"):
            entry = stages.get(stage) or {}
            if "range" not in entry:
                note = para_text(word(entry.get("note"), entry))
                notes.append(
                    ctx.p(
                        f"{para_text(label)}, {stage} calibration: not compared ({note}).", ctx.styles.small
                    )
                )
        after = stages.get("after") or {}
        if "range" not in after and "range" not in (stages.get("before") or {}):
            continue
        extremes = (
            ctx.p(
                f"highest: {name_text(after['highest'])}<br/>lowest: {name_text(after['lowest'])}",
                ctx.styles.cell,
            )
            if "range" in after
            else ctx.cell(NOT_COMPARED)
        )
        rows.append(
            [
                ctx.cell(label),
                ctx.cell(format_count(len(after.get("groups") or [])), style=num),
                extremes,
                ctx.cell(_spread(stages.get("before")), style=num),
                ctx.cell(_spread(after), style=num),
            ]
        )
    if len(rows) == 1:
        return notes
    w = ctx.width
    title = (
        f"Spread of {para_text(name)} across the groups of each attribute (highest − lowest; the groups at "
        "the extremes may differ between resamples, so the interval is that of the spread itself)."
    )
    return [*ctx.table_block(title, table(rows, [w * 0.22, w * 0.13, w * 0.29, w * 0.18, w * 0.18])), *notes]


def _too_small(ctx: Context, disparities: Mapping[str, Any], metrics: list[str]) -> list[Flowable]:
    small: dict[tuple[str, str], Any] = {}
    for attribute, by_metric in disparities.items():
        for metric in metrics:
            for stage in _STAGES:
                for group, n in (get(by_metric, metric, stage, "too_small") or {}).items():
                    small[(attribute, group)] = n
    story: list[Flowable] = [ctx.h2("Groups too small to judge")]
    if not small:
        return [*story, ctx.p("Every group was large enough to be compared.")]
    story.append(
        ctx.p(
            "These groups have fewer studies than the minimum in the evaluation split. They are counted in "
            "the rest of the cohort for the other groups' comparisons, but their own gap is not judged: "
            "a verdict on them needs more studies."
        )
    )
    story += [
        Paragraph(
            f"{para_text(ctx.attribute_label(a))}: {name_text(g)} (n = {format_count(n)})",
            ctx.styles.bullet,
            bulletText="•",
        )
        for (a, g), n in sorted(small.items(), key=lambda item: (str(item[0][0]), str(item[0][1])))
    ]
    return story
