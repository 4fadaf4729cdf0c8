"""What the report stage receives and returns, and the one check of its inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sitecal.errors import DataError
from sitecal.results import CalibrationDocument, Evaluation, MethodCalibrationDocument

__all__ = ["ReportArtifacts", "ReportInputs", "check_inputs", "get"]


@dataclass(frozen=True)
class ReportInputs:
    """The stored results a report is drawn from; the report computes nothing itself.

    Parameters
    ----------
    evaluation : Mapping
        Content of ``evaluation.json`` (:class:`sitecal.results.Evaluation`, as ``to_dict()`` gives it):
        cohort flow, split, methods, overall and per-subgroup metrics with intervals, reliability bins,
        acceptance verdicts, warnings.
    calibration : Mapping
        Content of ``calibration.json`` (:class:`sitecal.results.CalibrationDocument`): method, grouping
        attribute, global and per-group temperatures.
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
    html : Path
        ``out_dir/report.html``: the same sections and figures as one self-contained web page.
    """

    pdf: Path
    figures: tuple[Path, ...]
    html: Path


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


def check_inputs(inputs: ReportInputs) -> None:
    """Check the stored results against their types before anything is drawn.

    ``evaluation`` must follow :class:`sitecal.results.Evaluation` and ``calibration``
    :class:`sitecal.results.CalibrationDocument` exactly (the same check as when they are written and
    read back); of the protocol summary only ``name`` is required. Optional fields (those a document may
    lack, such as ``sensitivity``) print as "not recorded" where absent.

    Raises
    ------
    DataError
        Naming the file, the JSON path of the first problem and what was expected, e.g.
        ``evaluation.json: $.subgroups.site[2].n: is missing (expected an integer)``.
    """
    for name in ("evaluation", "calibration", "provenance", "protocol"):
        if not isinstance(getattr(inputs, name), Mapping):
            raise DataError(
                f"ReportInputs.{name} must be a mapping (the parsed {name}.json); got "
                f"{type(getattr(inputs, name)).__name__}."
            )
    Evaluation.from_dict(inputs.evaluation, source="evaluation.json")
    method = inputs.calibration.get("method")
    kind = CalibrationDocument if method in (None, "temperature") else MethodCalibrationDocument
    kind.from_dict(inputs.calibration, source="calibration.json")
    protocol_name = inputs.protocol.get("name")
    if not isinstance(protocol_name, str):
        problem = (
            "is missing"
            if protocol_name is None
            else f"must be a string; got {protocol_name!r} ({type(protocol_name).__name__})"
        )
        raise DataError(
            f"protocol: the required field 'name' {problem}. The report prints it on every page: pass the "
            "protocol summary the run wrote (sitecal.protocol.protocol_summary)."
        )
