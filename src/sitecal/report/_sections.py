"""Front sections of the report: title page and intended use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reportlab.lib.units import mm
from reportlab.platypus import Flowable, PageBreak, Paragraph, Spacer, Table, TableStyle

from ._context import Context, verdict_text
from ._governance import GOVERNANCE_FIELDS, draft_fields
from ._inputs import get
from ._marks import Marks, near_margin
from ._model_outputs import flow_without_dicom, predictions_record, read_from_file_text, weights_text
from ._styles import Palette, table
from ._text import (
    NOT_RECORDED,
    format_count,
    format_utc,
    name_text,
    para_text,
    short_sha,
)
from ._wording import criterion_text, margin_text, word

__all__ = ["intended_use", "key_values", "title_page"]


def _article(noun: str) -> str:
    """``a temperature``, ``an isotonic regression fit``."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def key_values(ctx: Context, rows: list[tuple[str, Any]], *, label_width: float = 0.3) -> Table:
    cells = [
        [ctx.head(label), value if isinstance(value, Flowable) else ctx.cell(value)] for label, value in rows
    ]
    widths = [ctx.width * label_width, ctx.width * (1 - label_width)]
    return table(cells, widths, header=False)


def _verdict_box(ctx: Context) -> Table:
    verdict = ctx.evaluation["verdict"]
    word, ink, background = verdict_text(verdict)
    criteria = ctx.evaluation["acceptance"]
    tally: dict[str, int] = {}
    for criterion in criteria:
        key = verdict_text(criterion["verdict"])[0].lower()
        tally[key] = tally.get(key, 0) + 1
    if criteria:
        summary = (
            f"{len(criteria)} acceptance criteria: " + ", ".join(f"{n} {k}" for k, n in tally.items()) + "."
        )
    else:
        summary = "The protocol defines no acceptance criteria."
    fonts = ctx.styles.fonts
    big_style = ctx.styles.body.clone("verdict", leading=28, spaceAfter=0)
    big: Flowable = Paragraph(
        f'<font name="{fonts.regular}" size="10" color="{Palette.muted.hexval()}">Overall verdict</font><br/>'
        f'<font name="{fonts.bold}" size="24" color="{ink.hexval()}">{para_text(word.upper())}</font>',
        big_style,
    )
    if draft_fields(ctx.protocol):  # as prominent as the verdict: a draft decides nothing yet
        draft = Paragraph(
            f'<font name="{fonts.regular}" size="10" color="{Palette.muted.hexval()}">Report status</font>'
            f'<br/><font name="{fonts.bold}" size="24" color="{Palette.failed.hexval()}">DRAFT</font>',
            big_style,
        )
        big = Table([[big, draft]], colWidths=[ctx.width * 0.5 - 10, ctx.width * 0.5 - 10])
        big.setStyle(TableStyle([("LEFTPADDING", (0, 0), (-1, -1), 0), ("VALIGN", (0, 0), (-1, -1), "TOP")]))
    small = ctx.p(
        para_text(summary) + " The Acceptance criteria section gives each criterion group by group.",
        ctx.styles.small,
    )
    box = Table([[big], [small]], colWidths=[ctx.width])
    box.setStyle(
        TableStyle(
            [
                ("BACKGROUND", (0, 0), (-1, -1), background),
                ("BOX", (0, 0), (-1, -1), 1.2, ink),
                ("LEFTPADDING", (0, 0), (-1, -1), 10),
                ("TOPPADDING", (0, 0), (-1, 0), 8),
                ("BOTTOMPADDING", (0, -1), (-1, -1), 8),
            ]
        )
    )
    return box


def _sites_text(flow: Mapping[str, Any]) -> str | None:
    """The sites of the analysed studies, most studies first (``None`` when not recorded)."""
    sites = get(flow, "sources", "sites")
    if not isinstance(sites, list):
        return None
    names = [str(get(s, "value")) for s in sites]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"{len(names)} site{'s' if len(names) != 1 else ''}: {shown}" if names else "none"


