"""Closing sections: provenance, sign-off block (with the site's statements) and the protocol as run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reportlab.lib.units import mm
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.platypus import Flowable, KeepTogether, PageBreak, Spacer, XPreformatted

from ._context import Context
from ._fonts import break_line
from ._governance import GOVERNANCE_FIELDS, draft_fields, governance_text
from ._inputs import get
from ._model_outputs import (
    flow_without_dicom,
    labels_text,
    patients_text,
    predictions_record,
    read_from_file_text,
    rows_text,
    subgroups_text,
)
from ._styles import Palette, table
from ._text import NOT_RECORDED, format_utc, para_text, words

__all__ = ["appendix_protocol", "draft_fields", "provenance", "sign_off"]

# the hashes an auditor checks, in the order printed, then anything else recorded
_HASHES = {
    "protocol": "Protocol (the YAML file as run)",
    "model": "Model file",
    "dataset_manifest": "Dataset manifest (sorted SOP Instance UID + file sha256 pairs)",
    "labels": "Labels (ground-truth table)",
    "predictions": "Predictions (predictions.csv)",
}
_OTHER_HASHES = {"instances": "DICOM instances (set of SOP Instance UIDs)"}
_PREDICTIONS_FILE = "Predictions file (the model's outputs, as read)"
_NOT_RUN = "not run here"
_NO_DICOM = "none: no DICOM folder was read"
_PARTS_MANIFEST = "none here: each site read its own files; each site's part is fingerprinted below"
_SEEDS = {
    "split": "Fit / evaluation split (calibration.split.seed)",
    "bootstrap": "Bootstrap resampling (evaluation.bootstrap.seed)",
}
_MANIFEST_RECIPE = (
    "The dataset manifest hash names the exact data analysed without revealing any identifier. To "
    "recompute it: for every analysed DICOM instance write the line <i>SOPInstanceUID</i>, one space, the "
    "sha256 of the file (64 lower-case hex digits, as sha256sum prints it) and a newline; sort the lines "
    "bytewise (LC_ALL=C sort), keeping duplicates; the sha256 of the sorted lines (UTF-8) is the manifest "
    "hash. The UIDs never leave the run, only this hash."
)

# provenance keys rendered in their own rows; anything else recorded is listed after them
_KNOWN = {
    "sitecal_version",
    "python",
    "platform",
    "dependencies",
    "created_utc",
    "command_line",
    "run_folder",
    "seeds",
    "sha256",
    "model",
    "device",
    "logits",
    "file_hashes",
    "inference",
    "predictions_file",
}
# How many logits came from the cache depends on what ran before, not on the result: provenance.json keeps
# the counts; the report says what the cache is, so that two runs of one protocol print the same text.
_LOGITS = (
    "Computed by the model file above, or reused from the logit cache, which is keyed by everything that "
    "determines a logit (the model's sha256, architecture, arguments and code, the transform chain, the "
    "torch and MONAI versions, the number of classes) and by the image, and whose every chunk is verified "
    "with a key derived from the site key: a reused logit is the one this model gives this image. "
    "provenance.json records how many were computed and how many reused in this run."
)


# Like the logits: how many files were hashed depends on what ran before; provenance.json keeps the counts.
_FILE_HASHES = (
    "The sha256 of each analysed file is read from the file, or taken from the file-hash manifest when the "
    "file is unchanged since it was hashed (same path, size, modification time and inode). "
    "provenance.json records how many of each in this run."
)


def _inference_text(inference: Mapping[str, Any]) -> str:
    """Batch size, precision (with its check when not float32) and the Dask placement, as recorded."""
    recorded = inference.get("precision")
    precision: Mapping[str, Any] = recorded if isinstance(recorded, Mapping) else {}
    text = f"batch size {inference.get('batch_size', NOT_RECORDED)}; {precision.get('used', 'float32')}"
    if precision.get("requested", "float32") != "float32":
        text += (
            f" ({precision.get('requested')} asked for; its largest change of a class probability against "
            f"float32 on {precision.get('n_studies')} studies was {precision.get('max_change')}, tolerance "
            f"{precision.get('tolerance')})"
        )
    dask = inference.get("dask")
    if isinstance(dask, Mapping):
        text += f"; sharded on Dask ({dask.get('cluster')}, shards of {dask.get('shard_size')} studies)"
    return text


def _scalar(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def provenance(ctx: Context) -> list[Flowable]:
    """Software versions, hashes, seeds, command line, time and run folder, as recorded."""
    prov = ctx.provenance
    mono = ctx.styles.mono
    model_entry = prov.get("model")
    model: Mapping[str, Any] = model_entry if isinstance(model_entry, Mapping) else {}
    record = predictions_record(prov)
    model_name = " · ".join(str(model[k]) for k in ("name", "format") if model.get(k)) or None
    device = prov.get("device")
    if record is not None:
        model_name = f"{model_name or NOT_RECORDED} · {_NOT_RUN}"
        device = device or f"none: the model was {_NOT_RUN}"
    rows: list[list[Any]] = [
        [ctx.head("sitecal version"), ctx.cell(prov.get("sitecal_version"))],
        [ctx.head("Python"), ctx.cell(prov.get("python"))],
        [ctx.head("Platform"), ctx.cell(prov.get("platform"))],
        [ctx.head("Device"), ctx.cell(device)],
        [ctx.head("Run time (UTC)"), ctx.cell(format_utc(prov.get("created_utc")))],
        [ctx.head("Run folder"), ctx.cell(prov.get("run_folder"), style=mono)],
        [ctx.head("Command line"), ctx.cell(prov.get("command_line"), style=mono)],
        [ctx.head("Model"), ctx.cell(model_name)],
    ]
    if record is not None:
        how = [read_from_file_text(record, prov), rows_text(record), patients_text(record)]
        how += [labels_text(record), subgroups_text(record) or ""]
        rows.append([ctx.head("Model outputs"), ctx.p(" ".join(h for h in how if h), ctx.styles.cell)])
    if model.get("architecture"):
        arguments = json.dumps(model.get("architecture_args") or {}, sort_keys=True)
        rows.append([ctx.head("Architecture"), ctx.cell(f"{model['architecture']} {arguments}", style=mono)])
    if model.get("code_sha256"):
        rows.append([ctx.head("Architecture code sha256"), ctx.cell(model["code_sha256"], style=mono)])
    if "logits" in prov:
        rows.append([ctx.head("Logits"), ctx.cell(_LOGITS)])
    if isinstance(prov.get("inference"), Mapping):
        rows.append([ctx.head("Inference"), ctx.cell(_inference_text(prov["inference"]))])
    if "file_hashes" in prov:
        rows.append([ctx.head("File hashes"), ctx.cell(_FILE_HASHES)])
    for key in sorted(set(prov) - _KNOWN):
        value = prov[key]
        if value is None and key == "transforms_sha256" and record is not None:
            value = f"none: the model was {_NOT_RUN}, no image was prepared for it"
        rows.append([ctx.head(words(key).capitalize()), ctx.cell(_scalar(value))])
    w = ctx.width
    story: list[Flowable] = [
        ctx.h1("Provenance"),
        ctx.p("What produced this report, so that the run can be checked and repeated."),
        *ctx.table_block("Run record (provenance.json).", table(rows, [w * 0.22, w * 0.78], header=False)),
    ]
    story += _hash_table(ctx)
    story += _seed_table(ctx)
    story += _versions_table(ctx)
    return story


def _hash_table(ctx: Context) -> list[Flowable]:
    """The sha256 of each input and output, the auditor's ones first, and how the manifest is formed."""
    hashes = ctx.provenance.get("sha256")
    recorded: Mapping[str, Any] = hashes if isinstance(hashes, Mapping) else {}
    protocol_sha = ctx.protocol.get("sha256")
    mono = ctx.styles.mono
    record = predictions_record(ctx.provenance)
    flow = ctx.evaluation.get("cohort_flow")
    no_dicom = flow_without_dicom(flow if isinstance(flow, Mapping) else {}, record)
    rows: list[list[Any]] = [[ctx.head("Input or output"), ctx.head("sha256")]]
    for key, label in _HASHES.items():
        value = recorded.get(key)
        style = mono
        if key == "protocol" and value is None and protocol_sha:
            label, value = "Protocol (as given to the report)", protocol_sha
        if key == "model" and record is not None:  # the model was not run: say so, never a blank
            if value is None:
                value, style = _NOT_RUN, ctx.styles.cell
            else:
                label = f"Model file (named by the protocol; {_NOT_RUN})"
        if key == "dataset_manifest" and value is None and no_dicom:
            value, style = _NO_DICOM, ctx.styles.cell
        if key == "dataset_manifest" and value is None and "predictions_parts" in recorded:
            value, style = (
                "none here: each site read its own files; its part is fingerprinted below",
                ctx.styles.cell,
            )
        if key == "labels" and value is None and get(record, "labels") == "predictions file":
            value, style = "none: the labels are a column of the predictions file", ctx.styles.cell
        rows.append([ctx.cell(label), ctx.cell(value, style=style)])
        if key == "model" and "predictions_file" in recorded:
            rows.append([ctx.cell(_PREDICTIONS_FILE), ctx.cell(recorded["predictions_file"], style=mono)])
    for key in (k for k in recorded if k not in _HASHES and k != "predictions_file"):
        if key == "predictions_parts" and isinstance(recorded[key], Mapping):  # one row per site's part
            for name, sha in recorded[key].items():
                rows.append([ctx.cell(f"Predictions part {name}"), ctx.cell(sha, style=mono)])
            continue
        label = _OTHER_HASHES.get(str(key), words(key).capitalize())
        rows.append([ctx.cell(label), ctx.cell(recorded[key], style=mono)])
    w = ctx.width
    recipe = (
        "No DICOM folder was read, so there is no dataset manifest: the sha256 of the predictions file "
        "(and of the labels file, where one was given) names the data analysed."
        if no_dicom
        else _MANIFEST_RECIPE
    )
    if "predictions_parts" in recorded:
        recipe = (
            "No DICOM folder was read here: each site's predictions part, written by sitecal predict from "
            "the site's own files (which never left it), is named by its sha256 above."
        )
    return [
        KeepTogether(
            ctx.table_block("Fingerprints of the inputs and outputs.", table(rows, [w * 0.4, w * 0.6]))
        ),
        ctx.p(recipe, ctx.styles.small),
        Spacer(1, 6),
    ]


