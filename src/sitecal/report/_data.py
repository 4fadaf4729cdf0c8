"""The Data section: sources, eligibility, and the flow from files found to studies analysed.

When the model's outputs were read from a predictions file (``provenance.json`` → ``predictions_file``),
the eligibility rules say how its rows are read and joined; without a DICOM folder the flow starts at the
file's rows, and no source is read from DICOM headers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reportlab.lib.units import inch
from reportlab.platypus import Flowable, Image, KeepTogether, Paragraph

from . import figures
from ._context import Context
from ._inputs import get
from ._model_outputs import flow_without_dicom, predictions_record, pseudonym_keys
from ._styles import table
from ._text import NOT_RECORDED, format_count, para_text, words
from .flow_figure import flow_figure, flow_steps

__all__ = ["DESIGN_FIELDS", "data_section", "design_text"]

#: ``report.design`` fields: (name, what the crosswalk calls it)
DESIGN_FIELDS: dict[str, str] = {
    "collection": "retrospective or prospective data collection",
    "acquisition": "the image acquisition protocol",
}


def design_text(protocol: Mapping[str, Any], name: str) -> str | None:
    """The protocol's ``report.design.<name>``, or ``None`` when not given."""
    design = protocol.get("design")
    value = design.get(name) if isinstance(design, Mapping) else None
    return None if value is None or not str(value).strip() else str(value)


def _design(ctx: Context) -> list[Flowable]:
    """How the data were collected and acquired, as the protocol states it (``report.design``)."""
    story: list[Flowable] = []
    collection = design_text(ctx.protocol, "collection")
    if collection is not None:
        story.append(
            ctx.p(
                f"Data collection: <b>{para_text(collection)}</b> (as the protocol states it). "
                + (
                    "The studies were acquired before this validation was planned."
                    if collection == "retrospective"
                    else "The studies were acquired for this validation."
                )
            )
        )
    acquisition = design_text(ctx.protocol, "acquisition")
    if acquisition is not None:
        story.append(ctx.p(f"Image acquisition protocol, as the site states it: {para_text(acquisition)}"))
    return story


_QUERY_FIELDS = (
    ("study_dates", "study dates"),
    ("modalities", "modalities"),
    ("station_names", "station names"),
    ("institutions", "institutions"),
    ("accession_numbers", "accession numbers of the worklist"),
)


def _retrieval(ctx: Context) -> list[Flowable]:
    """Where the studies were retrieved from when they came from a PACS (``provenance.pacs``)."""
    pacs = ctx.provenance.get("pacs")
    if not isinstance(pacs, Mapping):
        return []
    how = {"dicomweb": "DICOMweb (QIDO-RS, WADO-RS)", "dimse": "DIMSE"}.get(str(pacs.get("route")), "")
    query = pacs.get("query")
    query = query if isinstance(query, Mapping) else {}
    asked = []
    for name, label in _QUERY_FIELDS:
        value = query.get(name)
        if value is None or value == []:
            continue
        if name == "study_dates":
            shown = " to ".join(map(str, value))
        else:
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        asked.append(f"{label} {para_text(shown)}")
    failed = int(pacs.get("studies_failed") or 0)
    again = int(pacs.get("studies_asked_again") or 0)
    now = format_count(pacs.get("studies_retrieved_now"))
    stored = format_count(pacs.get("studies_from_store"))
    text = (
        f"The studies were retrieved by {how} from the PACS {para_text(pacs.get('service'))}, with the "
        f"query of data.source ({'; '.join(asked) if asked else 'no filter'}). It matched "
        f"{format_count(pacs.get('studies_found'))} studies: {now} retrieved in this run and {stored} from "
        "the local store of an earlier retrieval"
        + (
            f"; {format_count(failed)} could not be retrieved and are listed as exclusions at the "
            "retrieve stage"
            if failed
            else "; none failed"
        )
        + (
            f" ({format_count(again)} asked again after a transient failure, such as a dropped connection)"
            if again
            else ""
        )
        + f". The objects analysed are named by sha256 {para_text(str(pacs.get('objects_sha256'))[:16])}… "
        "(provenance.json, pacs)."
    )
    return [ctx.p(text)]


