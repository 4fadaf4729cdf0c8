"""MkDocs hook: the protocol reference and the metric table, written from the code at build time.

``docs/reference/protocol.md`` holds the marker ``<!-- protocol-reference -->``; this hook replaces it
with one table per section of :class:`sitecal.protocol.Protocol` (each field's dotted name, type,
default, constraints and description), read from the pydantic models' JSON Schema and their
``model_fields``. The page therefore cannot drift from the code: a field added, renamed or re-described
in ``src/sitecal/protocol/`` changes the page at the next build. The marker ``<!-- metric-table -->``
(``docs/statistics.md``) becomes the table of :data:`sitecal.metrics.METRICS`, the registry every part of
sitecal reads metric names from.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from typing import Any

from pydantic import BaseModel

from sitecal.metrics import METRICS
from sitecal.protocol import Protocol

MARKER = "<!-- protocol-reference -->"
METRIC_MARKER = "<!-- metric-table -->"

# JSON Schema keywords shown in the constraints column, with how each reads.
_CONSTRAINTS = {
    "minimum": ">= {}",
    "exclusiveMinimum": "> {}",
    "maximum": "<= {}",
    "exclusiveMaximum": "< {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "pattern": "matches `{}`",
}


def _models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every pydantic model reachable from ``root``'s fields, by class name (the schema's ``$defs`` keys)."""
    found: dict[str, type[BaseModel]] = {}
    pending: list[Any] = [root]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation.__name__ in found:
                continue
            found[annotation.__name__] = annotation
            pending.extend(field.annotation for field in annotation.model_fields.values())
        else:
            pending.extend(typing.get_args(annotation))
    return found


def _ref_name(schema: dict[str, Any]) -> str | None:
    """The model a ``$ref`` schema points at, or None."""
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _type_text(schema: dict[str, Any]) -> str:
    """A short reading of a property's JSON Schema type."""
    name = _ref_name(schema)
    if name is not None:
        return name
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " \\| ".join(_type_text(option) for option in schema[key])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"list of {_type_text(items)}" if isinstance(items, dict) else "list"
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            return f"mapping of name to {_type_text(values)}"
        return "mapping"
    if isinstance(kind, list):
        return " \\| ".join(str(k) for k in kind)
    return str(kind) if kind is not None else "any"


def _constraints_text(schema: dict[str, Any]) -> str:
    """The property's bounds and pattern, including those of the non-null member of an optional."""
    parts = [text.format(schema[key]) for key, text in _CONSTRAINTS.items() if key in schema]
    for option in schema.get("anyOf", []):
        parts.extend(text.format(option[key]) for key, text in _CONSTRAINTS.items() if key in option)
    return "; ".join(part.replace("|", "\\|") for part in parts)


def _default_text(model: type[BaseModel], field_name: str, required: bool) -> str:
    """The field's default as YAML-ish JSON, ``required``, or ``see below`` for a nested section."""
    if required:
        return "required"
    default = model.model_fields[field_name].get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        return "its section's defaults"
    value = json.dumps(default, default=str)
    return f"`{value}`".replace("|", "\\|")