def _status_note(ctx: Context) -> Paragraph:
    """DRAFT and what it waits for, or the reminder that the report is valid once signed."""
    names_missing = set(draft_fields(ctx.protocol))
    missing = [f for f in GOVERNANCE_FIELDS if f.name in names_missing]
    if missing:
        names = ", ".join(para_text(f.label.lower()) for f in missing)
        fields = ", ".join(para_text(f.protocol_field) for f in missing)
        return ctx.p(
            f'<font color="{Palette.failed.hexval()}"><b>DRAFT.</b></font> <i>The protocol does not yet give '
            f"the {names} statement{'s' if len(missing) > 1 else ''} ({fields}); the sign-off section "
            "shows what each must say. This report is not valid until they are given and it is signed.</i>",
            ctx.styles.note,
        )
    return ctx.p(
        "<i>For review by the governance committee. This report is not valid until it is signed in the "
        "sign-off section.</i>",
        ctx.styles.note,
    )


def _identifiers(ctx: Context) -> Table:
    """The key identifiers: document, protocol, model (and where its outputs came from), sites, run, sizes."""
    protocol, provenance, ev = ctx.protocol, ctx.provenance, ctx.evaluation
    model = get(provenance, "model", "name")
    flow = get(ev, "cohort_flow") or {}
    split = get(ev, "split") or {}
    analysed = format_count(flow.get("analysed"))
    n_evaluation = split.get("n_evaluation", flow.get("evaluation"))
    evaluated = NOT_RECORDED if n_evaluation is None else f"{format_count(n_evaluation)} studies"
    if n_evaluation is not None and split.get("patients_evaluation") is not None:
        evaluated += f", {format_count(split['patients_evaluation'])} patients"
    record = predictions_record(provenance)
    # sites are read from DICOM headers: without a DICOM folder there are none to count
    sites = "no DICOM folder was read" if flow_without_dicom(flow, record) else _sites_text(flow)
    if flow.get("source") == "network_parts":
        sites = f"{format_count(get(provenance, 'network_parts', 'parts'))} sites' predictions parts"
    weights: list[tuple[str, Any]] = [("Model sha256", short_sha(get(provenance, "sha256", "model")))]
    if record is not None:  # the model was not run here: say so, and where its outputs came from
        weights = [
            ("Model sha256", weights_text(provenance)),
            ("Model outputs", ctx.p(read_from_file_text(record, provenance), ctx.styles.cell)),
        ]
    return key_values(
        ctx,
        [
            ("Document ID", provenance.get("document_id")),
            ("Protocol", protocol["name"]),
            ("Protocol sha256", short_sha(protocol.get("sha256") or get(ev, "protocol", "sha256"))),
            ("Model", model),
            ("Model version", get(provenance, "model", "version")),
            *weights,
            ("Site(s)", sites),
            ("Run date (UTC)", format_utc(provenance.get("created_utc"))),
            ("Run folder", provenance.get("run_folder")),
            ("Studies analysed", analysed),
            ("Evaluation split", evaluated),
            ("Produced by", f"sitecal {provenance.get('sitecal_version') or '(version not recorded)'}"),
        ],
    )


def _criteria_at_a_glance(ctx: Context, criteria: list[Any]) -> list[Flowable]:
    """Each criterion with its margin, the groups that do not pass and its verdict; the marks' legend."""
    rows: list[list[Any]] = [
        [ctx.head("Acceptance criterion"), ctx.head("Groups that do not pass"), ctx.head("Verdict")]
    ]
    marks = Marks()
    for criterion in criteria:
        rows.append(
            [
                ctx.p(
                    para_text(criterion.get("description") or criterion_text(criterion))
                    + f'<br/><font color="{Palette.muted.hexval()}">margin: '
                    + f"{para_text(margin_text(criterion))}</font>",
                    ctx.styles.cell,
                ),
                ctx.p(_not_passing(ctx, criterion, marks), ctx.styles.cell),
                ctx.verdict_cell(criterion["verdict"]),
            ]
        )
    return [
        Spacer(1, 5 * mm),
        ctx.p(
            "<b>Acceptance criteria at a glance</b> (estimate [interval] of each group that does not "
            f"pass; the intervals are two-sided {ctx.level_text()}"
            + (
                "; <i>needed</i>: the evaluation studies a group like it would need for an 80% chance "
                "to pass if it were perfectly calibrated, where it has fewer; a group whose estimate is "
                "near the margin may stay inconclusive with more (Acceptance criteria, Study size)"
                if isinstance(ctx.evaluation.get("planning"), Mapping)
                else ""
            )
            + ")",
            ctx.styles.small,
        ),
        table(rows, [ctx.width * 0.42, ctx.width * 0.4, ctx.width * 0.18]),
        *[ctx.p(para_text(line), ctx.styles.note) for line in marks.legend()],
    ]


