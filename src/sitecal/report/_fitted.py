"""Fitted calibration section: each calibration group's temperature (or other fit), then the global one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reportlab.platypus import Flowable, KeepTogether

from ._comparison import METHOD_LABELS
from ._context import Context
from ._inputs import get
from ._styles import table
from ._text import NOT_RECORDED, format_count, format_value, para_text, words

__all__ = ["fitted_calibration", "fitted_method", "fitted_temperatures"]

_GLOBAL = "\0global"  # key of the global temperature's interval (not a possible group name)

#: How each recorded temperature source is worded in the table.
_SOURCES = {
    "own": "own fit",
    "global_fallback": "global fallback",
    "global": "global fallback",
    "shrunk": "shrunk toward global",
    "shrinkage": "shrunk toward global",
    "empirical_bayes": "empirical Bayes",
}


def _temperature_intervals(ctx: Context) -> dict[str, Mapping[str, Any]]:
    """Interval of each calibration group's temperature from evaluation.json (global: ``_GLOBAL``)."""
    ev = ctx.evaluation
    per = ctx.calibration.get("per")
    out: dict[str, Mapping[str, Any]] = {}
    for entry in (ev.get("subgroups") or {}).get(per, []) if per else []:
        found = entry.get("temperature_interval")
        if isinstance(found, Mapping):
            out[str(entry.get("group"))] = found
            if entry.get("temperature_source") == "global_fallback":
                out.setdefault(_GLOBAL, found)
    overall = ev.get("global_temperature_interval")
    if isinstance(overall, Mapping):
        out[_GLOBAL] = overall
    return out


def fitted_calibration(ctx: Context) -> list[Flowable]:
    """Section "Fitted temperatures", or under another method "Fitted calibration": per group, then global."""
    if ctx.calibration.get("method", "temperature") == "temperature":
        return fitted_temperatures(ctx)
    return fitted_method(ctx)


def fitted_method(ctx: Context) -> list[Flowable]:
    """Another method than temperature scaling: each group's fit, its source, then the global fit."""
    cal = ctx.calibration
    fits = cal.get("fits") or {}
    method = str(cal.get("method"))
    label = METHOD_LABELS.get(method, method)
    per = ctx.attribute_label(cal.get("per"))
    rows: list[list[Any]] = [
        [ctx.head(per), ctx.head("n (fit split)", right=True), ctx.head("Map used"), ctx.head("Notes")]
    ]
    sources = {"own": "own fit", "global_fallback": "global fit (too few fit studies)"}
    for name, entry in (fits.get("groups") or {}).items():
        notes = "; ".join(str(n) for n in ((entry.get("fit") or {}).get("notes") or ())) or "—"
        rows.append(
            [
                ctx.cell(name),
                ctx.cell(format_count(entry.get("n")), style=ctx.styles.cell_num),
                ctx.cell(sources.get(str(entry.get("source")), words(entry.get("source")))),
                ctx.cell(notes),
            ]
        )
    glob = fits.get("global_fit") or {}
    rows.append(
        [
            ctx.p("<b>Global (all fit studies)</b>", ctx.styles.cell),
            ctx.cell("—", style=ctx.styles.cell_num),
            ctx.cell("fit on all"),
            ctx.cell("; ".join(str(n) for n in glob.get("notes") or ()) or "—"),
        ]
    )
    w = ctx.width
    return [
        ctx.h1("Fitted calibration"),
        ctx.p(
            f"{para_text(label)} per {para_text(per.lower())}, fitted on the fit split; its parameters are "
            "in calibration.json (what deployment loads, with sitecal apply or sitecal export). A group "
            f"below the minimum group size ({format_count(fits.get('min_group_size'))} fit studies) and a "
            "group not seen at fitting time use the global fit. The Results measure the calibration on the "
            "evaluation split."
        ),
        KeepTogether(
            ctx.table_block(
                f"{para_text(label)} per {para_text(per.lower())}.",
                table(rows, [w * 0.3, w * 0.14, w * 0.26, w * 0.3]),
            )
        ),
    ]


def _source_text(entry: Mapping[str, Any]) -> str:
    """Where a group's temperature came from, with its empirical-Bayes weight where it has one."""
    source = entry.get("source")
    if not source:
        return NOT_RECORDED
    text = _SOURCES.get(str(source), words(source))
    if source == "empirical_bayes" and isinstance(entry.get("weight"), int | float):
        text += f", w = {entry['weight']:.2f}"
    return text