def _markdown(text: str) -> str:
    """Docstring text as markdown: reST literals and roles as code spans, ``<`` and ``>`` shown as written."""
    text = re.sub(r":(?:func|mod|data|class|meth|attr):`~?([^`]+)`", r"``\1``", text).replace("``", "`")
    pieces = text.split("`")
    for index in range(0, len(pieces), 2):  # outside code spans only
        pieces[index] = pieces[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(pieces)


def _cell(text: str) -> str:
    """Text fit for one table cell (no line breaks, pipes escaped)."""
    return _markdown(" ".join(text.split())).replace("|", "\\|")


def _numpydoc_sections(text: str) -> tuple[str, dict[str, str]]:
    """A class docstring split into its prose and the descriptions of its ``Attributes`` section.

    Other numpydoc sections (``Notes``, ``Examples``) stay in the prose under a bold title, since a
    dashed underline would make them headings of the page.
    """
    lines = inspect.cleandoc(text).splitlines()
    prose: list[str] = []
    attributes: dict[str, list[str]] = {}
    section, names = "", [""]
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if set(line.strip()) == {"-"}:
            continue
        if line.strip() and set(following.strip()) == {"-"}:
            section = line.strip()
            if section != "Attributes":
                prose += ["", f"**{section}**", ""]
            continue
        if section != "Attributes":
            prose.append(line)
        elif line and not line.startswith(" "):
            names = [name.strip() for name in line.split(" : ", 1)[0].split(",")]
        elif line.strip():
            for name in names:
                attributes.setdefault(name, []).append(line.strip())
    return "\n".join(prose).strip(), {name: " ".join(words) for name, words in attributes.items()}


def _paragraphs(text: str) -> str:
    """A class docstring as markdown paragraphs, a blank line before each list that follows a line."""
    lines: list[str] = []
    for line in inspect.cleandoc(text).splitlines():
        if line.startswith("- ") and lines and lines[-1] and not lines[-1].lstrip().startswith("- "):
            lines.append("")
        lines.append(line)
    return _markdown("\n".join(lines))


def _nested(schema: dict[str, Any], path: str) -> list[tuple[str, str, str]]:
    """The models a property holds: (dotted path, model name, union member or "")."""
    name = _ref_name(schema)
    if name is not None:
        return [(path, name, "")]
    found: list[tuple[str, str, str]] = []
    for key in ("anyOf", "oneOf"):
        options = [option for option in schema.get(key, []) if _ref_name(option) is not None]
        for option in options:
            member = str(_ref_name(option))
            found.append((path, member, member if len(options) > 1 else ""))
    if isinstance(schema.get("items"), dict):
        found.extend(_nested(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        found.extend(_nested(schema["additionalProperties"], f"{path}.<name>"))
    return found


def _section(
    path: str, variant: str, model: type[BaseModel], schema: dict[str, Any]
) -> tuple[list[str], list[tuple[str, str, str]]]:
    """One section's markdown lines and the nested sections it points at."""
    title = f"`{path}`" if path else "Top level"
    if variant:
        title += f" ({variant})"
    lines = [f"## {title}", ""]
    prose, attributes = _numpydoc_sections(model.__doc__ or schema.get("description") or "")
    if prose:
        lines += [_paragraphs(prose), ""]
    lines += [
        "| field | type | default | constraints | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    required = set(schema.get("required", []))
    nested: list[tuple[str, str, str]] = []
    for name, prop in schema.get("properties", {}).items():
        dotted = f"{path}.{name}" if path else name
        lines.append(
            f"| `{dotted}` | {_type_text(prop)} | {_default_text(model, name, name in required)} "
            f"| {_constraints_text(prop)} | {_cell(prop.get('description') or attributes.get(name, ''))} |"
        )
        nested.extend(_nested(prop, dotted))
    return [*lines, ""], nested


def protocol_reference() -> str:
    """The reference: one markdown table per section, in the order a protocol file reads.

    A model reached twice under the same path (the query of either kind of PACS source) is shown once.
    """
    schema = Protocol.model_json_schema()
    definitions = schema.get("$defs", {})
    models = _models(Protocol)
    lines: list[str] = []
    shown: set[tuple[str, str]] = set()
    pending: list[tuple[str, str, str]] = [("", "Protocol", "")]
    while pending:
        path, name, variant = pending.pop(0)
        if (path, name) in shown:
            continue
        shown.add((path, name))
        section_schema = schema if name == "Protocol" else definitions[name]
        section_lines, nested = _section(path, variant, models[name], section_schema)
        lines += section_lines
        pending = nested + pending
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    """A table cell for a flag."""
    return "yes" if flag else ""


def metric_table() -> str:
    """One row per metric of the registry: its name, what it measures and where a protocol may use it."""
    lines = [
        "| name | label | better | `evaluation.metrics` | by default | acceptance criterion "
        "| `disparity_metrics` | what it measures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for metric in METRICS:
        better = f"near {metric.target:g}" if metric.direction == "target" else metric.direction
        lines.append(
            f"| `{metric.name}` | {_cell(metric.label)} | {better} | {_yes(metric.reported)} "
            f"| {_yes(metric.default)} | {_yes(metric.criterion)} | {_yes(metric.comparable)} "
            f"| {_cell(metric.description)} |"
        )
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the markers with the generated tables."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, protocol_reference())
    if METRIC_MARKER in markdown:
        markdown = markdown.replace(METRIC_MARKER, metric_table())
    return markdown
