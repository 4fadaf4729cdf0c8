"""How a results dataclass describes its fields: JSON keys, absent-or-present, bounds and descriptions.

Read by the codec (:mod:`sitecal.results._codec`) and the schema generator (:mod:`sitecal.results._schema`)
alike, so that what ``from_dict`` accepts and what the JSON Schema says come from one description.

- ``Annotated[T, Constraint(...)]``: bounds and patterns (JSON Schema keywords);
- ``Annotated[str, Key("class")]``: the JSON key where it is not the attribute name;
- ``OrAbsent[T]`` (``Annotated[T | None, OMIT]``): the key is left out of the document when the value is
  ``None`` (fields that older documents lack, or that only some rows carry); such a key never holds null;
- descriptions: the numpydoc ``Attributes`` section of the class docstring.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, TypeVar

__all__ = [
    "JSON",
    "OMIT",
    "Constraint",
    "FieldInfo",
    "Key",
    "OrAbsent",
    "attribute_descriptions",
    "class_summary",
    "dataclass_fields",
    "show",
    "strip_annotated",
]

if TYPE_CHECKING:
    #: Any JSON value (what ``json.loads`` returns), for the few genuinely open-ended parts of a document.
    JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None
else:

    class JSON:
        """Any JSON value (what ``json.loads`` returns): a marker the codec and the schema recognise."""


@dataclass(frozen=True, slots=True)
class Constraint:
    """Bounds and patterns of a value, as JSON Schema keywords (``Annotated[int, Constraint(minimum=0)]``).

    ``from_dict`` enforces them and the schema generator writes them out, both from this one object.
    """

    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    pattern: str | None = None
    min_length: int | None = None
    min_items: int | None = None

    def keywords(self) -> dict[str, Any]:
        """The JSON Schema keywords."""
        names = {
            "minimum": "minimum",
            "maximum": "maximum",
            "exclusive_minimum": "exclusiveMinimum",
            "exclusive_maximum": "exclusiveMaximum",
            "pattern": "pattern",
            "min_length": "minLength",
            "min_items": "minItems",
        }
        return {key: getattr(self, attr) for attr, key in names.items() if getattr(self, attr) is not None}

    def problem(self, value: object) -> str | None:
        """Why ``value`` breaks the constraint, or ``None``."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum:
                return f"expected a number >= {self.minimum:g}, got {show(value)}"
            if self.maximum is not None and value > self.maximum:
                return f"expected a number <= {self.maximum:g}, got {show(value)}"
            if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
                return f"expected a number > {self.exclusive_minimum:g}, got {show(value)}"
            if self.exclusive_maximum is not None and value >= self.exclusive_maximum:
                return f"expected a number < {self.exclusive_maximum:g}, got {show(value)}"
        if isinstance(value, str):
            if self.min_length is not None and len(value) < self.min_length:
                return f"expected a string of at least {self.min_length} characters, got {show(value)}"
            if self.pattern is not None and re.search(self.pattern, value) is None:
                return f"expected a string matching {self.pattern}, got {show(value)}"
        if isinstance(value, tuple) and self.min_items is not None and len(value) < self.min_items:
            return f"expected at least {self.min_items} items, got {len(value)}"
        return None


@dataclass(frozen=True, slots=True)
class Key:
    """The JSON key of a field where it is not the attribute name: ``Annotated[str, Key("class")]``."""

    name: str


class _Omit:
    """Marks a field whose key is left out of the document when its value is ``None``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OMIT"


OMIT = _Omit()
T = TypeVar("T")
#: ``T``, or the key is absent from the document (the value is then ``None``; the key never holds null).
OrAbsent: TypeAlias = Annotated[T | None, OMIT]


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """What the codec and the schema generator know about one field."""

    key: str  # attribute name
    description: str = ""
    omit_none: bool = False
    json_key: str | None = None
    hint: Any = None

    @property
    def name(self) -> str:
        """The key in the JSON document."""
        return self.json_key or self.key


@cache
def dataclass_fields(cls: type) -> tuple[FieldInfo, ...]:
    """The fields of a results dataclass with their resolved annotations, in declaration order.

    Descriptions come from the class docstring's numpydoc ``Attributes`` section.
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    described = attribute_descriptions(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        marks = hint.__metadata__ if typing.get_origin(hint) is Annotated else ()
        key = next((m.name for m in marks if isinstance(m, Key)), None)
        omit = any(isinstance(m, _Omit) for m in marks)
        info = FieldInfo(f.name, described.get(f.name, ""), omit, key, hint)
        out.append(info)
    return tuple(out)


_SECTION = re.compile(r"^(\S[^\n]*)\n-{3,}$", re.MULTILINE)
_ENTRY = re.compile(r"^([A-Za-z_]\w*(?:, [A-Za-z_]\w*)*) :")


def class_summary(cls: type) -> str:
    """The class docstring before its first numpydoc section, as one line."""
    doc = inspect.getdoc(cls) or ""
    first = _SECTION.search(doc)
    return " ".join((doc[: first.start()] if first else doc).split())


def attribute_descriptions(cls: type) -> dict[str, str]:
    """Attribute name -> description, from the numpydoc ``Attributes`` section of the class docstring."""
    doc = inspect.getdoc(cls) or ""
    sections = list(_SECTION.finditer(doc))
    out: dict[str, str] = {}
    for i, section in enumerate(sections):
        if section.group(1).strip() != "Attributes":
            continue
        end = sections[i + 1].start() if i + 1 < len(sections) else len(doc)
        names: list[str] = []
        for line in doc[section.end() : end].splitlines():
            entry = _ENTRY.match(line)
            if entry:
                names = entry.group(1).split(", ")
                for name in names:
                    out[name] = ""
            elif line.startswith(" ") and names:
                for name in names:
                    out[name] = (out[name] + " " + line.strip()).strip()
    return out


def strip_annotated(hint: Any) -> tuple[Any, tuple[Constraint, ...]]:
    """``(T, constraints)`` of ``Annotated[T, ...]`` (nested ones flattened); ``(hint, ())`` otherwise."""
    constraints: list[Constraint] = []
    while typing.get_origin(hint) is Annotated:
        constraints += [m for m in hint.__metadata__ if isinstance(m, Constraint)]
        hint = hint.__origin__
    return hint, tuple(constraints)


def show(value: object) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