def title_page(ctx: Context) -> list[Flowable]:
    """Title, key identifiers, the overall verdict, criteria at a glance and points to note."""
    protocol, ev = ctx.protocol, ctx.evaluation
    title = protocol.get("title") or f"Calibration validation: protocol {protocol['name']}"
    heading = ctx.p("Validation report", ctx.styles.kicker)
    heading.outline = (0, "Validation report")
    story: list[Flowable] = [
        Spacer(1, 18 * mm),
        heading,
        ctx.p(para_text(title), ctx.styles.title),
        _status_note(ctx),
        Spacer(1, 6 * mm),
        _verdict_box(ctx),
        Spacer(1, 6 * mm),
        _identifiers(ctx),
    ]
    criteria = ev["acceptance"]
    if criteria:
        story += _criteria_at_a_glance(ctx, criteria)
    warnings = ev.get("warnings") or []
    if warnings:
        story += [Spacer(1, 4 * mm), ctx.p("<b>Points to note</b>", ctx.styles.small)]
        story += [
            Paragraph(para_text(_warning_text(ctx, w)), ctx.styles.bullet, bulletText="•") for w in warnings
        ]
    story.append(PageBreak())
    return story


def _not_passing(ctx: Context, criterion: Mapping[str, Any], marks: Marks) -> str:
    """The criterion's failing and inconclusive groups with their figures (reportlab markup)."""
    parts = []
    for result in criterion.get("results") or []:
        verdict = result.get("verdict")
        if verdict not in ("fail", "inconclusive"):
            continue
        figure = para_text(marks.interval(result, metric=criterion.get("metric")))
        name = (
            "all studies" if criterion.get("scope") in (None, "overall") else name_text(result.get("group"))
        )
        size = result.get("study_size")
        needed = size.get("needed") if verdict == "inconclusive" and isinstance(size, Mapping) else None
        planned = ""
        if isinstance(needed, int) and isinstance(result.get("n"), int) and needed > result["n"]:
            planned = (
                f"; n = {format_count(result.get('n'))}; about {format_count(needed)} needed if it were "
                "perfectly calibrated"
            )
            if near_margin(result, criterion):
                planned += ", but its estimate is near the margin, so more studies may not settle it"
        parts.append(f"{name}: {figure} ({para_text(verdict)}{planned})")
    if not parts:
        unjudged = sum(r.get("verdict") == "insufficient data" for r in criterion.get("results") or [])
        return f"none ({unjudged} not judged: too few studies)" if unjudged else "none"
    return "; ".join(parts)


def _warning_text(ctx: Context, warning: Mapping[str, Any]) -> str:
    """A point to note in words: its code with its fields and the attribute's display label."""
    return word(warning.get("code"), {**warning, "label": ctx.attribute_label(warning.get("attribute"))})


def intended_use(ctx: Context) -> list[Flowable]:
    """Intended use (protocol text) and the question this validation answers."""
    protocol, ev = ctx.protocol, ctx.evaluation
    story: list[Flowable] = [ctx.h1("Intended use")]
    text = protocol.get("intended_use")
    if text:
        story += [ctx.p(para_text(part.strip())) for part in str(text).split("\n\n") if part.strip()]
    else:
        story.append(ctx.p(f"Intended use: {NOT_RECORDED} in the protocol."))
    classes = ev.get("class_names")
    if classes:
        story.append(ctx.p("<b>Output classes:</b> " + ", ".join(para_text(c) for c in classes) + "."))
    story.append(ctx.h2("Question answered"))
    question = protocol.get("question")
    if question:
        story.append(ctx.p(para_text(question)))
    else:
        per = ctx.attribute_label(get(ctx.calibration, "per") or ev.get("calibration_attribute") or "group")
        attributes = [ctx.attribute_label(a).lower() for a in ev["subgroups"]]
        among = ", ".join(attributes) if attributes else "subgroup"
        story.append(
            ctx.p(
                "On the patients, scanners and sites of this cohort, are the model's predicted probabilities "
                "honest (does a predicted 80% come true about 80% of the time), overall and in every "
                f"{para_text(among)} group, before and after {_article(ctx.fitted())} fitted per "
                f"{para_text(per.lower())}; for whom are they not; and does the calibrated model meet the "
                "acceptance criteria the protocol set in advance?"
            )
        )
    return story