_SOURCE_KINDS = (
    ("sites", "Site (InstitutionName)"),
    ("scanners", "Scanner (Manufacturer, model)"),
    ("modalities", "Modality"),
)


_NOUNS = (
    ("sites", "site", "sites"),
    ("scanners", "scanner model", "scanner models"),
    ("modalities", "modality", "modalities"),
)


def data_section(ctx: Context) -> list[Flowable]:
    """Sources (sites, scanners, months), eligibility rules, flow diagram, flow table and exclusions."""
    flow = get(ctx.evaluation, "cohort_flow")
    story: list[Flowable] = [ctx.h1("Data")]
    if not isinstance(flow, Mapping):
        return [*story, ctx.p(f"Cohort flow: {NOT_RECORDED}.")]
    record = predictions_record(ctx.provenance)
    no_dicom = flow_without_dicom(flow, record)
    if no_dicom:
        story += [
            ctx.h2("Sources"),
            ctx.p(
                f"The {format_count(flow.get('analysed'))} studies analysed come from the rows of the "
                "predictions file alone: no DICOM folder was read, so their sites, scanners, modalities and "
                "study dates are not known to this run. Any subgroup is read from the file's columns."
            ),
        ]
    else:
        story += _sources(ctx, flow)
    story += _retrieval(ctx)
    story += _design(ctx)
    story += _eligibility(ctx, record, no_dicom=no_dicom)
    story += _flow(ctx, flow, record, no_dicom=no_dicom)
    return story


def _months_text(months: Mapping[str, Any]) -> str:
    first, last, unknown = months.get("first"), months.get("last"), months.get("unknown") or 0
    if first is None:
        text = "No analysed study has a usable StudyDate"
    elif first == last:
        text = f"Study dates fall in {para_text(first)}"
    else:
        text = f"Study dates run from {para_text(first)} to {para_text(last)}"
    text += " (month precision: no day is reported)"
    if first is not None and unknown:
        text += f"; {format_count(unknown)} studies have no usable StudyDate"
    return text + "."


def _sources(ctx: Context, flow: Mapping[str, Any]) -> list[Flowable]:
    story: list[Flowable] = [ctx.h2("Sources")]
    if flow.get("source") == "network_parts":
        parts = get(ctx.provenance, "network_parts", "parts")
        return [
            *story,
            ctx.p(
                f"The {format_count(flow.get('analysed'))} studies analysed come from the predictions "
                f"parts of {format_count(parts)} sites of a network: each site scanned its own DICOM folder "
                "with this protocol and sent only pseudonyms (under the network's key), labels, logits, "
                "subgroup values and counts. The sites, scanners and study months of the headers are not "
                "carried by the parts beyond the subgroups of the results; the counts of the flow below are "
                "the sums of the sites' own."
            ),
        ]
    sources = flow.get("sources")
    if not isinstance(sources, Mapping):
        return [*story, ctx.p(f"Sources of the studies: {NOT_RECORDED} in this run's evaluation.json.")]
    counts = {kind: list(sources.get(kind) or []) for kind, _ in _SOURCE_KINDS}
    summary = ", ".join(
        f"{format_count(len(counts[kind]))} {one if len(counts[kind]) == 1 else many}"
        for kind, one, many in _NOUNS
    )
    story.append(
        ctx.p(
            f"The {format_count(flow.get('analysed'))} studies analysed come from {summary}, as their "
            "headers state them (values normalised as for subgroups; <i>unknown</i> where the header is "
            f"empty or removed by de-identification). {_months_text(sources.get('months') or {})}"
        )
    )
    rows: list[list[Any]] = [[ctx.head("Source"), ctx.head("Value"), ctx.head("Studies", right=True)]]
    extra: list[tuple[Any, ...]] = []
    for kind, label in _SOURCE_KINDS:
        start = len(rows)
        for i, item in enumerate(counts[kind]):
            rows.append(
                [
                    ctx.cell(label) if i == 0 else "",
                    ctx.cell(get(item, "value")),
                    ctx.cell(format_count(get(item, "count")), style=ctx.styles.cell_num),
                ]
            )
        if len(rows) > start + 1:
            extra.append(("SPAN", (0, start), (0, len(rows) - 1)))
    if len(rows) > 1:
        w = ctx.width
        story += ctx.table_block(
            "Sources of the analysed studies.", table(rows, [w * 0.3, w * 0.5, w * 0.2], extra=extra)
        )
    return story


