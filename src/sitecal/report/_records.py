"""Closing sections: provenance, sign-off block and the protocol as run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reportlab.lib.units import mm
from reportlab.platypus import Flowable, KeepTogether, PageBreak, Preformatted, Spacer

from ._context import Context
from ._styles import Palette, table
from ._text import NOT_RECORDED, format_utc, para_text, words

__all__ = ["appendix_protocol", "provenance", "sign_off"]

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
}


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
    seeds = prov.get("seeds")
    seed_text = (
        ", ".join(f"{k}: {v}" for k, v in seeds.items())
        if isinstance(seeds, Mapping)
        else (None if seeds is None else str(seeds))
    )
    rows: list[list[Any]] = [
        [ctx.head("sitecal version"), ctx.cell(prov.get("sitecal_version"))],
        [ctx.head("Python"), ctx.cell(prov.get("python"))],
        [ctx.head("Platform"), ctx.cell(prov.get("platform"))],
        [ctx.head("Device"), ctx.cell(prov.get("device"))],
        [ctx.head("Run time (UTC)"), ctx.cell(format_utc(prov.get("created_utc")))],
        [ctx.head("Run folder"), ctx.cell(prov.get("run_folder"), style=mono)],
        [ctx.head("Command line"), ctx.cell(prov.get("command_line"), style=mono)],
        [
            ctx.head("Model"),
            ctx.cell(" · ".join(str(model[k]) for k in ("name", "format") if model.get(k)) or None),
        ],
        [ctx.head("Seeds"), ctx.cell(seed_text)],
    ]
    for key in sorted(set(prov) - _KNOWN):
        rows.append([ctx.head(words(key).capitalize()), ctx.cell(_scalar(prov[key]))])
    w = ctx.width
    story: list[Flowable] = [
        ctx.h1("Provenance"),
        ctx.p("What produced this report, so that the run can be checked and repeated."),
        *ctx.table_block("Run record (provenance.json).", table(rows, [w * 0.22, w * 0.78], header=False)),
    ]
    hashes = prov.get("sha256")
    protocol_sha = ctx.protocol.get("sha256")
    rows = [[ctx.head("Input"), ctx.head("sha256")]]
    if isinstance(hashes, Mapping):
        for key, value in hashes.items():
            label = {"instances": "DICOM instances (set of SOP Instance UIDs)"}.get(
                str(key), words(key).capitalize()
            )
            rows.append([ctx.cell(label), ctx.cell(value, style=mono)])
    else:
        rows.append([ctx.cell("All inputs"), ctx.cell(NOT_RECORDED)])
    if protocol_sha and (not isinstance(hashes, Mapping) or "protocol" not in hashes):
        rows.append([ctx.cell("Protocol (as given to the report)"), ctx.cell(protocol_sha, style=mono)])
    story.append(
        KeepTogether(ctx.table_block("Fingerprints of the inputs.", table(rows, [w * 0.34, w * 0.66])))
    )
    deps = prov.get("dependencies")
    if isinstance(deps, Mapping) and deps:
        items = sorted(deps.items(), key=lambda kv: str(kv[0]).lower())
        per_row = 3
        rows = [[ctx.head("Package"), ctx.head("Version")] * per_row]
        for i in range(0, len(items), per_row):
            chunk = items[i : i + per_row]
            row: list[Any] = []
            for name, version in chunk:
                row += [ctx.cell(name), ctx.cell(version, style=mono)]
            row += [""] * (2 * per_row - len(row))
            rows.append(row)
        story.append(
            KeepTogether(
                ctx.table_block("Dependency versions.", table(rows, [w * 0.18, w * 0.153333] * per_row))
            )
        )
    else:
        story.append(ctx.p(f"Dependency versions: {NOT_RECORDED}."))
    return story


def sign_off(ctx: Context) -> list[Flowable]:
    """One row per role named in the protocol, with empty Name, Signature and Date cells."""
    roles = ctx.protocol.get("sign_off")
    intro = (
        "By signing, each reviewer confirms that they have read this report and accept its conclusion for "
        "the intended use in section 1."
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
    return [ctx.h1("Sign-off"), KeepTogether([ctx.p(intro), grid, Spacer(1, 6 * mm), decision])]


def appendix_protocol(ctx: Context) -> list[Flowable]:
    """Print the protocol YAML exactly as run, with its source path and sha256."""
    protocol = ctx.protocol
    story: list[Flowable] = [PageBreak(), ctx.h1("Appendix: protocol as run")]
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
    # Preformatted prints its text literally (no markup), wrapping long lines instead of clipping them
    style = ctx.styles.mono
    per_line = int(ctx.width / (0.602 * style.fontSize))  # DejaVu Sans Mono advances 0.602 em per character
    story.append(Preformatted(str(text).expandtabs(4), style, maxLineLength=per_line, newLineChars="    "))
    return story