def _seed_table(ctx: Context) -> list[Flowable]:
    seeds = ctx.provenance.get("seeds")
    if not isinstance(seeds, Mapping) or not seeds:
        return [ctx.p(f"Seeds: {NOT_RECORDED if seeds is None else para_text(seeds)}.")]
    rows: list[list[Any]] = [[ctx.head("Random stream"), ctx.head("Seed", right=True)]]
    for key, value in seeds.items():
        label = _SEEDS.get(str(key), words(key).capitalize())
        rows.append([ctx.cell(label), ctx.cell(value, style=ctx.styles.cell_num)])
    w = ctx.width
    return [KeepTogether(ctx.table_block("Seeds of the run.", table(rows, [w * 0.6, w * 0.2])))]


def _versions_table(ctx: Context) -> list[Flowable]:
    """sitecal, Python and every runtime dependency (transitively), three packages a row."""
    prov = ctx.provenance
    deps = prov.get("dependencies")
    if not isinstance(deps, Mapping) or not deps:
        return [ctx.p(f"Dependency versions: {NOT_RECORDED}.")]
    items = [("sitecal", prov.get("sitecal_version")), ("Python", prov.get("python"))]
    items += sorted(deps.items(), key=lambda kv: str(kv[0]).lower())
    per_row = 3
    rows: list[list[Any]] = [[ctx.head("Package"), ctx.head("Version")] * per_row]
    for i in range(0, len(items), per_row):
        row: list[Any] = []
        for name, version in items[i : i + per_row]:
            row += [ctx.cell(name), ctx.cell(version, style=ctx.styles.mono)]
        rows.append(row + [""] * (2 * per_row - len(row)))
    w = ctx.width
    title = (
        f"Software versions: sitecal, Python and all {len(deps)} runtime dependencies of sitecal, "
        "transitively (provenance.json)."
    )
    return ctx.table_block(title, table(rows, [w * 0.18, w * 0.153333] * per_row))


