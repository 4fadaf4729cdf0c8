"""Limitations section, written from this run's numbers, and the highest-confidence errors.

The points are drawn from ``evaluation.json``: groups below the minimum size, the widest intervals, the
share of studies whose attribute is ``unknown`` (with what de-identification does to the tags), the
exclusions, and the studies the calibrated model got wrong with the highest confidence, named by their
pseudonymised key. The only arithmetic is on printed numbers (an interval's width, the total of the
exclusion counts), so a reader can check each one against the tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from reportlab.platypus import Flowable, Paragraph

from ._cohort import format_share
from ._context import Context
from ._inputs import get
from ._marks import Marks, is_clamped, near_margin
from ._model_outputs import ONE_PER_STUDY, flow_without_dicom, predictions_record, read_from_file_text
from ._styles import table
from ._text import NOT_RECORDED, format_count, format_value, name_text, para_text, words
from ._wording import margin_text, word

__all__ = ["DEIDENTIFIED_TAGS", "limitations"]

_ABSENT = "not recorded in this run's evaluation.json"
#: Tags that the DICOM Basic Application Level Confidentiality Profile (PS3.15 Annex E, Table E.1-1)
#: removes or empties: InstitutionName and StationName (X/Z/D), PatientAge (X), PatientSex (Z); the
#: Retain Patient Characteristics Option keeps the last two.
DEIDENTIFIED_TAGS = ("InstitutionName", "StationName", "PatientAge", "PatientSex")
_WIDEST = 3


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _groups(ev: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(attribute, group entry) of the overall row and every subgroup row."""
    if isinstance(ev.get("overall"), Mapping):
        yield "overall", ev["overall"]
    for attribute, groups in (ev.get("subgroups") or {}).items():
        for group in groups if isinstance(groups, Sequence) else ():
            if isinstance(group, Mapping):
                yield str(attribute), group


def _group_name(ctx: Context, attribute: str, group: Mapping[str, Any]) -> str:
    if attribute == "overall":
        return "all studies"
    return f"{para_text(ctx.attribute_label(attribute))} ‘{name_text(group.get('group'))}’"


def _bullet(ctx: Context, markup: str) -> Paragraph:
    return Paragraph(markup, ctx.styles.bullet, bulletText="•")


def _small_groups(ctx: Context) -> Paragraph:
    minimum = ctx.min_group_size()
    small = [(a, g) for a, g in _groups(ctx.evaluation) if g.get("small")]
    if not small:
        return _bullet(
            ctx,
            f"<b>Group sizes.</b> Every reported group has at least {para_text(minimum)} studies in the "
            "evaluation split.",
        )
    named = "; ".join(
        f"{_group_name(ctx, a, g)} (n = {format_count(g.get('n'))}"
        + (f", {format_count(g['n_patients'])} patients)" if g.get("n_patients") is not None else ")")
        for a, g in small
    )
    return _bullet(
        ctx,
        f"<b>Small groups.</b> {len(small)} group{'s' if len(small) > 1 else ''} below the minimum of "
        f"{para_text(minimum)} evaluation studies: {named}. Their intervals are wide and they are not judged "
        "against the acceptance criteria.",
    )