def _instances_rule(ctx: Context) -> str:
    """Which files are read: the DICOM folder's, or the instances retrieved for the query's studies."""
    read = (
        "Every instance retrieved from the PACS for the query's studies is read"
        if isinstance(ctx.provenance.get("pacs"), Mapping)
        else "Every file under the DICOM folder is read"
    )
    return (
        f"<b>Instances.</b> {read}. A file that is not DICOM, is truncated, has no pixel data or a "
        "transfer syntax that cannot be decoded, or repeats an SOPInstanceUID already found, is excluded "
        "with that reason."
    )


def _eligibility(ctx: Context, record: Mapping[str, Any] | None, *, no_dicom: bool) -> list[Flowable]:
    if record is not None:
        return _eligibility_from_file(ctx, record, no_dicom=no_dicom)
    protocol = ctx.protocol
    eligibility = protocol.get("eligibility") or {}
    key = eligibility.get("key") or "StudyInstanceUID"
    column = eligibility.get("key_column") or key
    labels = eligibility.get("labels_file")
    classes = get(ctx.evaluation, "class_names") or []
    rules = [
        _instances_rule(ctx),
        "<b>Images.</b> "
        + para_text(protocol.get("image_selection") or "One image per study; the others are excluded."),
        f"<b>Labels.</b> A study is eligible when it has a ground-truth label, joined by {para_text(key)} "
        f"to the column {para_text(column)}"
        + (f" of {para_text(labels)}" if labels else "")
        + (
            f"; the label must be one of the model's classes ({para_text(', '.join(map(str, classes)))})"
            if classes
            else ""
        )
        + ". Label rows that name no study are counted, not analysed.",
        "<b>Analysis.</b> Every eligible study whose image the model could read is analysed; a read or "
        "inference failure is an exclusion with its reason. No study is excluded for its prediction.",
    ]
    story: list[Flowable] = [ctx.h2("Eligibility")]
    story += [Paragraph(rule, ctx.styles.bullet, bulletText="•") for rule in rules]
    return story


def _eligibility_from_file(ctx: Context, record: Mapping[str, Any], *, no_dicom: bool) -> list[Flowable]:
    """The rules of a run whose model outputs were read from a predictions file."""
    protocol = ctx.protocol
    eligibility = protocol.get("eligibility") or {}
    key = para_text(eligibility.get("key") or "StudyInstanceUID")
    column = para_text(eligibility.get("key_column") or key)
    labels = eligibility.get("labels_file")
    classes = get(ctx.evaluation, "class_names") or []
    of_classes = (
        f"; the label must be one of the model's classes ({para_text(', '.join(map(str, classes)))})"
        if classes
        else ""
    )
    rows_rule = (
        "<b>Predictions file.</b> Every row is read. A row that cannot be used (a score that is not a "
        "finite number, a probability outside [0, 1] or a row of probabilities not summing to 1, an empty "
        "key, a key given twice with different scores) is excluded with its line and reason; it removes no "
        "study."
    )
    joined = "its sitecal study pseudonym" if pseudonym_keys(record) else f"{key} (column {column})"
    rules: list[str] = []
    if no_dicom:
        rules.append(rows_rule + " Each usable row is one study.")
    else:
        rules += [
            _instances_rule(ctx),
            "<b>Images.</b> "
            + para_text(protocol.get("image_selection") or "One image per study; the others are excluded."),
            rows_rule
            + f" Each study found is joined to its row by {joined}; a study without a row is excluded, and a "
            "row that matches no study is listed, removing no study.",
        ]
    if record.get("labels") == "predictions file":
        rules.append(
            "<b>Labels.</b> A study is eligible when its row gives a ground-truth label in the label column "
            f"of the predictions file{of_classes}."
        )
    else:
        rules.append(
            f"<b>Labels.</b> A study is eligible when it has a ground-truth label, joined by {key} to the "
            f"column {column}"
            + (f" of {para_text(labels)}" if labels else " of the labels file")
            + f"{of_classes}. Label rows that name no study are counted, not analysed."
        )
    rules.append(
        "<b>Analysis.</b> Every eligible study with a usable row of the predictions file is analysed with "
        "the scores of that row; the model was not run here. No study is excluded for what it predicts."
    )
    story: list[Flowable] = [ctx.h2("Eligibility")]
    story += [Paragraph(rule, ctx.styles.bullet, bulletText="•") for rule in rules]
    return story


