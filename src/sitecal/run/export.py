"""``sitecal export RUN_DIR --format FMT``: the run's model with its temperatures, as a file deployment runs.

:func:`export_run` loads the run's protocol (its own ``protocol.yaml``, or ``--protocol``), the model the
protocol names (through the loader ``sitecal run`` uses; its sha256 must be the one ``calibration.json``
was fitted for) and ``calibration.json``, and writes the calibrated model with
:func:`sitecal.inference.export_calibrated` (which checks the file against the eager module to 1e-6).

Then it checks the file the way it will be used. Up to :data:`N_CHECK` of the run's evaluation studies
(``evaluation`` or ``fold k`` in ``cohort.csv``; taken in turn from each calibration group, so that every
group's temperature is used) are found again by a scan of the protocol's DICOM folder with the run's
pseudonym key, read through the protocol's transforms and given to the exported file with their group's
index. Its probabilities must equal sitecal's own calibrated probabilities for those studies,
``softmax(stored logits / T of the study's group)`` (``predictions.csv`` and ``calibration.json``), within
:func:`~sitecal.inference.round_trip_tolerance` (1e-6; 1e-5 for ONNX, whose float32 kernels round
otherwise than PyTorch's). Before exporting, the eager model on the same images must give them within
1e-6: otherwise the images, the transforms or the model changed since the run, and nothing is exported.
A file that fails the check is removed.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sitecal import __version__
from sitecal._io import read_json
from sitecal.calibration import GroupMethods, GroupTemperatures
from sitecal.errors import DataError
from sitecal.inference import (
    EXPORT_FORMATS,
    ExportFormat,
    LoadedModel,
    export_calibrated,
    load_model,
    transform_fingerprint,
)
from sitecal.protocol import LoadedProtocol, ModelSettings
from sitecal.provenance import file_sha256
from sitecal.results import CalibrationDocument, MethodCalibrationDocument, read_calibration
from sitecal.run._export_check import check_rows, check_studies, eager_gap, exported_gap
from sitecal.run._folder import attach_log, detach_log
from sitecal.run._resolved import run_protocol_of
from sitecal.run.sealed import open_run

__all__ = ["N_CHECK", "ExportResult", "export_run"]

logger = logging.getLogger(__name__)

#: Most evaluation studies the exported file is checked on.
N_CHECK = 32
#: Where the file goes without ``--output``, inside the run folder.
DEFAULT_NAMES = {
    "torchscript": "calibrated.ts",
    "torch-export": "calibrated.pt2",
    "onnx": "calibrated.onnx",
    "monai-bundle": "calibrated-bundle",
}


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote and how it was checked.

    ``max_difference``: the largest absolute difference between the exported file's probabilities and
    sitecal's calibrated probabilities over the ``n_checked`` studies (of ``n_groups`` calibration
    groups); ``max_model_difference``: the same for the eager model on the same images. ``n_left_out``
    evaluation studies chosen for the check could not be used (not found again, unreadable, or an input
    shape other than the first study's).
    """

    path: Path
    groups_file: Path
    format: str
    per: str | None
    n_groups_table: int
    n_checked: int
    n_groups: int
    n_left_out: int
    max_difference: float
    max_model_difference: float
    tolerance: float


def export_run(
    folder: Path,
    fmt: str,
    *,
    output: Path | None = None,
    protocol: Path | None = None,
    key_file: Path | None = None,
    n_check: int = N_CHECK,
    progress: bool = True,
    workers: int | None = None,
) -> ExportResult:
    """Export a run's calibrated model as ``fmt`` and check it on the run's evaluation studies.

    Parameters
    ----------
    folder : pathlib.Path
        A run folder written by ``sitecal run``.
    fmt : {"torchscript", "torch-export", "onnx", "monai-bundle"}
        The format (see :func:`sitecal.inference.export_calibrated`).
    output : pathlib.Path, optional
        The file (a folder for ``monai-bundle``) to write; default ``<folder>/export/calibrated.<ext>``.
        Never overwritten.
    protocol : pathlib.Path, optional
        The protocol file (default: the run's own ``protocol.yaml``, its paths taken from the folder the
        run recorded it was in, :mod:`sitecal.run._resolved`); needed only for a folder written before
        that record whose ``report.output_dir`` leads out of the protocol's folder.
    key_file : pathlib.Path, optional
        The site key the run was sealed under, when it is not where the run's protocol says
        (:mod:`sitecal.run.sealed`). The folder is verified against its seal before anything is read, so
        the temperatures exported, and those the file is checked against, are the ones the run validated.
    n_check : int
        Most evaluation studies to check on (default :data:`N_CHECK`).
    progress : bool
        Progress bars (the scan, the check).
    workers : int, optional
        Processes for the header scan.

    Raises
    ------
    DataError
        An unknown format, a folder that is not a finished run of a model run here, a model other than
        the run's, the run's studies not found again, or a check that fails; each message names the file
        or field and what to do.
    """
    if fmt not in EXPORT_FORMATS:
        guess = difflib.get_close_matches(str(fmt), EXPORT_FORMATS, n=1)
        hint = f" Did you mean {guess[0]!r}?" if guess else ""
        raise DataError(f"--format {fmt!r}: give one of {', '.join(EXPORT_FORMATS)}.{hint}")
    folder = Path(folder)
    seal = open_run(folder, key_file=key_file, protocol=protocol)
    _refuse_inside_run(folder, output)
    document = _calibration(folder)
    try:
        handler = attach_log(folder / "run.log")  # the run's record says what was exported from it
    except OSError:  # a read-only (archived) run folder: export all the same
        handler = None
    try:
        loaded = run_protocol_of(folder, protocol, seal=seal)
        done = _export(folder, document, fmt, output, loaded, n_check, progress=progress, workers=workers)
    except Exception as exc:
        logger.error("export as %s failed: %s", fmt, exc, extra={"run_log_only": True})
        raise
    finally:
        if handler is not None:
            detach_log(handler)
    return done


