"""What a sealed run folder gives MLflow: parameters, ``metrics.csv``'s numbers and keys, the documents.

Read through the seal (each file once, bounded, checked against it); :mod:`sitecal.run._mlflow` sends it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sitecal._seal import SEAL, Seal
from sitecal.errors import DataError, SealError
from sitecal.results import METRIC_COLUMNS

__all__ = ["ARTIFACTS", "SealedRecord", "metric_key", "read_sealed_run"]

#: The folder's documents logged as artefacts, when the folder holds them (``seal.json`` besides).
ARTIFACTS = (
    "report.pdf",
    "report.html",
    "evaluation.json",
    "calibration.json",
    "provenance.json",
    "metrics.csv",
)
#: Bounds on what is read back from the folder (a run folder's documents are well below them).
_MAX_ARTIFACT_BYTES = 256 << 20
_MAX_DOCUMENT_BYTES = 32 << 20
_MAX_SEAL_BYTES = 1 << 20
_MAX_METRIC_ROWS = 20_000
#: A key segment kept as it is: MLflow's key characters but '.' (the separator) and '/' (a path).
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_\-]([A-Za-z0-9_\- ]*[A-Za-z0-9_\-])?")
_MAX_SEGMENT = 64
_MAX_PARAM = 500
_DOCUMENTS = ("evaluation.json", "provenance.json", "calibration.json", "metrics.csv")


@dataclass(frozen=True)
class SealedRecord:
    """What MLflow is given of one run folder, every part read from its sealed files."""

    params: Mapping[str, str]
    metrics: Mapping[str, float]
    artifacts: Mapping[str, bytes]  # name -> the bytes the seal vouches for
    verdict: str
    document_id: str
    protocol_name: str | None


def read_sealed_run(seal: Seal) -> SealedRecord:
    """The parameters, metrics and artefacts of a verified run folder (:func:`sitecal.run.sealed.open_run`).

    Raises
    ------
    SealError
        A document is not in the seal, or was edited after it.
    DataError
        A document is not what a run writes.
    """
    files = _sealed_files(seal)
    folder = seal.folder
    evaluation = _json(files, "evaluation.json", folder)
    provenance = _json(files, "provenance.json", folder)
    calibration = _json(files, "calibration.json", folder)
    name = _get(evaluation, "protocol", "name")
    return SealedRecord(
        params=_params(evaluation, provenance, calibration, folder.name),
        metrics=_metrics(files["metrics.csv"], folder / "metrics.csv"),
        artifacts={n: files[n] for n in (*ARTIFACTS, SEAL) if n in files},
        verdict=str(evaluation.get("verdict", "")),
        document_id=str(provenance.get("document_id", "")),
        protocol_name=str(name) if name else None,
    )


def _sealed_files(seal: Seal) -> dict[str, bytes]:
    """The documents read (once, bounded, checked against the seal), and ``seal.json`` as verified."""
    files: dict[str, bytes] = {}
    for name in (*_DOCUMENTS, *ARTIFACTS):
        if name in files or name not in seal.files:
            continue
        limit = _MAX_ARTIFACT_BYTES if name.startswith("report.") else _MAX_DOCUMENT_BYTES
        if seal.sizes[name] > limit:
            raise DataError(
                f"{seal.folder / name}: {seal.sizes[name]} bytes, more than the {limit} logged to MLflow."
            )
        files[name] = seal.read_bytes(name)
    for required in _DOCUMENTS:
        if required not in files:
            raise SealError(
                f"{seal.folder / required}: not in the run's seal, so the folder is not a run sitecal wrote "
                "whole. Give a run folder, or run the protocol again."
            )
    files[SEAL] = _seal_bytes(seal)
    return files


def _seal_bytes(seal: Seal) -> bytes:
    """``seal.json``, read once more and checked to be the seal just verified."""
    path = seal.folder / SEAL
    try:
        if path.stat().st_size > _MAX_SEAL_BYTES:
            raise SealError(f"{path}: larger than any seal sitecal writes.")
        data = path.read_bytes()
        body = json.loads(data)
    except (OSError, ValueError):
        raise SealError(f"{path}: changed while it was read. Log the folder again.") from None
    same = (
        isinstance(body, dict)
        and body.get("files") == dict(seal.files)
        and body.get("sizes") == dict(seal.sizes)
        and body.get("state") == seal.state
        and body.get("key_fingerprint") == seal.key_fingerprint
    )
    if not same:
        raise SealError(f"{path}: changed while it was read. Log the folder again.")
    return data


def _json(files: Mapping[str, bytes], name: str, folder: Path) -> dict[str, Any]:
    try:
        document = json.loads(files[name])
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise DataError(f"{folder / name}: not a JSON object as the run wrote it. Run the protocol again.")
    return document


def _get(document: Mapping[str, Any], *path: str) -> Any:
    """The value at ``path`` in a nested document, or ``None``."""
    value: Any = document
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _params(
    evaluation: Mapping[str, Any],
    provenance: Mapping[str, Any],
    calibration: Mapping[str, Any],
    run_folder: str,
) -> dict[str, str]:
    """The run's settings and fingerprints as MLflow parameters (scalars only; absent ones left out)."""
    picked: dict[str, Any] = {
        "protocol.name": _get(evaluation, "protocol", "name"),
        "protocol.sha256": _get(evaluation, "protocol", "sha256"),
        "model.name": _get(provenance, "model", "name"),
        "model.version": _get(provenance, "model", "version"),
        "calibration.method": calibration.get("method"),
        "calibration.per": evaluation.get("calibration_attribute"),
        "calibration.fallback": calibration.get("fallback"),
        "sitecal.version": provenance.get("sitecal_version"),
        "document_id": provenance.get("document_id"),
        "run_folder": run_folder,
        "device": provenance.get("device"),
    }
    for section, keys in (
        ("split", ("method", "fit_fraction", "folds", "seed", "stratify")),
        ("bootstrap", ("n_resamples", "seed", "level", "method", "cluster", "strata", "refit")),
        ("ece", ("n_bins", "binning", "kind")),
    ):
        for key in keys:
            picked[f"{section}.{key}"] = _get(evaluation, section, key)
    hashes = provenance.get("sha256")
    if isinstance(hashes, Mapping):
        for name in sorted(hashes)[:50]:
            if name == "protocol":
                continue  # protocol.sha256 above
            picked[f"sha256.{_segment(str(name))}"] = hashes[name]
    return {
        key: str(value)[:_MAX_PARAM]
        for key, value in picked.items()
        if isinstance(value, (str, int, float)) and value != ""
    }