def _widest(ctx: Context) -> list[Flowable]:
    """The widest after-calibration intervals per metric, and failures caused by a bound, not the estimate."""
    rows: list[list[Any]] = [
        [
            ctx.head("Metric"),
            ctx.head("Group"),
            ctx.head("n", right=True),
            ctx.head("After calibration", right=True),
            ctx.head("Width", right=True),
        ]
    ]
    marks = Marks()
    for metric in ctx.evaluation.get("metrics") or []:
        found = []
        for attribute, group in _groups(ctx.evaluation):
            if ctx.twin(attribute, group.get("group")) is not None:
                continue  # the same studies as a group listed before: once
            after = get(group, "metrics", metric, "after") or {}
            low, high = _number(get(after, "low")), _number(get(after, "high"))
            if low is not None and high is not None:
                found.append((high - low, attribute, group, after))
        found.sort(key=lambda f: -f[0])  # stable: ties keep the document's order
        for width, attribute, group, after in found[:_WIDEST]:
            rows.append(
                [
                    ctx.cell(ctx.metric_name(metric)),
                    ctx.p(_group_name(ctx, attribute, group), ctx.styles.cell),
                    ctx.cell(format_count(group.get("n")), style=ctx.styles.cell_num),
                    ctx.cell(marks.interval(after, metric=metric), style=ctx.styles.cell_num),
                    ctx.cell(format_value(width), style=ctx.styles.cell_num),
                ]
            )
    if len(rows) == 1:
        return [_bullet(ctx, f"<b>Interval widths.</b> The intervals are {_ABSENT}."), *_inconclusive(ctx)]
    story: list[Flowable] = [
        _bullet(
            ctx,
            f"<b>Interval widths.</b> Table {ctx.table_no + 1} lists, per metric, the {_WIDEST} groups with "
            f"the widest {ctx.level_text()} interval after calibration (width = upper − lower bound). The "
            "wider a group's interval, the less its studies pin the metric down. Gaps between groups are "
            "judged from their own disparity intervals, not from these widths.",
        ),
        *_inconclusive(ctx),
    ]
    w = ctx.width
    return [
        *story,
        *ctx.table_block(
            f"Widest {ctx.level_text()} intervals after calibration, {_WIDEST} per metric, evaluation split.",
            table(rows, [w * 0.14, w * 0.38, w * 0.1, w * 0.26, w * 0.12]),
            legend=marks.legend(),
        ),
    ]


def _inconclusive(ctx: Context) -> list[Flowable]:
    """Groups whose interval straddles a criterion's margin: the data cannot decide either way."""
    out = []
    for criterion in ctx.evaluation.get("acceptance") or []:
        scope = str(criterion.get("scope") or "overall")
        for result in criterion.get("results") or []:
            if result.get("verdict") != "inconclusive":
                continue
            group = {"group": result.get("group"), "n": result.get("n")}
            out.append(
                _bullet(
                    ctx,
                    f"<b>Inconclusive.</b> {_group_name(ctx, scope, group)}: "
                    f"{para_text(criterion.get('id'))} needs "
                    f"{para_text(ctx.metric_name(str(criterion.get('metric'))))} "
                    f"{para_text(margin_text(criterion))}; its estimate and interval "
                    f"{para_text(_figure(result, criterion))} "
                    f"straddle the margin (n = {format_count(result.get('n'))}), so the data show neither "
                    f"that it meets the criterion nor that it misses it. {_more_studies(result, criterion)}",
                )
            )
    return out


def _figure(result: Mapping[str, Any], criterion: Mapping[str, Any]) -> str:
    """The judged estimate and interval, a clamped one in words (plain text)."""
    text = Marks().interval(result, metric=criterion.get("metric"))
    if is_clamped(criterion.get("metric"), result.get("estimate")):
        text += " (clamped at 0: the observed gaps are smaller than sampling noise)"
    return text


def _more_studies(result: Mapping[str, Any], criterion: Mapping[str, Any]) -> str:
    """What more studies would do, with the planned size where the run planned one (Study size)."""
    size = result.get("study_size")
    n = result.get("n")
    if not isinstance(size, Mapping) or not isinstance(n, int):
        return "More studies would narrow the interval."
    needed = size.get("needed")
    if needed is None:
        return (
            "Even the largest planned size would pass less than 80% of the time if the group were "
            "calibrated (Study size): more studies alone may not settle it."
        )
    if needed > n:
        text = (
            f"A perfectly calibrated group like it would need about {format_count(needed)} evaluation "
            "studies to pass at least 80% of the time (Study size)"
        )
        if near_margin(result, criterion):
            return (
                f"{text}; this group's estimate lies near the margin, so more studies may not settle it: its "
                "interval would narrow around a value close to the margin."
            )
        return f"{text}."
    return (
        f"A calibrated group like it passes at least 80% of the time with {format_count(needed)} studies "
        "(Study size), fewer than it has: its calibration may be worse than the margin allows."
    )


