"""Sensitivity analyses section: recalibration per subgroup, heterogeneity across sites, leave-one-site-out.

Every number is read from the ``sensitivity`` key of ``evaluation.json`` (ECE from the document's subgroup
metrics) and printed in the house formats of :mod:`._text`; nothing is recomputed. A document written
before sitecal recorded the analyses gets one sentence saying so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reportlab.platypus import Flowable, KeepTogether

from sitecal.metrics.registry import ECE, metric
from sitecal.metrics.registry import names as metric_names

from ._comparison import method_comparison
from ._context import Context
from ._inputs import get
from ._styles import Palette, table
from ._text import NOT_RECORDED, format_count, format_interval, format_value, name_text, para_text
from ._wording import word

__all__ = ["format_p_value", "format_percent", "sensitivity"]

_STAGES = (("before", "Before"), ("after", "After"))
#: The leave-one-site-out columns: the registry's default metrics, as the evaluation computes them.
_LOSO = tuple((name, metric(name).label) for name in metric_names(default=True))


def format_percent(value: object) -> str:
    """A share in [0, 1] as a percentage with one decimal (``0.6855`` -> ``68.6%``); None: not estimable."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return format_value(None)
    return f"{format_value(100.0 * value, digits=1)}%"


def format_p_value(value: object) -> str:
    """A p-value with three decimals, ``< 0.001`` below that."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 0.001:
        return "&lt; 0.001"
    return format_value(value)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _p_clause(value: object) -> str:
    text = format_p_value(value)
    return text if text.startswith("&lt;") else f"= {text}"


def _stat(entry: object) -> str:
    if not isinstance(entry, Mapping):
        return NOT_RECORDED
    return format_interval(entry.get("estimate"), entry.get("low"), entry.get("high"))


def _ece(ctx: Context, attribute: str, group: object, stage: str) -> str:
    ev = ctx.evaluation
    if attribute == "overall":
        source = ev.get("overall")
    else:
        rows = get(ev, "subgroups", attribute) or []
        source = next((g for g in rows if isinstance(g, Mapping) and g.get("group") == group), None)
    return _stat(get(source, "metrics", ECE.name, stage))


def _recalibration_table(ctx: Context, attribute: str, groups: Sequence[Mapping[str, Any]]) -> list[Flowable]:
    first = "Cohort" if attribute == "overall" else ctx.attribute_label(attribute)
    heads = [first, "Stage", "ECE", "Slope", "Intercept", "O:E"]
    rows: list[list[Any]] = [[ctx.head(h, right=i >= 2) for i, h in enumerate(heads)]]
    extra: list[tuple[Any, ...]] = []
    notes: list[str] = []
    num = ctx.styles.cell_num
    boot = _mapping(ctx.evaluation.get("bootstrap"))  # what a bootstrap interval's note needs
    for group in groups:
        start = len(rows)
        name = "All studies" if attribute == "overall" else group.get("group")
        label = f"<b>{name_text(name)}</b><br/>n = {format_count(group.get('n'))}"
        for i, (stage, stage_name) in enumerate(_STAGES):
            entry = _mapping(group.get(stage))
            cells = [ctx.cell(_stat(entry.get(k)), style=num) for k in ("slope", "intercept", "oe_ratio")]
            rows.append(
                [
                    ctx.p(label, ctx.styles.cell) if i == 0 else "",
                    ctx.cell(stage_name),
                    ctx.cell(_ece(ctx, attribute, group.get("group"), stage), style=num),
                    *cells,
                ]
            )
            for key, what in (("slope", "slope"), ("intercept", "intercept"), ("oe_ratio", "O:E")):
                note = get(entry, key, "note")
                if note and get(entry, key, "estimate") is None:
                    notes.append(f"{name_text(name)}, {stage}, {what}: {para_text(word(note, boot))}.")
        end = len(rows) - 1
        extra += [("SPAN", (0, start), (0, end)), ("NOSPLIT", (0, start), (-1, end))]
        extra.append(("LINEBELOW", (0, end), (-1, end), 0.6, Palette.rule))
        if group.get("small"):
            extra.append(("BACKGROUND", (0, start), (-1, end), Palette.small_bg))
    w = ctx.width
    body = table(rows, [w * 0.14, w * 0.07, w * 0.19, w * 0.19, w * 0.22, w * 0.19], extra=extra)
    title = (
        f"Calibration slope, intercept and O:E beside ECE, {para_text(first.lower())}: estimate [interval]."
    )
    story = ctx.table_block(title, body)
    if notes:
        story.insert(-1, ctx.p("Not estimable: " + " ".join(notes), ctx.styles.caption))
    return story


def _recalibration(ctx: Context, rec: Mapping[str, Any]) -> list[Flowable]:
    level = ctx.level_text()
    intervals = _mapping(rec.get("intervals"))
    boot = _mapping(ctx.evaluation.get("bootstrap"))  # the cluster bootstrap's settings
    fields = {**boot, "fitted": ctx.fitted(plural=True)}
    guide = (
        "Top-label logistic recalibration on the evaluation split: the event is “the predicted class is "
        "correct”, its probability the top-label confidence. The <b>slope</b> is b of logit P(correct) = "
        "a + b·logit(confidence): 1 is ideal, below 1 means confidences too extreme. The <b>intercept</b> "
        "(calibration-in-the-large) is α of logit P(correct) = α + logit(confidence), the slope fixed at 1: "
        "0 is ideal, below 0 means over-confident on average. <b>O:E</b> is observed over expected "
        "correct predictions, accuracy / mean confidence: 1 is ideal. "
        f"Intervals ({level}): slope and intercept, {para_text(word(intervals.get('slope'), fields))}; "
        f"O:E, {para_text(word(intervals.get('oe_ratio'), fields))}. ECE is the main results' value."
    )
    story: list[Flowable] = [ctx.h2("Calibration slope, intercept and observed/expected"), ctx.p(guide)]
    if isinstance(rec.get("overall"), Mapping):
        story += _recalibration_table(ctx, "overall", [rec["overall"]])
    for attribute, groups in (rec.get("subgroups") or {}).items():
        if isinstance(groups, Sequence) and groups:
            story += _recalibration_table(ctx, str(attribute), [g for g in groups if isinstance(g, Mapping)])
    return story


def _site_label(ctx: Context, block: Mapping[str, Any]) -> str:
    attribute = block.get("attribute")
    return ctx.attribute_label(attribute) if attribute else "Site"


def _meta_sentence(stage_name: str, meta: Mapping[str, Any], level: str) -> str:
    if not meta.get("k"):
        why = word(meta.get("note"), missing="no site could be pooled")
        return f"{stage_name} calibration: {para_text(why)}."
    text = (
        f"{stage_name} calibration, over {format_count(meta['k'])} sites: Cochran’s Q = "
        f"{format_value(meta.get('q'))} (df {format_count(meta.get('df'))}, "
        f"p {_p_clause(meta.get('p_value'))}), "
        f"I² = {format_percent(meta.get('i2'))}, τ² = "
        f"{format_value(meta.get('tau2'))}; pooled O:E (random effects) "
        f"{format_interval(meta.get('pooled_oe'), meta.get('pooled_oe_low'), meta.get('pooled_oe_high'))} "
        f"({level} interval)"
    )
    if meta.get("prediction_oe_low") is not None and meta.get("prediction_oe_high") is not None:
        text += (
            f"; a new site's O:E is expected within [{format_value(meta['prediction_oe_low'])}, "
            f"{format_value(meta['prediction_oe_high'])}] ({level} prediction interval)"
        )
        k = meta.get("k")
        if k == 3:
            text += (
                " (with three sites this interval rests on a t distribution with 1 degree of freedom and is "
                "very wide)"
            )
        elif isinstance(k, int) and 4 <= k <= 6:
            text += (
                f"; with {k} sites this prediction interval is approximate: in simulations with 4–6 sites "
                "and between-site variation it contained a new site's true O:E in 87–93 % of cases rather "
                "than 95 %"
            )
    text += "."
    if meta.get("note"):
        text += f" {para_text(word(meta['note']))}."
    return text


def _method_text(method: object) -> str:
    if method == "dersimonian_laird":
        return (
            "Random-effects meta-analysis (DerSimonian–Laird, Wald interval) of log(O:E) per site on the "
            "evaluation split."
        )
    return (
        "Random-effects meta-analysis of log(O:E) per site on the evaluation split: τ² by restricted "
        "maximum likelihood (REML) and the pooled interval by Hartung–Knapp with its variance never below "
        "the fixed-scale one (the max(1, q) modification; t with k − 1 degrees of freedom), which keeps at "
        "least its level with few sites (conservative when the sites agree closely) where the Wald interval "
        "is too narrow; the "
        "prediction interval (t with k − 2 degrees of freedom, τ² plus the pooled estimate's variance) "
        "is where a new site's O:E is expected, and needs three sites or more."
    )


def _prediction(meta: Mapping[str, Any]) -> str:
    low, high = meta.get("prediction_oe_low"), meta.get("prediction_oe_high")
    if low is None or high is None:
        return "not estimable (fewer than 3 sites)" if meta.get("k") else NOT_RECORDED
    return f"[{format_value(low)}, {format_value(high)}]"


def _heterogeneity(ctx: Context, het: Mapping[str, Any]) -> list[Flowable]:
    story: list[Flowable] = [ctx.h2("Heterogeneity across sites")]
    if het.get("attribute") is None:
        return [
            *story,
            ctx.p(f"Not analysed: {para_text(word(het.get('note') or het.get('attribute_source')))}."),
        ]
    label = _site_label(ctx, het)
    level = ctx.level_text()
    intro = (
        f"Sites are the groups of {para_text(label)} ({para_text(word(het.get('attribute_source')))}). "
        + _method_text(het.get("method"))
        + " Each site's log(O:E) comes with its cluster-robust (patient) delta-method variance; Cochran’s Q "
        "is tested against χ² with k − 1 degrees of freedom, I² is the share of the spread beyond chance "
        "and τ² the between-site variance of log(O:E). Sites with fewer than "
        f"{format_count(het.get('min_group_size'))} evaluation studies, and studies whose site is unknown, "
        "are left out. With few sites Q has "
        "little power: a large p-value is not evidence that the sites agree."
    )
    story += [ctx.p(intro)]
    stages = {s: _mapping(het.get(s)) for s, _ in _STAGES}
    story += [ctx.p(_meta_sentence(name, stages[s], level)) for s, name in _STAGES]
    heads = [label, "Studies", "O:E before", "O:E after", "Weight after"]
    rows: list[list[Any]] = [[ctx.head(h, right=i >= 1) for i, h in enumerate(heads)]]
    num = ctx.styles.cell_num
    by_stage = {s: {_mapping(r).get("group"): r for r in stages[s].get("groups") or []} for s, _ in _STAGES}
    sites = list(dict.fromkeys([*by_stage["before"], *by_stage["after"]]))
    for site in sites:
        before, after = _mapping(by_stage["before"].get(site)), _mapping(by_stage["after"].get(site))
        n = after.get("n", before.get("n"))
        weight = after.get("weight")
        rows.append(
            [
                ctx.cell(site),
                ctx.cell(format_count(n), style=num),
                ctx.cell(format_value(before.get("oe_ratio")), style=num),
                ctx.cell(format_value(after.get("oe_ratio")), style=num),
                ctx.cell(format_percent(weight) if weight is not None else NOT_RECORDED, style=num),
            ]
        )
    pooled = [
        format_interval(
            stages[s].get("pooled_oe"), stages[s].get("pooled_oe_low"), stages[s].get("pooled_oe_high")
        )
        for s, _ in _STAGES
    ]
    summary = [
        ("Pooled O:E (random effects)", pooled[0], pooled[1]),
        ("Cochran’s Q", *(format_value(stages[s].get("q")) for s, _ in _STAGES)),
        ("p-value of Q", *(format_p_value(stages[s].get("p_value")) for s, _ in _STAGES)),
        ("I²", *(format_percent(stages[s].get("i2")) for s, _ in _STAGES)),
        ("τ² (log O:E)", *(format_value(stages[s].get("tau2")) for s, _ in _STAGES)),
        ("Prediction interval, new site", *(_prediction(stages[s]) for s, _ in _STAGES)),
    ]
    first_summary = len(rows)
    for name, before_text, after_text in summary:
        rows.append(
            [
                ctx.p(f"<b>{name}</b>", ctx.styles.cell),
                "",
                ctx.p(before_text, num),
                ctx.p(after_text, num),
                "",
            ]
        )
    w = ctx.width
    extra: list[tuple[Any, ...]] = [("LINEABOVE", (0, first_summary), (-1, first_summary), 0.6, Palette.rule)]
    extra += [("SPAN", (0, r), (1, r)) for r in range(first_summary, len(rows))]
    body = table(rows, [w * 0.34, w * 0.12, w * 0.2, w * 0.2, w * 0.14], extra=extra)
    block = ctx.table_block(f"O:E by {para_text(label.lower())} and the random-effects summary.", body)
    story = [*story[:2], KeepTogether([*story[2:], *block[:-1]]), block[-1]]
    excluded = [
        f"{name_text(e.get('group'))} ({stage}, n = {format_count(e.get('n'))}: "
        f"{para_text(word(e.get('reason'), het))})"
        for stage, _ in _STAGES
        for e in map(_mapping, stages[stage].get("excluded") or [])
    ]
    if excluded:
        story.append(ctx.p("Left out of the pooling: " + "; ".join(excluded) + "."))
    return story


def _change(value: object, difference: object, *, digits: int = 3) -> str:
    if value is None:
        return format_value(None)
    return f"{format_value(value, digits=digits)} ({format_value(difference, digits=digits, signed=True)})"


def _leave_one_out(ctx: Context, loso: Mapping[str, Any]) -> list[Flowable]:
    story: list[Flowable] = [ctx.h2("Leave one site out")]
    if loso.get("attribute") is None:
        return [
            *story,
            ctx.p(f"Not analysed: {para_text(word(loso.get('note') or loso.get('attribute_source')))}."),
        ]
    label = _site_label(ctx, loso)
    story.append(
        ctx.p(
            f"Each {para_text(label.lower())} in turn is removed from both the fit and the evaluation "
            f"split; {para_text(word(loso.get('refit'), {'fitted': ctx.fitted(plural=True)}))}; the overall "
            "metrics after calibration are "
            "measured on the remaining evaluation studies (point estimates; in brackets the change from the "
            "full cohort, computed the same way). A large change means the overall result leans on one site. "
            f"Then, the internal–external validation: the {ctx.fitted(plural=True)} fitted without the site "
            "are applied to all the site's own studies (none of them used to fit), as a new site would be "
            f"calibrated; its groups unseen at fitting take the global {ctx.fitted()}."
        )
    )
    heads = ["Left out", "Fit studies", "Evaluation studies", *(name for _, name in _LOSO)]
    rows: list[list[Any]] = [[ctx.head(h, right=i >= 1) for i, h in enumerate(heads)]]
    num = ctx.styles.cell_num
    full = _mapping(loso.get("full"))
    rows.append(
        [
            ctx.p("<b>Nothing (full cohort)</b>", ctx.styles.cell),
            ctx.cell(format_count(full.get("n_fit")), style=num),
            ctx.cell(format_count(full.get("n_evaluation")), style=num),
            *(ctx.cell(format_value(get(full, "metrics", m)), style=num) for m, _ in _LOSO),
        ]
    )
    notes = []
    for row in map(_mapping, loso.get("rows") or []):
        rows.append(
            [
                ctx.cell(row.get("left_out")),
                ctx.cell(format_count(row.get("n_fit")), style=num),
                ctx.cell(format_count(row.get("n_evaluation")), style=num),
                *(
                    ctx.cell(_change(get(row, "metrics", m), get(row, "difference", m)), style=num)
                    for m, _ in _LOSO
                ),
            ]
        )
        if row.get("note"):
            fitted = {"fitted": ctx.fitted(plural=True)}
            notes.append(f"{name_text(row.get('left_out'))}: {para_text(word(row['note'], fitted))}.")
    w = ctx.width
    widths = [w * 0.22, w * 0.09, w * 0.11, *([w * (0.58 / len(_LOSO))] * len(_LOSO))]
    title = f"Leave one {para_text(label.lower())} out: metrics after calibration (change from full cohort)."
    block = ctx.table_block(title, table(rows, widths))
    story = [KeepTogether([*story, *block[:-1]]), block[-1]]  # a long table still splits, header repeated
    if notes:
        story.append(ctx.p("Not estimable: " + " ".join(notes), ctx.styles.caption))
    return story + _external_table(ctx, loso, label)


def _external_table(ctx: Context, loso: Mapping[str, Any], label: str) -> list[Flowable]:
    """Each left-out site's own studies, calibrated with the temperatures fitted without it."""
    loso_rows = [r for r in map(_mapping, loso.get("rows") or []) if _mapping(r.get("external"))]
    if not loso_rows:
        return []
    num = ctx.styles.cell_num
    heads = ["Validated on", "Its studies", *(name for _, name in _LOSO)]
    rows: list[list[Any]] = [[ctx.head(h, right=i >= 1) for i, h in enumerate(heads)]]
    for row in loso_rows:
        n = (row.get("n_left_out_fit") or 0) + (row.get("n_left_out_evaluation") or 0)
        rows.append(
            [
                ctx.cell(row.get("left_out")),
                ctx.cell(format_count(n), style=num),
                *(ctx.cell(format_value(get(row, "external", m)), style=num) for m, _ in _LOSO),
            ]
        )
    w = ctx.width
    widths = [w * 0.3, w * 0.12, *([w * (0.58 / len(_LOSO))] * len(_LOSO))]
    title = (
        f"Internal–external validation: each {para_text(label.lower())}'s own studies, after calibration "
        f"with the {ctx.fitted(plural=True)} fitted on the other sites (point estimates)."
    )
    return ctx.table_block(title, table(rows, widths))