def metric_key(attribute: str, group: str, metric: str, stage: str, column: str) -> str:
    """The MLflow key of one number of ``metrics.csv``: stable, collision-free, at most 250 characters.

    ``<metric>.<stage>.<attribute>.<group>.<column>``, or ``<metric>.<stage>.overall.<column>`` for the
    overall row. Each part is kept as it is when it holds only letters, digits, '_', '-' and inner spaces
    (at most 64 characters); any other part becomes those characters (others replaced by '_', cut to 55)
    followed by '-' and the first 8 hex digits of the sha256 of its text, so that two group names that
    read alike ('F × 40–59' and 'F x 40-59') keep apart, run after run.

    >>> metric_key("scanner", "GE Signa", "ece", "after", "estimate")
    'ece.after.scanner.GE Signa.estimate'
    >>> metric_key("overall", "All studies", "nll", "before", "low")
    'nll.before.overall.low'
    >>> metric_key("site", "St. Mary's", "ece", "after", "n")
    'ece.after.site.St_Mary_s-e7787f2f.n'
    """
    parts = [metric, stage, attribute] if attribute == "overall" else [metric, stage, attribute, group]
    return ".".join(_segment(part) for part in [*parts, column])


def _segment(text: str) -> str:
    if len(text) <= _MAX_SEGMENT and _PLAIN_SEGMENT.fullmatch(text):
        return text
    readable = re.sub(r"[^A-Za-z0-9_\-]+", "_", text).strip("_")[: _MAX_SEGMENT - 9] or "_"
    return f"{readable}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"


def _metrics(data: bytes, path: Path) -> dict[str, float]:
    """Every number of ``metrics.csv`` (estimate, low, high, n of each row), by :func:`metric_key`."""
    try:
        reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
        header = tuple(next(reader))
    except (UnicodeDecodeError, StopIteration, csv.Error):
        raise DataError(f"{path}: not the CSV a run writes. Run the protocol again.") from None
    if header != METRIC_COLUMNS:
        raise DataError(f"{path}: its columns are {list(header)}, not {list(METRIC_COLUMNS)}.")
    metrics: dict[str, float] = {}
    for line, row in enumerate(reader, start=2):
        if line - 1 > _MAX_METRIC_ROWS:
            raise DataError(f"{path}: more than {_MAX_METRIC_ROWS} rows, more than MLflow is sent.")
        cells = dict(zip(METRIC_COLUMNS, row, strict=False))
        for column in ("estimate", "low", "high", "n"):
            text = cells.get(column, "")
            if text == "":
                continue  # no number in the table, none logged
            try:
                value = float(text)
            except ValueError:
                raise DataError(f"{path}:{line}: {column} {text!r} is not a number.") from None
            key = metric_key(cells["attribute"], cells["group"], cells["metric"], cells["stage"], column)
            if key in metrics and not (math.isnan(value) and math.isnan(metrics[key])):
                raise DataError(f"{path}:{line}: a second row for {key}.")
            metrics[key] = value
    return metrics