def _flow(
    ctx: Context, flow: Mapping[str, Any], record: Mapping[str, Any] | None, *, no_dicom: bool
) -> list[Flowable]:
    split = get(ctx.evaluation, "split") or {}
    heading = ctx.h2("Flow")
    story: list[Flowable] = []
    n_rows = get(record, "rows")
    fig = flow_figure(
        ctx.evaluation,
        width_in=min(ctx.width / inch, 6.9),
        predictions_rows=n_rows,
        predictions_file=record is not None,
    )
    start = "the rows of the predictions file" if no_dicom else "the files found"
    path = figures.save_png(fig, ctx.figures_dir / "flow.png")
    ctx.figures.append(path)
    width_in, height_in = fig.get_size_inches()
    story.append(
        KeepTogether(  # the heading stays with its figure
            [
                heading,
                Image(str(path), width=width_in * inch, height=height_in * inch),
                ctx.p(
                    f"{ctx.next_figure()}. Flow from {start} to the studies analysed and their "
                    "split; beside each step, what it left out and the most frequent reasons.",
                    ctx.styles.caption,
                ),
            ]
        )
    )
    rows: list[list[Any]] = [[ctx.head("Step"), ctx.head("Count", right=True)]]
    for step in flow_steps(flow, predictions_rows=n_rows, predictions_file=record is not None):
        rows.append([ctx.cell(step.label), ctx.cell(format_count(step.count), style=ctx.styles.cell_num)])
    crossfit = split.get("method") == "crossfit"
    for key, label, patients in (
        ("fit", "fitted on (for the other folds)" if crossfit else "fit split", "patients_fit"),
        ("evaluation", "evaluated (each once)" if crossfit else "evaluation split", "patients_evaluation"),
    ):
        count = format_count(flow.get(key, split.get(f"n_{key}")))
        if split.get(patients) is not None:
            count += f" ({format_count(split[patients])} patients)"
        rows.append(
            [
                ctx.cell(f"of which {label}", style=ctx.styles.indent_cell),
                ctx.cell(count, style=ctx.styles.cell_num),
            ]
        )
    story += ctx.table_block("Cohort flow.", table(rows, [ctx.width * 0.7, ctx.width * 0.3]))
    if no_dicom:
        found = f"{format_count(n_rows)} rows in the predictions file"
    else:
        found = f"{format_count(flow.get('files_found'))} files found"
    story += _exclusions(ctx, flow.get("exclusions"), found, predictions_file=record is not None)
    return story


def _exclusions(
    ctx: Context, exclusions: Sequence[Mapping[str, Any]] | None, found: str, *, predictions_file: bool
) -> list[Flowable]:
    if exclusions is None:
        return [ctx.p(f"Exclusions: {NOT_RECORDED}.")]
    if not exclusions:
        what = "row" if predictions_file else "file"
        return [ctx.p(f"No {what}, study or label was excluded.")]
    rows: list[list[Any]] = [[ctx.head("Stage"), ctx.head("Reason"), ctx.head("Count", right=True)]]
    for item in exclusions:
        rows.append(
            [
                ctx.cell(words(get(item, "stage") or NOT_RECORDED).capitalize()),
                ctx.cell(get(item, "reason")),
                ctx.cell(format_count(get(item, "count")), style=ctx.styles.cell_num),
            ]
        )
    rows_too = (
        "A label or predictions file row that matches no study, or a predictions file row that cannot be "
        "used, removes no study"
        if predictions_file
        else "A label that matches no study removes no study"
    )
    return ctx.table_block(
        f"Exclusions by stage and reason ({found}). {rows_too}; it is listed so that every input is "
        "accounted for.",
        table(rows, [ctx.width * 0.2, ctx.width * 0.6, ctx.width * 0.2]),
    )
