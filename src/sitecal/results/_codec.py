"""One ``to_dict`` / ``from_dict`` for every results dataclass, driven by the type annotations.

The same annotations drive :mod:`sitecal.results._schema`, so what ``from_dict`` accepts and what the
JSON Schema describes cannot drift apart (:mod:`sitecal.results._fields` says how a field is described).
Supported annotations: ``int``, ``float`` (an ``int`` is accepted and kept as it is, so that a document
reads back to the same bytes), ``str``, ``bool``, ``None``, ``Literal[...]``, unions (``X | None``,
``A | B`` of dataclasses, told apart by their keys), ``tuple[T, ...]`` (a JSON array), ``Mapping[str, T]``
(a JSON object with free keys), nested dataclasses, :data:`~sitecal.results._fields.JSON` (any JSON
value), with ``Annotated`` constraints, keys and ``OrAbsent``.

Every problem raises a :class:`~sitecal.errors.DataError` naming the source, the JSON path and what was
expected: ``evaluation.json: $.subgroups.site[2].metrics.ece.after.low: expected a number, got "x"``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Literal, Self, Union

from sitecal.errors import DataError
from sitecal.results._fields import JSON, dataclass_fields, show, strip_annotated

__all__ = ["Record", "check_keys", "encode"]


class _Invalid(Exception):
    def __init__(self, path: str, problem: str, *, mismatch: bool = False, hint: str | None = None) -> None:
        super().__init__(path, problem)
        self.path, self.problem = path, problem
        self.mismatch = mismatch  # the value is not of the expected JSON type at all
        self.hint = hint  # what to do, where it is not the document's HINT


class _Mismatch(_Invalid):
    def __init__(self, path: str, expected: str, value: object) -> None:
        super().__init__(path, f"expected {expected}, got {show(value)}", mismatch=True)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _expected(hint: Any) -> str:
    """A phrase for what ``hint`` accepts: ``a number or null``."""
    hint, _ = strip_annotated(hint)
    if hint is JSON:
        return "a JSON value"
    if _is_union(hint):
        return " or ".join(dict.fromkeys(_expected(a) for a in typing.get_args(hint)))
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in typing.get_args(hint))
    if dataclasses.is_dataclass(hint):
        return "an object"
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "a list"
    if origin in (dict, Mapping):
        return "an object"
    return {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        type(None): "null",
    }.get(hint, str(hint))


def _decode(hint: Any, value: object, path: str) -> Any:
    hint, constraints = strip_annotated(hint)
    out = _decode_plain(hint, value, path)
    for constraint in constraints:
        problem = constraint.problem(out)
        if problem is not None:
            raise _Invalid(path, problem)
    return out


def _decode_plain(hint: Any, value: object, path: str) -> Any:
    if hint is JSON:
        return _check_json(value, path)
    if _is_union(hint):
        return _decode_union(hint, value, path)
    origin = typing.get_origin(hint)
    if origin is Literal:
        for allowed in typing.get_args(hint):
            if type(value) is type(allowed) and value == allowed:
                return value
        raise _Mismatch(path, _expected(hint), value)
    if dataclasses.is_dataclass(hint):
        return _decode_record(typing.cast(type, hint), value, path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _Mismatch(path, "a list", value)
        (item, _ellipsis) = typing.get_args(hint)
        return tuple(_decode(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise _Mismatch(path, "an object", value)
        _, item = typing.get_args(hint)
        return {str(k): _decode(item, v, _child(path, str(k))) for k, v in value.items()}
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise _Invalid(path, f"expected a finite number, got {show(value)}")
            return value
    elif hint is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - a type the results package does not use
        raise TypeError(f"sitecal.results cannot decode the annotation {hint!r} at {path}")
    raise _Mismatch(path, _expected(hint), value)


def _decode_union(hint: Any, value: object, path: str) -> Any:
    options = typing.get_args(hint)
    records = [o for o in options if dataclasses.is_dataclass(strip_annotated(o)[0])]
    if isinstance(value, Mapping) and records:
        # dataclass alternatives are told apart by their keys: the first whose required keys are all
        # present and whose fields cover every key; else the closest one reports its own problem
        keys = {str(k) for k in value}

        def fit(option: Any) -> tuple[bool, int]:
            infos = dataclass_fields(strip_annotated(option)[0])
            names = {f.name for f in infos}
            required = {f.name for f in infos if not f.omit_none}
            return (required <= keys <= names, len(keys & names) - len(keys - names))

        scored = [(fit(o), i, o) for i, o in enumerate(records)]
        exact = [o for (ok, _), _, o in scored if ok]
        best = exact[0] if exact else max(scored, key=lambda s: (s[0][1], -s[1]))[2]
        return _decode(best, value, path)
    for option in options:
        try:
            return _decode(option, value, path)
        except _Invalid as exc:
            if exc.path != path or not exc.mismatch:
                raise  # a nested problem, or a bound the value does break: that is the problem to report
            continue
    raise _Mismatch(path, _expected(hint), value)


def _check_json(value: object, path: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Invalid(path, f"expected a finite number, got {show(value)}")
        return value
    if isinstance(value, list | tuple):
        return [_check_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _Invalid(path, f"expected an object with string keys, got the key {k!r}")
            out[k] = _check_json(v, _child(path, k))
        return out
    raise _Invalid(path, f"expected a JSON value, got {type(value).__name__}")


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENTIFIER.match(key) else f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _decode_record(cls: type, value: object, path: str) -> Any:
    if not isinstance(value, Mapping):
        raise _Mismatch(path, "an object", value)
    infos = dataclass_fields(cls)
    version = getattr(cls, "SCHEMA_VERSION", None)
    known = {f.name for f in infos} | ({"schema_version"} if version is not None else set())
    for key in value:
        if key not in known:
            allowed = ", ".join(f.name for f in infos)
            raise _Invalid(_child(path, str(key)), f"is not a field of this object (allowed: {allowed})")
    if version is not None:
        _check_version(cls, value, path, version)
    kwargs = {}
    for f in infos:
        child = _child(path, f.name)
        if f.name not in value:
            if f.omit_none:
                continue
            raise _Invalid(child, f"is missing (expected {_expected(f.hint)})")
        if f.omit_none and value[f.name] is None:
            raise _Invalid(child, f"expected {_expected(f.hint).removesuffix(' or null')}, got null")
        kwargs[f.key] = _decode(f.hint, value[f.name], child)
    record = cls(**kwargs)
    check = getattr(record, "_problems", None)
    if check is not None:
        for where, problem in check():
            raise _Invalid(f"{path}{where}", problem)
    return record


def _check_version(cls: type, value: Mapping[str, object], path: str, version: int) -> None:
    child = _child(path, "schema_version")
    if "schema_version" not in value:
        raise _Invalid(child, f"is missing (expected {version})")
    got = value["schema_version"]
    if got != version or isinstance(got, bool):
        # a document type may say what to do with a file of another version (VERSION_HINT); else: read it
        # with the version that wrote it, or write it again
        default = "Read the file with the sitecal version that wrote it, or write it again with this one"
        hint = getattr(cls, "VERSION_HINT", None) or ". ".join(
            x for x in (default, getattr(cls, "HINT", "")) if x
        )
        raise _Invalid(
            child,
            f"schema_version {show(got)} is not supported by this sitecal (it reads schema_version "
            f"{version} of {cls.__name__})",
            hint=hint,
        )


def encode(value: object) -> Any:
    """The JSON value of a results object, list, mapping or scalar (dataclasses by their fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        version = getattr(value, "SCHEMA_VERSION", None)
        if version is not None:
            out["schema_version"] = version
        for f in dataclass_fields(type(value)):
            item = getattr(value, f.key)
            if item is None and f.omit_none:
                continue
            out[f.name] = encode(item)
        return out
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    return value


class Record:
    """Base of every results dataclass: ``to_dict`` and ``from_dict`` from the annotations.

    A subclass may define ``_problems(self)``, yielding ``(relative JSON path, problem)`` for what one
    field's type cannot say (a relation between fields); ``from_dict`` reports the first.
    """

    __slots__ = ()

    #: What to do when a document is refused (appended to the message); documents override it.
    HINT: ClassVar[str] = ""
    #: What to do with a document of another ``schema_version``; empty: read it with the sitecal version
    #: that wrote it, or write it again (then ``HINT``).
    VERSION_HINT: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: keys in field order, ``omit_none`` fields left out when ``None``."""
        out: dict[str, Any] = encode(self)
        return out

    @classmethod
    def from_dict(cls, data: object, *, source: str | None = None) -> Self:
        """Parse and check a JSON object (``json.loads`` output) into this type.

        Parameters
        ----------
        data : object
            The parsed JSON.
        source : str, optional
            Names the document in errors (a file name); by default the type's ``FILE_NAME`` or name.

        Raises
        ------
        DataError
            (a ``ValueError``) naming the source, the JSON path (``$.split.n_fit``) and what was expected.
        """
        where = source or getattr(cls, "FILE_NAME", None) or cls.__name__
        try:
            out: Self = _decode_record(cls, data, "$")
        except _Invalid as exc:
            text = cls.HINT if exc.hint is None else exc.hint
            hint = f" {text}." if text else ""
            raise DataError(f"{where}: {exc.path}: {exc.problem}.{hint}") from None
        return out

    def _problems(self) -> Iterator[tuple[str, str]]:
        return iter(())


def check_keys(
    keys: Iterable[str], expected: Iterable[str], *, path: str, what: str
) -> Iterator[tuple[str, str]]:
    """``(path, problem)`` when the keys of a mapping differ from the expected list (for ``_problems``)."""
    got, want = list(keys), list(expected)
    extra = [k for k in got if k not in want]
    missing = [k for k in want if k not in got]
    if extra:
        yield _child(path, extra[0]), f"is not one of the {what} ({', '.join(want) or 'none'})"
    elif missing:
        yield _child(path, missing[0]), f"is missing (every entry of the {what} has one)"
