"""MkDocs hook: the JSON Schema of every document a run writes, published with the site at build time.

Each document ``sitecal schema NAME`` knows (:data:`sitecal.cli._schema.SCHEMAS`) becomes a file
``reference/schemas/NAME.schema.json`` of the site, and the marker ``<!-- output-schemas -->`` of
``docs/reference/outputs.md`` becomes one section per document: what it is, a link to its schema and a
table of its top-level fields. Both come from the same function the command prints, so the site cannot
drift from the files a run writes.
"""

from __future__ import annotations

import json
from typing import Any

from mkdocs.structure.files import File

from sitecal.cli._schema import SCHEMAS

MARKER = "<!-- output-schemas -->"
_FOLDER = "reference/schemas"


def _schema_text(name: str) -> str:
    """The schema of document ``name``, as ``sitecal schema NAME`` prints it."""
    _, schema = SCHEMAS[name]
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def _type_text(prop: dict[str, Any]) -> str:
    """A field's JSON type in a few words: its type(s), a referenced object, an enum or a constant."""
    if "$ref" in prop:
        return "object (" + prop["$ref"].rsplit("/", 1)[-1] + ")"
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(_type_text(part) for part in prop["anyOf"])
    kind = prop.get("type")
    if kind is None:
        return "any JSON value"
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def _cell(text: str) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _fields_table(schema: dict[str, Any]) -> list[str]:
    """One row per top-level field: its name, type, whether it is always present, and its description."""
    required = set(schema.get("required", ()))
    lines = ["| field | type | always present | what |", "| --- | --- | --- | --- |"]
    for name, prop in schema.get("properties", {}).items():
        present = "yes" if name in required else ""
        lines.append(
            f"| `{name}` | {_cell(_type_text(prop))} | {present} | {_cell(prop.get('description', ''))} |"
        )
    return lines


def output_schemas() -> str:
    """The section of every document: what it is, its schema's link, its fields."""
    lines: list[str] = []
    for name, (what, schema) in SCHEMAS.items():
        if name == "protocol":  # the protocol reference page is its own, field by field
            continue
        document = schema()
        lines += [
            f"### `{name}`",
            "",
            f"{what[:1].upper()}{what[1:]}. Schema: [`{name}.schema.json`](schemas/{name}.schema.json) "
            f"(`sitecal schema {name}`).",
            "",
            *_fields_table(document),
            "",
        ]
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    """Add each schema to the site as a file of its own."""
    for name in SCHEMAS:
        files.append(File.generated(config, f"{_FOLDER}/{name}.schema.json", content=_schema_text(name)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker with the documents' sections."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, output_schemas())
    return markdown
