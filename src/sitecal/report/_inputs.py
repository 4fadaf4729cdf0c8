"""What the report stage receives and returns, and the one check of its inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

from sitecal.errors import DataError

__all__ = ["SUPPORTED_SCHEMA", "ReportArtifacts", "ReportInputs", "check_inputs", "get"]

SUPPORTED_SCHEMA = 1


@dataclass(frozen=True)
class ReportInputs:
    """The stored results a report is drawn from; the report computes nothing itself.

    Parameters
    ----------
    evaluation : Mapping
        Content of ``evaluation.json`` (schema version 1): cohort flow, split, methods, overall and
        per-subgroup metrics with intervals, reliability bins, acceptance verdicts, warnings.
    calibration : Mapping
        Content of ``calibration.json``: method, grouping attribute, global and per-group temperatures.
    provenance : Mapping
        Content of ``provenance.json``: versions, hashes, seeds, command line, UTC time, run folder.
    protocol : Mapping
        ``{"name", "title", "intended_use", "sha256", "yaml_text", "sign_off": [roles], "source_path"}``.
        Only ``name`` is required.
    """

    evaluation: Mapping[str, Any]
    calibration: Mapping[str, Any]
    provenance: Mapping[str, Any]
    protocol: Mapping[str, Any]


@dataclass(frozen=True)
class ReportArtifacts:
    """Files :func:`~sitecal.report.render_report` wrote.

    Attributes
    ----------
    pdf : Path
        ``out_dir/report.pdf``.
    figures : tuple of Path
        ``out_dir/figures/*.png`` in the order they appear in the document.
    """

    pdf: Path
    figures: tuple[Path, ...]


def get(mapping: object, *keys: str | int) -> Any:
    """Follow ``keys`` into nested mappings and lists; ``None`` where any step is absent."""
    node: Any = mapping
    for key in keys:
        if isinstance(key, int):
            if not isinstance(node, Sequence) or isinstance(node, str) or not -len(node) <= key < len(node):
                return None
            node = node[key]
        else:
            if not isinstance(node, Mapping) or key not in node:
                return None
            node = node[key]
    return node


_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "mapping": (Mapping, "an object"),
    "list": ((list, tuple), "a list"),
    "str": (str, "a string"),
    "int": (int, "an integer"),
    "number": (Real, "a number"),
}


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str) -> DataError:
        return DataError(
            f"{self.source}: the required field '{path}' {problem}. The report needs it and cannot guess it; "
            f"it is written by the pipeline, so regenerate {self.source} with `sitecal run PROTOCOL` "
            "(or restore the unedited file)."
        )

    def need(self, node: Any, key: str | int, kind: str, path: str, *, nullable: bool = False) -> Any:
        where = f"{path}.{key}" if isinstance(key, str) and path else (f"{path}[{key}]" if path else str(key))
        if isinstance(key, int):
            value = node[key]
        elif not isinstance(node, Mapping) or key not in node:
            raise self.fail(where, "is missing")
        else:
            value = node[key]
        if value is None:
            if nullable:
                return None
            raise self.fail(where, "is null")
        types, described = _KINDS[kind]
        if (isinstance(value, bool) and kind in ("int", "number")) or not isinstance(value, types):
            raise self.fail(where, f"must be {described}; got {value!r} ({type(value).__name__})")
        return value


def _check_group(c: _Checker, group: Any, path: str, metrics: Sequence[str]) -> None:
    if not isinstance(group, Mapping):
        raise c.fail(path, f"must be an object; got {type(group).__name__}")
    c.need(group, "group", "str", path)
    c.need(group, "n", "int", path)
    stats = c.need(group, "metrics", "mapping", path)
    for metric in metrics:
        m_path = f"{path}.metrics"
        entry = c.need(stats, metric, "mapping", m_path)
        for stage in ("before", "after"):
            s = c.need(entry, stage, "mapping", f"{m_path}.{metric}")
            c.need(s, "estimate", "number", f"{m_path}.{metric}.{stage}", nullable=True)


def check_inputs(inputs: ReportInputs) -> None:
    """Check that every field the report cannot do without is present and well typed.

    Optional fields are not checked here: where absent they print as "not recorded".

    Raises
    ------
    DataError
        Naming the file, the dotted path of the field and what was wrong.
    """
    for name in ("evaluation", "calibration", "provenance", "protocol"):
        if not isinstance(getattr(inputs, name), Mapping):
            raise DataError(
                f"ReportInputs.{name} must be a mapping (the parsed {name}.json); got "
                f"{type(getattr(inputs, name)).__name__}."
            )
    ev = _Checker("evaluation.json")
    version = ev.need(inputs.evaluation, "schema_version", "int", "")
    if version != SUPPORTED_SCHEMA:
        raise DataError(
            f"evaluation.json: schema_version {version} is not supported by this sitecal "
            f"(it reads schema_version {SUPPORTED_SCHEMA}). Render the report with the sitecal version "
            "that wrote the file, or re-run the evaluation with this one."
        )
    metrics = ev.need(inputs.evaluation, "metrics", "list", "")
    for i in range(len(metrics)):
        ev.need(metrics, i, "str", "metrics")
    ev.need(inputs.evaluation, "verdict", "str", "")
    _check_group(ev, ev.need(inputs.evaluation, "overall", "mapping", ""), "overall", metrics)
    subgroups = ev.need(inputs.evaluation, "subgroups", "mapping", "")
    for attribute, groups in subgroups.items():
        groups = ev.need(subgroups, attribute, "list", "subgroups")
        for i, group in enumerate(groups):
            _check_group(ev, group, f"subgroups.{attribute}[{i}]", metrics)
    criteria = ev.need(inputs.evaluation, "acceptance", "list", "")
    for i, criterion in enumerate(criteria):
        path = f"acceptance[{i}]"
        ev.need(criteria, i, "mapping", "acceptance")
        ev.need(criterion, "id", "str", path)
        ev.need(criterion, "verdict", "str", path)
        results = ev.need(criterion, "results", "list", path)
        for j, _ in enumerate(results):
            result = ev.need(results, j, "mapping", f"{path}.results")
            ev.need(result, "group", "str", f"{path}.results[{j}]")
            ev.need(result, "verdict", "str", f"{path}.results[{j}]")

    cal = _Checker("calibration.json")
    cal.need(inputs.calibration, "method", "str", "")
    cal.need(inputs.calibration, "per", "str", "", nullable=True)  # null: one global temperature
    cal.need(cal.need(inputs.calibration, "global_fit", "mapping", ""), "temperature", "number", "global_fit")
    groups = cal.need(inputs.calibration, "groups", "mapping", "")
    for name in groups:
        entry = cal.need(groups, name, "mapping", "groups")
        cal.need(entry, "temperature", "number", f"groups.{name}")

    _Checker("protocol").need(inputs.protocol, "name", "str", "")