def sensitivity(ctx: Context) -> list[Flowable]:
    """Section "Sensitivity analyses": slope/intercept/O:E per subgroup, heterogeneity, leave-one-site-out.

    Place it after the Limitations section (before Provenance). Documents without a ``sensitivity`` key
    (written by earlier versions) get a sentence instead of tables.
    """
    story: list[Flowable] = [ctx.h1("Sensitivity analyses")]
    sens = ctx.evaluation.get("sensitivity")
    if not isinstance(sens, Mapping):
        story.append(
            ctx.p(
                "This evaluation.json records no sensitivity analyses (it was written by a version of "
                "sitecal that did not compute them); run the evaluation again to add calibration slope, "
                "intercept and O:E per subgroup, heterogeneity across sites and leave-one-site-out results."
            )
        )
        return story
    parts = (
        ("recalibration", _recalibration),
        ("heterogeneity", _heterogeneity),
        ("leave_one_site_out", _leave_one_out),
    )
    for key, build in parts:
        block = sens.get(key)
        if isinstance(block, Mapping):
            story += build(ctx, block)
        else:
            story.append(ctx.p(f"{para_text(key.replace('_', ' ').capitalize())}: {NOT_RECORDED}."))
    compared = ctx.evaluation.get("method_comparison")
    if isinstance(compared, Mapping):
        story += method_comparison(ctx, compared)
    return story
