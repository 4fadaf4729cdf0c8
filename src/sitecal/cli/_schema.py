"""``sitecal schema NAME``: the JSON Schema of a document sitecal writes or reads, for tools outside Python.

Every schema is generated from the type that writes and reads the document
(:func:`sitecal.results.json_schema` for the results, pydantic's for the protocol), never written out by
hand, so it cannot drift from the files.
"""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Callable, Sequence
from typing import Any

from ._exit import EXIT_PASS


def _results_schema(name: str) -> Callable[[], dict[str, Any]]:
    """The schema of the results type ``name`` of :mod:`sitecal.results`, imported when it is printed."""

    def schema() -> dict[str, Any]:
        import sitecal.results

        return sitecal.results.json_schema(getattr(sitecal.results, name))

    return schema


def _protocol_schema() -> dict[str, Any]:
    """The protocol's schema (pydantic's, draft 2020-12), as the protocol reference page shows it."""
    from sitecal.protocol import Protocol

    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Protocol.model_json_schema()}


#: The documents ``sitecal schema`` knows: name, what it describes, and its schema.
SCHEMAS: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "evaluation": ("evaluation.json: every number of a run", _results_schema("Evaluation")),
    "calibration": (
        "calibration.json under temperature scaling: the fitted temperatures",
        _results_schema("CalibrationDocument"),
    ),
    "calibration-method": (
        "calibration.json under another method than temperature scaling",
        _results_schema("MethodCalibrationDocument"),
    ),
    "provenance": (
        "provenance.json: the software, the inputs' sha256, the seeds and the command of a run",
        _results_schema("ProvenanceDocument"),
    ),
    "monitoring": (
        "monitoring.json: a deployed model's calibration window by window, its tests and alerts",
        _results_schema("MonitoringDocument"),
    ),
    "metrics": ("one row of metrics.csv and metrics.parquet", _results_schema("MetricRow")),
    "protocol": ("the validation protocol, YAML", _protocol_schema),
}


def add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal schema``."""
    parser.add_argument(
        "name",
        metavar="NAME",
        help="the document: " + "; ".join(f"{name} ({what})" for name, (what, _) in SCHEMAS.items()),
    )


def schema_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Print the JSON Schema of the document ``args.name``; an unknown name exits 2 with the names."""
    from sitecal.errors import InputError

    name: str = args.name
    if name not in SCHEMAS:
        known = ", ".join(SCHEMAS)
        guess = difflib.get_close_matches(name.lower(), list(SCHEMAS), n=1, cutoff=0.5)
        hint = f" Did you mean '{guess[0]}'?" if guess else ""
        raise InputError(f"schema: sitecal knows no document {name!r}. Choose one of: {known}.{hint}")
    _, schema = SCHEMAS[name]
    print(json.dumps(schema(), indent=2, ensure_ascii=False))
    return EXIT_PASS