def _unknown(ctx: Context) -> list[Flowable]:
    chars = get(ctx.evaluation, "characteristics")
    tags: Mapping[str, Any] = get(chars, "tags") or {}
    parts = []
    if isinstance(get(chars, "subgroups"), Mapping):
        total = format_count(get(chars, "overall", "n"))
        for attribute, rows in chars["subgroups"].items():
            unknown = next((r for r in rows if get(r, "group") == "unknown"), None)
            tag = f" ({para_text(tags[attribute])})" if tags.get(attribute) else ""
            count = f"0 of {total}"
            if unknown is not None:
                share = format_share(unknown.get("share_of_cohort"))
                count = f"{format_count(unknown.get('n'))} of {total} ({share})"
            parts.append(f"{para_text(ctx.attribute_label(attribute))}{tag}: {count}")
        where = "analysed studies"
    else:
        total = format_count(get(ctx.evaluation, "overall", "n"))
        for attribute, groups in (ctx.evaluation.get("subgroups") or {}).items():
            unknown = next((g for g in groups if get(g, "group") == "unknown"), None)
            count = "0" if unknown is None else format_count(unknown.get("n"))
            parts.append(f"{para_text(ctx.attribute_label(attribute))}: {count} of {total}")
        where = f"evaluation studies (whole-cohort counts are {_ABSENT})"
    text = (
        f"<b>Unknown attributes.</b> Studies whose attribute could not be read, of all {where}: "
        + ("; ".join(parts) if parts else "no subgroup attribute is reported")
        + ". They form the group <i>unknown</i>, shown with the others."
    )
    deidentified = [a for a, tag in tags.items() if tag in DEIDENTIFIED_TAGS]
    read_from = "; ".join(
        f"{para_text(ctx.attribute_label(a))} is read from {para_text(tags[a])}" for a in deidentified
    )
    note = (
        "<b>De-identified exports.</b> The DICOM Basic Application Level Confidentiality Profile (PS3.15 "
        "Annex E) removes InstitutionName, StationName and PatientAge, and empties PatientSex unless the "
        "Retain Patient Characteristics Option is used: studies exported that way land in <i>unknown</i>"
        + (f". In this protocol, {read_from}." if read_from else ".")
    )
    return [_bullet(ctx, text), _bullet(ctx, note)]


def _model_outputs(ctx: Context) -> list[Flowable]:
    """For outputs read from a predictions file: that they are taken as given, and the patient caveat."""
    record = predictions_record(ctx.provenance)
    if record is None:
        return []
    form = "finite scores, one set of scores per key"
    if record.get("scores") == "probabilities":
        form += ", probabilities in [0, 1] that sum to 1"
    story = [
        _bullet(
            ctx,
            f"<b>Model outputs as given.</b> {read_from_file_text(record, ctx.provenance)} This report "
            f"validates those outputs as given: sitecal checked their form ({form}), not that they are this "
            "model's outputs on these studies, which rests on whoever produced the file.",
        )
    ]
    if record.get("patients") == ONE_PER_STUDY:
        story.append(
            _bullet(
                ctx,
                "<b>Each study its own patient.</b> The predictions file names no patient, so each study was "
                "treated as its own patient: the split and the intervals assume independent studies. If a "
                "patient has several studies in the file, the intervals are too narrow and that patient's "
                "studies may fall on both sides of the fit / evaluation split.",
            )
        )
    return story


def _exclusions(ctx: Context) -> Paragraph:
    flow = get(ctx.evaluation, "cohort_flow")
    exclusions = get(flow, "exclusions")
    files = get(flow, "files_found")
    record = predictions_record(ctx.provenance)
    if isinstance(flow, Mapping) and flow_without_dicom(flow, record):
        return _exclusions_of_rows(ctx, flow, get(record, "rows"))
    if not isinstance(exclusions, Sequence) or _number(files) is None:
        return _bullet(ctx, f"<b>Exclusions.</b> The cohort flow is {_ABSENT}.")
    counts = [(e, _number(get(e, "count")) or 0) for e in exclusions]
    total = int(sum(c for _, c in counts))
    share = format_share(total / files) if files else NOT_RECORDED
    detail = "; ".join(
        f"{para_text(get(e, 'reason'))} ({para_text(words(get(e, 'stage')))}): {format_count(int(c))}"
        for e, c in counts
    )
    return _bullet(
        ctx,
        f"<b>Exclusions.</b> {format_count(total)} exclusion record{'' if total == 1 else 's'} against "
        f"{format_count(files)} files found ({share})"
        + (f": {detail}" if detail else "")
        + f". {format_count(get(flow, 'analysed'))} studies were analysed. A label that matches no study "
        "is counted although it removes no file"
        + (
            "; so is a predictions file row that cannot be used or matches no study."
            if record is not None
            else "."
        ),
    )