def _statements(ctx: Context) -> list[Flowable]:
    """The site's governance statements as given, each missing one as a required placeholder."""
    missing = draft_fields(ctx.protocol)
    ink = Palette.failed.hexval()
    rows: list[list[Any]] = [[ctx.head("Statement"), ctx.head("As given in the protocol")]]
    for field in GOVERNANCE_FIELDS:
        text = governance_text(ctx.protocol, field.name)
        if text is None:
            name = para_text(field.protocol_field)
            cell = ctx.p(
                f'<font color="{ink}"><b>Required before sign-off: {para_text(field.label.lower())}.'
                f"</b></font><br/>State {para_text(field.asks)}. Add it to the protocol as "
                f'<font name="{ctx.styles.fonts.mono}">{name}</font> and run again.',
                ctx.styles.cell,
            )
        else:
            cell = ctx.cell(text)
        rows.append([ctx.head(field.label), cell])
    w = ctx.width
    # the site's statements print in full: a long one continues on the next page rather than being cut
    grid = table(
        rows, [w * 0.22, w * 0.78], extra=[("GRID", (0, 0), (-1, -1), 0.5, Palette.rule)], split_cells=True
    )
    if missing:
        lead = ctx.p(
            f'<font color="{ink}"><b>DRAFT.</b></font> {len(missing)} of {len(GOVERNANCE_FIELDS)} statements '
            "that only the site can make are missing from the protocol. The report stays a DRAFT, and must "
            "not be signed, until the protocol supplies them.",
        )
    else:
        lead = ctx.p("The statements that only the site can make, as the protocol gives them.")
    return [KeepTogether([lead, *ctx.table_block("Statements by the site.", grid)])]


