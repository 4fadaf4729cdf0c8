"""The JSON Schema of ``evaluation.json``, shipped in the package, and a validator for it.

The schema (``sitecal/report/evaluation.schema.json``, JSON Schema draft 2020-12) documents every key of
the evaluation document for auditors and tools outside Python; ``schema_version`` in the document names the
version it follows. Validation needs the ``jsonschema`` package (``pip install 'jsonschema>=4.18'``), which
sitecal itself does not require: the report checks what it needs with
:func:`sitecal.report._inputs.check_inputs`.

>>> from sitecal.report.schema import evaluation_schema, validate_evaluation
>>> evaluation_schema()["properties"]["schema_version"]
{'description': 'Version of this format; a reader refuses versions it does not know.', 'const': 1}
>>> import json, pathlib
>>> validate_evaluation(json.loads(pathlib.Path("evaluation.json").read_text()))  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import lru_cache
from importlib.resources import files
from typing import Any

from sitecal.errors import DataError

__all__ = ["SCHEMA_FILE", "evaluation_schema", "validate_evaluation"]

#: The schema's file name inside the ``sitecal.report`` package.
SCHEMA_FILE = "evaluation.schema.json"
_MAX_MESSAGE = 240  # jsonschema quotes the whole offending value, which may be a large object


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    text = files("sitecal.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def evaluation_schema() -> dict[str, Any]:
    """The JSON Schema of ``evaluation.json`` (a fresh copy: changing it changes nothing here).

    Returns
    -------
    dict
        The parsed ``evaluation.schema.json``; its ``$id`` names the ``schema_version`` it describes.
    """
    return copy.deepcopy(_schema())


@lru_cache(maxsize=1)
def _validator() -> Any:
    try:
        import jsonschema
    except ImportError:
        raise ImportError(
            "validate_evaluation needs the jsonschema package, which sitecal does not install: "
            "pip install 'jsonschema>=4.18' (or pip install 'sitecal[test]')."
        ) from None
    return jsonschema.Draft202012Validator(_schema())


def _dotted(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _problem(error: Any) -> tuple[list[str | int], str]:
    """The path of the offending value and what is wrong with it, for the most relevant error."""
    path: list[str | int] = list(error.absolute_path)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        missing = next(k for k in error.validator_value if k not in instance)
        return [*path, missing], "is missing"
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = next((k for k in instance if k not in known), None)
        if extra is not None and error.validator_value is False:
            allowed = ", ".join(sorted(known))
            return [*path, extra], f"is not a field of this object (allowed: {allowed})"
    if error.validator == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return path, f"must be one of {allowed}; got {instance!r}"
    message = error.message if len(error.message) <= _MAX_MESSAGE else error.message[:_MAX_MESSAGE] + "…"
    return path, f"is invalid: {message}"


def validate_evaluation(document: object) -> None:
    """Check a parsed ``evaluation.json`` against the packaged schema.

    Parameters
    ----------
    document : object
        The parsed JSON (``json.loads`` of the file).

    Raises
    ------
    DataError
        (a ``ValueError``) naming the dotted JSON path of the first problem (``subgroups.scanner[0].n``)
        and what was wrong.
    ImportError
        When the ``jsonschema`` package is not installed.
    """
    validator = _validator()  # first: says how to install jsonschema where it is missing
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(document))
    if error is None:
        return
    path, problem = _problem(error)
    version = document.get("schema_version") if isinstance(document, dict) else None
    raise DataError(
        f"evaluation.json does not follow its schema (schema_version {version!r}, "
        f"sitecal/report/{SCHEMA_FILE}): '{_dotted(path)}' {problem}. The file is written by "
        "`sitecal run PROTOCOL`: regenerate it, or restore the unedited file."
    )