def _exclusions_of_rows(ctx: Context, flow: Mapping[str, Any], rows: object) -> Paragraph:
    """The exclusions of a run without DICOM, against the rows of the predictions file."""
    exclusions = flow.get("exclusions")
    if not isinstance(exclusions, Sequence):
        return _bullet(ctx, f"<b>Exclusions.</b> The cohort flow is {_ABSENT}.")
    counts = [(e, _number(get(e, "count")) or 0) for e in exclusions]
    total = int(sum(c for _, c in counts))
    n_rows = _number(rows)
    share = format_share(total / n_rows) if n_rows else NOT_RECORDED
    detail = "; ".join(
        f"{para_text(get(e, 'reason'))} ({para_text(words(get(e, 'stage')))}): {format_count(int(c))}"
        for e, c in counts
    )
    return _bullet(
        ctx,
        f"<b>Exclusions.</b> {format_count(total)} exclusion record{'' if total == 1 else 's'} against "
        f"{format_count(rows)} rows in the predictions file ({share})"
        + (f": {detail}" if detail else "")
        + f". {format_count(get(flow, 'analysed'))} studies were analysed. A predictions file row that "
        "cannot be used, and a label that matches no row, are counted although they remove no study.",
    )


def _listed(shown: int, limit: object) -> str:
    if shown == 0:
        return "None is listed"
    if shown == limit:
        return f"The {format_count(shown)} most confident are listed"
    return f"All {format_count(shown)} are listed (the list holds at most {format_count(limit)})"


def _errors(ctx: Context) -> list[Flowable]:
    story: list[Flowable] = [ctx.h2("Highest-confidence errors")]
    errors = get(ctx.evaluation, "highest_confidence_errors")
    if not isinstance(errors, Mapping):
        return [*story, ctx.p(f"Highest-confidence errors: {_ABSENT}.")]
    studies = errors.get("studies") or []
    story.append(
        ctx.p(
            f"Of {format_count(errors.get('n_evaluation'))} evaluation studies, "
            f"{format_count(errors.get('n_errors'))} have a wrong top label after calibration. "
            f"{_listed(len(studies), errors.get('limit'))}, by pseudonymised study key only, as in "
            "cohort.csv: the "
            "site can find the images with its key table and review them. Confidence is the probability of "
            "the predicted class."
        )
    )
    if errors.get("note"):
        story.append(ctx.p(f"No study is listed: {para_text(word(errors['note']))}.", ctx.styles.note))
    if not studies:
        return story
    num = ctx.styles.cell_num
    per = ctx.evaluation.get("calibration_attribute")
    rows: list[list[Any]] = [
        [
            ctx.head("Study key"),
            ctx.head(f"Calibration group ({ctx.attribute_label(per)})" if per else "Calibration group"),
            ctx.head("Predicted"),
            ctx.head("True class"),
            ctx.head("Confidence before", right=True),
            ctx.head("Confidence after", right=True),
        ]
    ]
    for s in studies:
        rows.append(
            [
                ctx.cell(get(s, "study_key"), style=ctx.styles.mono),
                ctx.cell(get(s, "calibration_group") if per else f"all studies (one {ctx.fitted()})"),
                ctx.cell(get(s, "predicted")),
                ctx.cell(get(s, "true")),
                ctx.cell(format_value(get(s, "confidence_before")), style=num),
                ctx.cell(format_value(get(s, "confidence_after")), style=num),
            ]
        )
    w = ctx.width
    story += ctx.table_block(
        "Evaluation studies misclassified after calibration, most confident first (ties by key).",
        table(rows, [w * 0.22, w * 0.22, w * 0.14, w * 0.14, w * 0.14, w * 0.14]),
    )
    return story


def limitations(ctx: Context) -> list[Flowable]:
    """Limitations of this validation, written from the data, then the highest-confidence errors."""
    story: list[Flowable] = [
        ctx.h1("Limitations"),
        ctx.p("Each point below is drawn from this run's numbers and limits what the results can show."),
        *_model_outputs(ctx),
        _small_groups(ctx),
    ]
    story += _widest(ctx)
    story += _unknown(ctx)
    story.append(_exclusions(ctx))
    return [*story, *_errors(ctx)]