def _export(
    folder: Path,
    document: CalibrationDocument | MethodCalibrationDocument,
    fmt: ExportFormat,
    output: Path | None,
    loaded: LoadedProtocol,
    n_check: int,
    *,
    progress: bool,
    workers: int | None,
) -> ExportResult:
    """Export the run's model with its fits to ``output``, once the eager model is checked; check the file."""
    target = Path(output) if output is not None else folder / "export" / DEFAULT_NAMES[fmt]
    _refuse_existing(target, fmt)
    if fmt == "onnx":
        from sitecal.inference import require_onnx

        require_onnx()  # before the scan, not after it
    if loaded.predictions_path is not None or loaded.model_path is None:
        raise DataError(
            _no_model(folder, f"{loaded.path}: the protocol reads the model's outputs from a file")
        )
    try:
        temperatures = _fitted(document)
    except DataError as exc:  # the fits inside a well-formed document
        raise DataError(f"{folder / 'calibration.json'}: {exc} Restore the file the run wrote.") from None
    rows = check_rows(folder, document, n_check)
    model = _run_model(loaded.protocol.model, loaded.model_path, document)
    _note_changes(folder, loaded)
    checked = check_studies(loaded, rows, temperatures, progress=progress, workers=workers)
    model_gap = eager_gap(
        folder, loaded.model_path, model.module, checked, temperatures, document.class_names
    )
    images = checked.images
    groups_file = export_calibrated(
        model.module,
        temperatures,
        target,
        fmt=fmt,
        example=images[: min(len(images), 4)]
        if len(images) > 1
        else images.repeat(2, *[1] * (images.ndim - 1)),
        facts=_facts(folder, loaded, document, model.sha256),
        source_metadata=_source_metadata(loaded),
        preprocessing=[{"name": s.name, "args": dict(s.args)} for s in loaded.protocol.inputs.transforms],
    )
    gap, tolerance = exported_gap(target, fmt, checked, model_gap)
    logger.info(
        "exported as %s to %s; checked on %d evaluation studies of %d groups: largest difference from "
        "sitecal's calibrated probabilities %.2g (tolerance %g)",
        fmt,
        target,
        len(checked.groups),
        len(set(checked.groups)),
        gap,
        tolerance,
    )
    return ExportResult(
        path=target,
        groups_file=groups_file,
        format=fmt,
        per=document.per,
        n_groups_table=len(temperatures.groups),
        n_checked=len(checked.groups),
        n_groups=len(set(checked.groups)),
        n_left_out=len(rows.keys) - len(checked.groups),
        max_difference=gap,
        max_model_difference=model_gap,
        tolerance=tolerance,
    )


def _run_model(
    settings: ModelSettings, model_path: Path, document: CalibrationDocument | MethodCalibrationDocument
) -> LoadedModel:
    """The protocol's model, refused unless it is the model the run calibrated (its sha256).

    A model file is hashed before it is loaded: a path found through the run folder is no reason to
    read another file's weights.
    """
    if model_path.is_file() and file_sha256(model_path) != document.model_sha256:
        raise DataError(_other_model(model_path, file_sha256(model_path), document))
    model = load_model(settings, model_path)
    if model.sha256 != document.model_sha256:
        raise DataError(_other_model(model_path, model.sha256, document))
    return model


