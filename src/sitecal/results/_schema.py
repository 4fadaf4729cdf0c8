"""JSON Schema (draft 2020-12) of a results document, generated from its dataclass annotations.

The annotations are the one description of each document: :meth:`Record.from_dict
<sitecal.results._codec.Record.from_dict>` checks documents against them and this module writes them out
for tools outside Python. A dataclass becomes an object with ``additionalProperties: false``, its fields
as properties (required unless the field is ``omit_none``), each nested dataclass one entry of ``$defs``
referenced by name. ``int``/``float``/``str``/``bool``/``None`` become JSON types, ``Literal`` an
``enum`` (or ``const``), ``tuple[T, ...]`` an array, ``Mapping[str, T]`` an object with
``additionalProperties: T``, unions ``anyOf`` (plain types merged into one ``type`` list), and
``Annotated[T, Constraint(...)]`` adds its bounds. What one field's type cannot say (a relation between
fields, such as a shrunk temperature having a note instead of an interval) is checked by ``from_dict``
only; the description of the object says so.

>>> from sitecal.results import Evaluation, json_schema
>>> schema = json_schema(Evaluation)
>>> schema["properties"]["schema_version"]
{'const': 4}
>>> schema["$defs"]["Interval"]["required"]
['estimate', 'low', 'high']
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from sitecal.results._codec import Record
from sitecal.results._fields import JSON, class_summary, dataclass_fields, strip_annotated

__all__ = ["json_schema"]

_PLAIN = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}


def json_schema(cls: type[Record]) -> dict[str, Any]:
    """The JSON Schema of a results document type (draft 2020-12), generated from its annotations.

    Parameters
    ----------
    cls : type
        A document type with ``SCHEMA_VERSION`` and ``FILE_NAME`` (``Evaluation``,
        ``CalibrationDocument``), or any results dataclass.

    Returns
    -------
    dict
        A fresh schema: ``$id`` ``urn:sitecal:<file>:schema_version:<n>``, the document's own object at
        the top level, every nested type under ``$defs``.
    """
    defs: dict[str, dict[str, Any]] = {}
    top = _object(cls, defs)
    version = getattr(cls, "SCHEMA_VERSION", None)
    name = getattr(cls, "FILE_NAME", cls.__name__)
    head: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    if version is not None:
        head["$id"] = f"urn:sitecal:{name}:schema_version:{version}"
        head["title"] = f"sitecal {name}, schema_version {version}"
    else:
        head["title"] = cls.__name__
    schema = {**head, **top}
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    return schema


def _object(cls: type, defs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    version = getattr(cls, "SCHEMA_VERSION", None)
    if version is not None:
        properties["schema_version"] = {"const": version}
        required.append("schema_version")
    for f in dataclass_fields(cls):
        prop = _value(f.hint, defs, nullable=not f.omit_none)
        if f.description:
            prop = {"description": f.description, **prop}
        properties[f.name] = prop
        if not f.omit_none:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object"}
    description = class_summary(cls)
    if description:
        out["description"] = description
    return out | {"additionalProperties": False, "required": required, "properties": properties}


def _ref(cls: type, defs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    name = cls.__name__
    if name not in defs:
        defs[name] = {}  # a placeholder first: a type that refers to itself stops here
        defs[name] = _object(cls, defs)
    return {"$ref": f"#/$defs/{name}"}


def _value(hint: Any, defs: dict[str, dict[str, Any]], *, nullable: bool = True) -> dict[str, Any]:
    hint, constraints = strip_annotated(hint)
    out = _plain(hint, defs, nullable=nullable)
    for constraint in constraints:
        out |= constraint.keywords()
    return out


def _plain(hint: Any, defs: dict[str, dict[str, Any]], *, nullable: bool) -> dict[str, Any]:
    if hint is JSON:
        return {}
    if hint in _PLAIN:
        return {"type": _PLAIN[hint]}
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if nullable or a is not type(None)]
        if len(options) == 1:
            return _value(options[0], defs)
        parts = [_value(a, defs) for a in options]
        if all(set(p) == {"type"} for p in parts):
            return {"type": [p["type"] for p in parts]}
        bounds: dict[str, Any] = {}
        for p in parts:  # bounds of a plain part apply to every part (they ignore other JSON types)
            if "type" in p and not isinstance(p["type"], list) and len(p) > 1:
                bounds |= {k: v for k, v in p.items() if k != "type"}
        if bounds and all("type" in p for p in parts):
            return {"type": [p["type"] for p in parts], **bounds}
        return {"anyOf": parts}
    if origin is Literal:
        values = list(typing.get_args(hint))
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if dataclasses.is_dataclass(hint):
        return _ref(typing.cast(type, hint), defs)
    if origin is tuple:
        item, _ = typing.get_args(hint)
        return {"type": "array", "items": _value(item, defs)}
    if origin in (dict, Mapping):
        _, item = typing.get_args(hint)
        return {"type": "object", "additionalProperties": _value(item, defs)}
    raise TypeError(f"sitecal.results cannot describe the annotation {hint!r} in JSON Schema")