def _nll_pair(entry: Mapping[str, Any]) -> str:
    """The fit-split NLL before → after the fit, of a group's own fit or of the global fit itself."""
    fit = entry.get("fit") or entry  # a group's own fit, or the global fit itself
    before, after = fit.get("nll_before"), fit.get("nll_after")
    if before is None and after is None:
        return (
            "not fitted (uses global T)"
            if str(entry.get("source", "")).startswith("global")
            else NOT_RECORDED
        )
    return f"{format_value(before)} → {format_value(after)}"


def _interval_text(intervals: Mapping[str, Mapping[str, Any]], name: str) -> str:
    """``low – high`` of group ``name``'s temperature interval (``_GLOBAL``: the global one), or a dash."""
    found = intervals.get(name)
    if not found or found.get("low") is None:
        return "—"
    return f"{format_value(found['low'])} – {format_value(found['high'])}"


def _temperature_rows(ctx: Context, per: str) -> tuple[list[list[Any]], list[str]]:
    """The table rows (header, each group, the global fit) and the names whose solver did not converge."""
    cal = ctx.calibration
    intervals = _temperature_intervals(ctx)
    rows: list[list[Any]] = [
        [
            ctx.head(per),
            ctx.head("n (fit split)", right=True),
            ctx.head("T", right=True),
            ctx.head(f"{ctx.level_text()} interval of T", right=True),
            ctx.head("Source"),
            ctx.head("NLL on fit split, before → after"),
        ]
    ]
    unconverged = []
    for name, entry in cal["groups"].items():
        rows.append(
            [
                ctx.cell(name),
                ctx.cell(format_count(entry.get("n")), style=ctx.styles.cell_num),
                ctx.cell(format_value(entry["temperature"]), style=ctx.styles.cell_num),
                ctx.cell(_interval_text(intervals, name), style=ctx.styles.cell_num),
                ctx.cell(_source_text(entry)),
                ctx.cell(_nll_pair(entry)),
            ]
        )
        if (entry.get("fit") or {}).get("converged") is False:
            unconverged.append(name)
    glob = cal["global_fit"]
    rows.append(
        [
            ctx.p("<b>Global (all fit studies)</b>", ctx.styles.cell),
            ctx.cell(format_count(glob.get("n")), style=ctx.styles.cell_num),
            ctx.p(f"<b>{format_value(glob['temperature'])}</b>", ctx.styles.cell_num),
            ctx.cell(_interval_text(intervals, _GLOBAL), style=ctx.styles.cell_num),
            ctx.cell("fit on all"),
            ctx.cell(_nll_pair(glob)),
        ]
    )
    if glob.get("converged") is False:
        unconverged.append("global")
    return rows, unconverged


def _temperatures_intro(ctx: Context, per: str) -> str:
    """The paragraph above the table: what the NLL columns and the interval of T measure (markup)."""
    if ctx.calibration.get("fallback") == "empirical_bayes":
        how = (
            ". An empirical-Bayes temperature is its group's own fit moved toward the mean of all groups by "
            "1 − w (Methods); its NLL columns are those of the group's own fit, and its interval repeats "
            "the whole shrinkage in every resample of all fit-split patients, as it depends on every group."
        )
    else:
        how = "; a shrunk temperature has none."
    split = get(ctx.evaluation, "split")
    crossfit = (
        " Under cross-fitting the fit split is every study: these are the temperatures deployed, and the "
        "Results evaluate each fold with temperatures fitted the same way on the other folds."
        if isinstance(split, Mapping) and split.get("method") == "crossfit"
        else ""
    )
    return (
        f"One temperature per {para_text(per.lower())}, fitted on the fit split "
        f"(calibration.json). The NLL columns are measured on the same fit studies and show how much the "
        "fit improved them; the honest measure is on the evaluation split in the Results section. "
        "The interval of T resamples the patients of the rows it was fitted on (the group's own, or "
        "the whole fit split for the global temperature)" + how + crossfit
    )


def fitted_temperatures(ctx: Context) -> list[Flowable]:
    """Temperature per calibration group with its n, source and fit-split NLL, then the global one."""
    per = ctx.attribute_label(ctx.calibration["per"])
    rows, unconverged = _temperature_rows(ctx, per)
    w = ctx.width
    story: list[Flowable] = [
        ctx.h1("Fitted temperatures"),
        ctx.p(_temperatures_intro(ctx, per)),
        KeepTogether(
            ctx.table_block(
                f"Temperatures per {para_text(per.lower())}.",
                table(rows, [w * 0.25, w * 0.11, w * 0.09, w * 0.16, w * 0.16, w * 0.23]),
            )
        ),
    ]
    if unconverged:
        story.append(
            ctx.p(
                "<b>Solver did not reach its tolerance for:</b> "
                + ", ".join(para_text(u) for u in unconverged)
                + "."
            )
        )
    return story
