"""Where a schema error is in the protocol: pydantic's errors as ``file:line: field: what is wrong``.

Each error's location (``acceptance.0.scope``) is followed through the composed YAML nodes to the line of
its key; an unknown field gets a spelling guess from the fields the schema allows at that place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sitecal.protocol._base import _ReferenceError, _spelling_guess
from sitecal.protocol._schema import Protocol


def _format_validation_error(exc: ValidationError, root: yaml.Node, path: Path) -> str:
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        message = error["msg"]
        if error["type"] in ("literal_error", "int_parsing", "float_parsing", "bool_parsing", "string_type"):
            message += f". Got {error.get('input')!r}"
        ctx = error.get("ctx") or {}
        inner = ctx.get("error")
        if isinstance(inner, _ReferenceError):
            loc, message = loc + inner.loc, str(inner)
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field." + _spelling_guess(str(loc[-1]), _allowed_fields(loc[:-1]))
        elif error["type"] == "missing":
            message = "required field is missing."
        line = _line_of(root, loc)
        field = ".".join(str(part) for part in loc) or "(top level)"
        lines.append(f"{path}:{line}: {field}: {message}")
    lines.append("Fix the protocol and run 'sitecal check' again.")
    return "\n".join(lines)


def _line_of(root: yaml.Node, loc: tuple[Any, ...]) -> int:
    """The 1-based line of the deepest YAML node on ``loc`` (the key itself for mapping entries)."""
    node: yaml.Node = root
    line = int(root.start_mark.line) + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    node, line = value, int(key.start_mark.line) + 1
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = int(node.start_mark.line) + 1
        else:
            return line
    return line


def _allowed_fields(loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at ``loc`` in the schema, for spelling guesses."""
    model: Any = Protocol
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if field is None:
            # a free-form mapping (subgroups: {name: SubgroupSettings})
            model = _mapping_value_model(model, part)
            continue
        model = _model_of(field.annotation)
    return list(model.model_fields) if model is not None and hasattr(model, "model_fields") else []


def _model_of(annotation: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _mapping_value_model(model: Any, part: Any) -> Any:
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None
