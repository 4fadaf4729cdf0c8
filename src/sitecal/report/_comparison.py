"""Sensitivity analyses, "Recalibration methods compared": calibration.compare's methods beside temperature.

Every number is read from ``evaluation.json``'s ``method_comparison``; nothing is recomputed. A group's
table has one row per method, one column per held-out measure: the value with its interval, and for each
method other than temperature scaling its paired difference from it and what that interval says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reportlab.platypus import Flowable

from ._context import Context
from ._styles import Palette, table
from ._text import format_count, format_interval, format_value, name_text, para_text

__all__ = ["METHOD_LABELS", "METHOD_TEXT", "method_comparison"]

METHOD_LABELS = {
    "temperature": "Temperature scaling",
    "vector": "Vector scaling",
    "matrix": "Matrix scaling (ODIR)",
    "dirichlet": "Dirichlet calibration (ODIR)",
    "histogram": "Histogram binning",
    "isotonic": "Isotonic regression",
    "beta": "Beta calibration",
}
#: How the Methods section describes a deployed method other than temperature scaling.
METHOD_TEXT = {
    "vector": "Vector scaling (Guo et al., 2017): softmax(a ⊙ z + b), a scale and an offset per class "
    "fitted to minimise the negative log-likelihood on the fit split.",
    "matrix": "Matrix scaling with off-diagonal and intercept regularisation (ODIR; Kull et al., 2019): "
    "softmax(W z + b) fitted by penalised negative log-likelihood on the fit split.",
    "dirichlet": "Dirichlet calibration with ODIR (Kull et al., 2019): softmax(W ln p + b) on the model's "
    "log-probabilities, fitted by penalised negative log-likelihood on the fit split.",
    "histogram": "Histogram binning (Zadrozny & Elkan, 2001): each class's probability (one-vs-rest) is "
    "replaced by the share of that class among the fit studies in its equal-width bin, then the row "
    "renormalised.",
    "isotonic": "Isotonic regression (Zadrozny & Elkan, 2002): a monotone map of each class's probability "
    "(one-vs-rest) fitted on the fit split, interpolated linearly, then the row renormalised.",
    "beta": "Beta calibration (Kull, Silva Filho & Flach, 2017): p' = sigmoid(a ln p − b ln(1 − p) + c) on "
    "the positive class's probability, fitted by maximum likelihood on the fit split (a negative a or b "
    "fixed at 0).",
}
_FINDING = {
    "better": ("clearly better", Palette.passed),
    "worse": ("clearly worse", Palette.failed),
    "no_clear_difference": ("within noise", Palette.muted),
    "no_interval": ("no interval", Palette.muted),
}


def _label(method: object) -> str:
    return METHOD_LABELS.get(str(method), name_text(method))


def _cell(ctx: Context, measure: Mapping[str, Any]) -> Flowable:
    value = measure.get("value") or {}
    text = format_interval(value.get("estimate"), value.get("low"), value.get("high"))
    difference = measure.get("difference")
    if isinstance(difference, Mapping):
        word, ink = _FINDING.get(str(measure.get("finding")), ("", Palette.muted))
        change = format_interval(
            difference.get("estimate"), difference.get("low"), difference.get("high"), signed=True
        )
        text += f'<br/><font color="{ink.hexval()}">Δ {change}<br/>{para_text(word)}</font>'
    return ctx.p(text, ctx.styles.cell_num)


def _group_table(ctx: Context, block: Mapping[str, Any], group: Mapping[str, Any]) -> list[Flowable]:
    metrics: Sequence[str] = block.get("metrics") or ()
    methods = group.get("methods") or {}
    heads = ["Method", *(ctx.metric_name(m) for m in metrics)]
    rows: list[list[Any]] = [[ctx.head(h, right=i >= 1) for i, h in enumerate(heads)]]
    for method in block.get("methods") or ():
        measures = methods.get(method) or {}
        rows.append([ctx.cell(_label(method)), *(_cell(ctx, measures.get(m) or {}) for m in metrics)])
    w = ctx.width
    rest = (w * 0.78) / max(len(metrics), 1)
    extra: list[tuple[Any, ...]] = []
    if group.get("small"):
        extra.append(("BACKGROUND", (0, 1), (-1, -1), Palette.small_bg))
    body = table(rows, [w * 0.22, *([rest] * len(metrics))], extra=extra)
    name = "All studies" if group.get("attribute") == "overall" else name_text(group.get("group"))
    if group.get("attribute") == "overall":
        fitted = "every fit study, one global fit (not the per-group calibration of the Results)"
    elif group.get("fit_rows") == "own":
        fitted = "its own fit studies"
    else:
        fitted = f"every fit study (fewer than {format_count(block.get('min_group_size'))} of its own)"
    title = (
        f"Recalibration methods, {name}: fitted on {fitted} (n = {format_count(group.get('n_fit'))}), "
        f"measured on {format_count(group.get('n_evaluation'))} evaluation studies: estimate [interval]; "
        "Δ: the method minus temperature scaling [paired interval]."
    )
    if group.get("small"):
        title += " Shaded: fewer evaluation studies than the minimum group size; not to be read as a finding."
    return ctx.table_block(title, body)


def _summary(ctx: Context, block: Mapping[str, Any]) -> str:
    """One sentence per finding kind: which methods were clearly better, and where."""
    better: list[str] = []
    worse = 0
    for group in block.get("groups") or ():
        if not isinstance(group, Mapping) or group.get("small"):
            continue
        name = "all studies" if group.get("attribute") == "overall" else name_text(group.get("group"))
        for method, measures in (group.get("methods") or {}).items():
            for metric, measure in (measures or {}).items():
                finding = measure.get("finding") if isinstance(measure, Mapping) else None
                if finding == "better":
                    better.append(f"{_label(method)} on {ctx.metric_name(metric)} ({name})")
                elif finding == "worse":
                    worse += 1
    if better:
        text = "Clearly better than temperature scaling (the whole interval of the difference below 0): " + (
            "; ".join(better) + "."
        )
    else:
        text = (
            "No method was clearly better than temperature scaling on any measure in any group large enough "
            "to read: every difference that favours another method lies within resampling noise."
        )
    if worse:
        text += f" {worse} comparisons found a method clearly worse than temperature scaling."
    return text


def method_comparison(ctx: Context, block: Mapping[str, Any]) -> list[Flowable]:
    """Subsection "Recalibration methods compared" of the Sensitivity analyses."""
    methods = [m for m in block.get("methods") or () if m != block.get("reference")]
    level = block.get("level")
    level_text = "confidence" if not isinstance(level, int | float) else f"{level * 100:g}%"
    one_sided = ""
    if isinstance(level, int | float):
        one_sided = f" (a one-sided {(1 + level) / 2 * 100:g}% bound)"
    n_comparisons = len(methods) * len(block.get("metrics") or ()) * len(block.get("groups") or ())
    guide = (
        f"Each of {', '.join(para_text(_label(m)) for m in methods)} is fitted per calibration group on the "
        "fit split, with the temperature's small-group rule for every method (a group with fewer than "
        f"{format_count(block.get('min_group_size'))} fit studies is fitted on all of them), and measured on "
        "the group's evaluation studies. All measures are lower-is-better: held-out NLL and Brier score "
        "(proper scores), and the debiased and smooth ECE, calibration errors whose bias does not grow as a "
        "group gets smaller. Every bootstrap resample draws the fit and the evaluation patients once and "
        "refits every method on that draw, so each difference from temperature scaling is paired and its "
        f"interval includes both fits' uncertainty ({format_count(block.get('n_resamples'))} resamples, "
        f"seed {format_value(block.get('seed'), digits=0)}, {level_text} percentile intervals, whatever the "
        "protocol's interval method). A method is called <b>clearly better</b> when the whole interval of "
        f"its difference lies below 0{one_sided}, <b>clearly worse</b> when it lies above, and otherwise the "
        "difference is <b>within noise</b>; <b>no interval</b> where the interval is undefined or has zero "
        "width (every resample drew the same patients). "
        f"These are {format_count(n_comparisons)} comparisons without a "
        "multiplicity correction: a single “clearly better” among many can be chance. Temperature scaling "
        "remains the deployed calibration; the comparison says whether a richer method would have been "
        "worth its extra parameters."
    )
    story: list[Flowable] = [ctx.h2("Recalibration methods compared"), ctx.p(guide)]
    story.append(ctx.p(_summary(ctx, block)))
    for group in block.get("groups") or ():
        if isinstance(group, Mapping):
            story += _group_table(ctx, block, group)
    return story
