"""The check of an exported model on the run's own evaluation studies.

:func:`check_rows` takes up to ``n_check`` of the run's evaluation studies from ``cohort.csv`` and
``predictions.csv`` (in turn from each calibration group, so that every group's temperature is used), with
their stored logits; :func:`check_studies` finds them again by the run's own scan, reads them through the
protocol's transforms and computes what sitecal's calibration gives their stored logits. :func:`eager_gap`
holds the eager model to those probabilities before anything is exported, :func:`exported_gap` the
exported file after.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from sitecal._progress import progress_over
from sitecal._pseudonym import Pseudonymizer
from sitecal.calibration import GroupMethods, GroupTemperatures
from sitecal.errors import DataError
from sitecal.inference import (
    ExportFormat,
    build_transforms,
    discard_export,
    group_table,
    load_exported,
    round_trip_tolerance,
)
from sitecal.metrics import softmax
from sitecal.protocol import LoadedProtocol
from sitecal.results import CalibrationDocument, MethodCalibrationDocument
from sitecal.run.stages import scan

__all__ = ["CheckRows", "CheckStudies", "check_rows", "check_studies", "eager_gap", "exported_gap"]

#: Images per forward pass of the check.
_BATCH = 16


@dataclass(frozen=True)
class CheckRows:
    """The evaluation studies chosen for the check: keys, stored logits (float64), groups."""

    keys: tuple[str, ...]
    logits: np.ndarray
    groups: tuple[str, ...]


def check_rows(
    folder: Path, document: CalibrationDocument | MethodCalibrationDocument, n_check: int
) -> CheckRows:
    """Up to ``n_check`` evaluation studies with their stored logits, taken from each group in turn."""
    if n_check < 1:
        raise DataError(f"The 'n_check' parameter of export_run must be an int >= 1. Got {n_check!r}.")
    paths = {name: folder / name for name in ("cohort.csv", "predictions.csv")}
    for path in paths.values():
        if not path.is_file():
            raise DataError(f"{path}: not found. Give a run folder as `sitecal run` wrote it.")
    columns = [f"logit:{name}" for name in document.class_names]
    per = document.per
    try:
        with open(paths["predictions.csv"], newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ["study_key", *columns] if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(
                    f"{paths['predictions.csv']}: no column {missing[0]!r}. Restore the file the run wrote."
                )
            logits = {r["study_key"]: [float(r[c]) for c in columns] for r in reader}
        with open(paths["cohort.csv"], newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            needed = ["study_key", "split", *([per] if per else [])]
            missing = [c for c in needed if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(
                    f"{paths['cohort.csv']}: no column {missing[0]!r}. Restore the file the run wrote."
                )
            by_group: dict[str, list[str]] = {}
            for r in reader:
                split = r["split"] or ""
                if r["study_key"] in logits and (split == "evaluation" or split.startswith("fold ")):
                    by_group.setdefault(r[per] if per else "", []).append(r["study_key"])
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(
            f"{folder}: cannot read its cohort.csv or predictions.csv ({type(exc).__name__}). Restore the "
            "files "
            "the run wrote."
        ) from None
    if not by_group:
        raise DataError(
            f"{paths['cohort.csv']}: no evaluation study with logits in predictions.csv to check on."
        )
    chosen: list[tuple[str, str]] = []
    queues = [list(reversed(by_group[g])) for g in sorted(by_group)]
    while len(chosen) < n_check and any(queues):
        for group, queue in zip(sorted(by_group), queues, strict=True):
            if queue and len(chosen) < n_check:
                chosen.append((queue.pop(), group))
    return CheckRows(
        keys=tuple(k for k, _ in chosen),
        logits=np.array([logits[k] for k, _ in chosen], dtype=np.float64),
        groups=tuple(g for _, g in chosen),
    )


def _read_studies(
    loaded: LoadedProtocol, rows: CheckRows, *, progress: bool, workers: int | None
) -> tuple[torch.Tensor, list[int]]:
    """The chosen studies found again and read through the protocol's transforms: images, rows used.

    The scan is the run's own (with the run's pseudonym key, so that the study keys match); studies that
    came from a PACS are read from the local store the run retrieved them into, never retrieved again.
    """
    key_file = loaded.key_file
    if not key_file.is_file():
        raise DataError(
            f"{key_file}: the run's pseudonym key (privacy.key_file) is not there, so its studies cannot be "
            "found again. Restore the key file, or pass --protocol with the protocol that names it."
        )
    pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    protocol = loaded.protocol
    if protocol.data.source is not None:
        data = protocol.data.model_copy(
            update={"source": None, "dicom_dir": str(loaded.pacs_store / "files")}
        )
        loaded = replace(loaded, protocol=protocol.model_copy(update={"data": data}))
    cohort = scan(loaded, pseudonymize, workers=workers, progress=progress)
    studies = {s.study_key: s for s in cohort.studies}
    volume = protocol.inputs.kind == "volume"
    transforms = build_transforms(
        protocol.inputs.transforms, voi=protocol.inputs.voi, max_values=protocol.inputs.max_pixels_per_image
    )
    images: list[torch.Tensor] = []
    used: list[int] = []
    for i, key in enumerate(
        progress_over(rows.keys, desc="Checking", unit="study", disable=not progress, delay=2)
    ):
        study = studies.get(key)
        if study is None:
            continue
        item: str | list[str] = [str(f) for f in study.files] if volume else str(study.path)
        try:
            image = torch.as_tensor(transforms(item), dtype=torch.float32)
        except Exception:  # an unreadable study is left out of the check (counted); the others decide
            continue
        if images and image.shape != images[0].shape:
            continue
        images.append(image)
        used.append(i)
    if not images:
        where = loaded.dicom_dir
        raise DataError(
            f"{where}: none of the run's {len(rows.keys)} evaluation studies chosen for the check could be "
            "found and read again (moved or deleted files, or another privacy.key_file). Restore the data "
            "the run read, or run the protocol again."
        )
    return torch.stack(images), used


@dataclass(frozen=True)
class CheckStudies:
    """The chosen studies read again, and what sitecal's own calibration gives their stored logits.

    ``index``: each image's row of the group table; ``expected``: ``softmax(stored logits / T of the
    study's group)`` (or the method's fit), float64; ``groups``: each study's calibration group.
    """

    images: torch.Tensor
    index: torch.Tensor
    expected: np.ndarray
    groups: tuple[str, ...]


def check_studies(
    loaded: LoadedProtocol,
    rows: CheckRows,
    fitted: GroupTemperatures | GroupMethods,
    *,
    progress: bool,
    workers: int | None,
) -> CheckStudies:
    """The chosen studies found again and read, with their group indices and calibrated probabilities."""
    images, used = _read_studies(loaded, rows, progress=progress, workers=workers)
    checked = CheckRows(
        keys=tuple(rows.keys[i] for i in used),
        logits=rows.logits[used],
        groups=tuple(rows.groups[i] for i in used),
    )
    table = group_table(fitted)
    index = torch.tensor(
        [table["groups"].get(g, table["global_index"]) for g in checked.groups], dtype=torch.int64
    )
    expected = _calibrated(fitted, checked.logits, checked.groups)
    return CheckStudies(images=images, index=index, expected=expected, groups=checked.groups)


def eager_gap(
    folder: Path,
    model_path: Path,
    module: torch.nn.Module,
    checked: CheckStudies,
    fitted: GroupTemperatures | GroupMethods,
    class_names: Sequence[str],
) -> float:
    """How far the eager model's calibrated probabilities on the images lie from the run's; refused past 1e-6.

    Beyond it the images, the transforms or the model changed since the run, and nothing is exported.
    """
    logits = _batched(lambda x, _: module(x), checked.images, checked.index)
    if logits.ndim != 2 or logits.shape[1] != len(class_names):
        raise DataError(
            f"{model_path}: the model returns logits of shape {tuple(logits.shape)}; export needs "
            f"(batch, {len(class_names)}), one per class of calibration.json."
        )
    model_gap = _largest_difference(
        _calibrated(fitted, logits.double().numpy(), checked.groups), checked.expected
    )
    eager_tolerance = round_trip_tolerance("torchscript")  # PyTorch's own kernels, as the run's
    if not model_gap <= eager_tolerance:
        raise DataError(
            f"{folder}: the model on the re-read evaluation studies no longer gives the run's logits "
            f"(calibrated probabilities differ from predictions.csv's by {model_gap:.2g}, more than "
            f"{eager_tolerance:g}): the images, the protocol's transforms or the model changed since the "
            "run. Nothing was exported; run the protocol again, and export that run."
        )
    return model_gap


def exported_gap(
    target: Path, fmt: ExportFormat, checked: CheckStudies, model_gap: float
) -> tuple[float, float]:
    """The exported file's largest difference from the run's calibrated probabilities, and its tolerance.

    A file beyond the tolerance is removed and refused.
    """
    gap = _largest_difference(
        _batched(load_exported(target, fmt), checked.images, checked.index).double().numpy(), checked.expected
    )
    tolerance = round_trip_tolerance(fmt)
    if not gap <= tolerance:
        discard_export(target)
        raise DataError(
            f"{target}: the exported {fmt} model's probabilities differ from sitecal's calibrated ones by "
            f"{gap:.2g} on the run's evaluation studies (more than {tolerance:g}; the eager model "
            f"is within {model_gap:.2g}); it was removed. Try another format."
        )
    return gap, tolerance


def _batched(
    run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], images: torch.Tensor, index: torch.Tensor
) -> torch.Tensor:
    """``run(images, index)`` in batches of :data:`_BATCH`, without gradients."""
    with torch.no_grad():
        return torch.cat(
            [run(images[i : i + _BATCH], index[i : i + _BATCH]) for i in range(0, len(images), _BATCH)]
        )


def _calibrated(
    fitted: GroupTemperatures | GroupMethods, logits: np.ndarray, groups: Sequence[str]
) -> np.ndarray:
    """What sitecal's calibration gives these logits, each row with its group's map."""
    names = np.asarray(groups, dtype=str)
    if isinstance(fitted, GroupMethods):
        probs: np.ndarray = fitted.probabilities(logits, names)[0]
        return probs
    return softmax(logits, temperature=fitted.temperatures_for(names))


def _largest_difference(a: np.ndarray, b: np.ndarray) -> float:
    """The largest absolute difference between two arrays of probabilities; 0 when there are none."""
    return float(np.abs(np.asarray(a, dtype=np.float64) - b).max()) if a.size else 0.0