def _other_model(
    model_path: Path, sha256: str, document: CalibrationDocument | MethodCalibrationDocument
) -> str:
    """The refusal of a model other than the one the run calibrated."""
    return (
        f"{model_path}: sha256 {sha256[:12]}... is not the model the run calibrated "
        f"({str(document.model_sha256)[:12]}..., calibration.json model_sha256). Point model.path at the "
        "model file the run used (or pass --protocol with a protocol that does)."
    )


def _fitted(document: CalibrationDocument | MethodCalibrationDocument) -> GroupTemperatures | GroupMethods:
    """The run's calibration: temperatures, or another method's fits (calibration.method)."""
    if isinstance(document, MethodCalibrationDocument):
        return GroupMethods.from_dict(document.to_dict()["fits"])
    return GroupTemperatures.from_dict(document.to_dict())


def _refuse_inside_run(folder: Path, output: Path | None) -> None:
    """An ``--output`` inside the sealed run folder goes under its ``export/`` (left out of the seal)."""
    if output is None:
        return
    target, run = Path(output).resolve(), folder.resolve()
    if target.is_relative_to(run) and not target.is_relative_to(run / "export"):
        raise DataError(
            f"--output {output}: inside the run folder, whose files are sealed. Write it under "
            f"{folder / 'export'} or outside the folder."
        )


def _calibration(folder: Path) -> CalibrationDocument | MethodCalibrationDocument:
    """The run's ``calibration.json``; refused without one, or when the run's model was not run here."""
    path = folder / "calibration.json"
    if not folder.is_dir():
        raise DataError(
            f"{folder}: not a folder. Give the run folder `sitecal run` wrote (reports/<name>-<time>)."
        )
    if not path.is_file():
        raise DataError(
            f"{path}: not found, so there are no temperatures to export. Give the run folder `sitecal run` "
            "wrote (a run that stopped before its evaluation has none: run it again)."
        )
    document = read_calibration(path)
    if document.model_sha256 is None:
        raise DataError(
            _no_model(folder, f"{path}: model_sha256 is null: the run read the model's outputs from a file")
        )
    return document


def _no_model(folder: Path, why: str) -> str:
    return (
        f"{why}, so there is no model here to export. Deploy the temperatures on the model's own scores with "
        f"`sitecal apply {folder / 'calibration.json'} SCORES.csv`."
    )


def _refuse_existing(target: Path, fmt: str) -> None:
    if fmt == "monai-bundle":
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise DataError(
                f"--output {target}: exists and is not an empty folder. Remove it, or give another."
            )
    elif target.exists() or target.with_name(target.name + ".groups.json").exists():
        raise DataError(f"--output {target}: exists (or its .groups.json does). Remove it, or give another.")


def _note_changes(folder: Path, loaded: LoadedProtocol) -> None:
    """Log what differs from the run (the protocol, the transforms' fingerprint); the check decides."""
    provenance = read_json(folder / "provenance.json")  # sealed, and bounded as every document is
    if not isinstance(provenance, dict):
        provenance = {}
    run_protocol = (provenance.get("sha256") or {}).get("protocol")
    if run_protocol and run_protocol != loaded.sha256:
        logger.warning("%s is not the protocol the run used (its sha256 differs)", loaded.path.name)
    inputs = loaded.protocol.inputs
    recorded = provenance.get("transforms_sha256")
    if recorded and recorded != transform_fingerprint(inputs.transforms, inputs.voi):
        logger.warning(
            "the transform chain's fingerprint differs from the run's (the protocol's transforms, or the "
            "MONAI version, changed); the check says whether the inputs are still the same"
        )


def _facts(
    folder: Path,
    loaded: LoadedProtocol,
    document: CalibrationDocument | MethodCalibrationDocument,
    model_sha256: str,
) -> dict[str, Any]:
    """What the group table records about where the export came from (hashes and names, no identifier)."""
    settings = loaded.protocol.model
    try:  # "<sha256>  protocol.yaml", as the run wrote it
        protocol_sha256: str | None = (folder / "protocol.sha256").read_text(encoding="utf-8").split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        protocol_sha256 = None
    return {
        "per": document.per,
        "class_names": list(document.class_names),
        "model_name": settings.name,
        "model_version": settings.version,
        "model_sha256": model_sha256,
        "protocol_sha256": protocol_sha256,
        "calibration_sha256": file_sha256(folder / "calibration.json"),
        "run": folder.resolve().name,
        "sitecal_version": __version__,
    }


def _source_metadata(loaded: LoadedProtocol) -> Mapping[str, Any] | None:
    """The metadata of the protocol's model when it is a MONAI bundle (read as JSON, nothing run)."""
    if loaded.protocol.model.format != "monai_bundle" or loaded.model_path is None:
        return None
    path = loaded.model_path / "configs" / "metadata.json"
    meta = read_json(path, remedy="Point model.path at the bundle the run used.")
    return meta if isinstance(meta, dict) else None