def sign_off(ctx: Context) -> list[Flowable]:
    """The site's statements (placeholders where missing), then one row per role named in the protocol."""
    roles = ctx.protocol.get("sign_off")
    intended = ctx.headings.get("Intended use")
    where = f"section {intended}" if intended else "this report"
    intro = (
        "By signing, each reviewer confirms that they have read this report and accept its conclusion for "
        f"the intended use in {where}."
    )
    if not roles:
        roles = ["", "", ""]
        intro += f" Sign-off roles: {NOT_RECORDED} in the protocol."
    rows: list[list[Any]] = [[ctx.head("Role"), ctx.head("Name"), ctx.head("Signature"), ctx.head("Date")]]
    rows += [[ctx.cell(role, missing=""), "", "", ""] for role in roles]
    w = ctx.width
    grid = table(
        rows,
        [w * 0.3, w * 0.27, w * 0.27, w * 0.16],
        extra=[("VALIGN", (0, 1), (-1, -1), "MIDDLE"), ("GRID", (0, 0), (-1, -1), 0.5, Palette.rule)],
        row_heights=[None] + [15 * mm] * len(roles),
    )  # room to sign by hand
    box = "\u2610" if ctx.styles.fonts.unicode else "[ ]"
    decision = table(
        [
            [
                ctx.head("Decision"),
                ctx.p(
                    f"{box} Approved for the intended use&nbsp;&nbsp;&nbsp; {box} Approved with "
                    f"conditions&nbsp;&nbsp;&nbsp; {box} Not approved",
                    ctx.styles.cell,
                ),
            ],
            [ctx.head("Conditions and comments"), ""],
        ],
        [w * 0.3, w * 0.7],
        header=False,
        row_heights=[None, 30 * mm],
        extra=[("GRID", (0, 0), (-1, -1), 0.5, Palette.rule)],
    )
    return [
        ctx.h1("Sign-off"),
        *_statements(ctx),
        KeepTogether([ctx.p(intro), grid, Spacer(1, 6 * mm), decision]),
    ]


def appendix_protocol(ctx: Context) -> list[Flowable]:
    """Print the protocol YAML exactly as run, with its source path and sha256."""
    protocol = ctx.protocol
    story: list[Flowable] = [PageBreak(), ctx.h1("Appendix"), ctx.h2("Protocol as run")]
    story.append(
        ctx.p(
            f'Source: <font name="{ctx.styles.fonts.mono}">{para_text(protocol.get("source_path"))}'
            f'</font><br/>sha256: <font name="{ctx.styles.fonts.mono}">'
            f"{para_text(protocol.get('sha256'))}</font>",
            ctx.styles.small,
        )
    )
    text = protocol.get("yaml_text")
    if not text:
        story.append(ctx.p(f"Protocol text: {NOT_RECORDED}."))
        return story
    story.append(_preformatted(str(text), ctx))
    return story


_CONTINUED = "    "  # indent of the rest of a line broken at the right margin


def _preformatted(text: str, ctx: Context) -> Flowable:
    """The text as typed, line for line, in the mono style: long lines broken at the margin and indented.

    Each line goes through :func:`para_text` (escaped, put in display order, characters the mono font
    lacks set in a font that has them), so the flowable is an ``XPreformatted``, which keeps spaces
    and line breaks and reads the markup ``para_text`` makes.
    """
    style = ctx.styles.mono
    lines: list[str] = []
    font, size = style.fontName, style.fontSize
    room = ctx.width - stringWidth(_CONTINUED, font, size)
    for line in text.expandtabs(4).split("\n"):
        first, *rest = break_line(line, font, size, ctx.width)
        lines.append(first)
        if rest:  # the continuation indent takes room: break the remainder again, narrower
            lines += [_CONTINUED + piece for piece in break_line("".join(rest), font, size, room)]
    return XPreformatted("\n".join(para_text(line) for line in lines), style)
