"""What ``sitecal monitor`` reads: the baseline run, opened against its seal, and the scores over time.

:func:`open_baseline` takes the baseline's temperatures, its acceptance criteria and its evaluation
studies' confidences (the label-free reference); :func:`read_scores` the scores over time, pseudonymised,
dated, cut into windows and calibrated by the baseline's temperatures: the predictions file's rows (dated
by its date column), or the DICOM studies the validated model is run on here (dated by StudyDate,
:mod:`sitecal.run._monitor_dicom`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from sitecal._pseudonym import Pseudonymizer
from sitecal._seal import Seal
from sitecal.calibration import GroupTemperatures
from sitecal.cohort import UNLABELLED, read_mappings, read_predictions, shown_subgroups
from sitecal.cohort.labels import label_table
from sitecal.errors import InputError
from sitecal.monitor import OVERALL, parse_dates, softmax, window_labels
from sitecal.protocol import LoadedProtocol, MonitoringSettings
from sitecal.results import Evaluation
from sitecal.run._monitor_dicom import dicom_rows
from sitecal.run._monitor_rows import DatedRows
from sitecal.run._stored_run import read_run
from sitecal.run.sealed import open_run

__all__ = ["Baseline", "Scores", "open_baseline", "read_scores"]


@dataclass(frozen=True)
class Baseline:
    """The baseline run: its seal, evaluation, temperatures, calibration attribute and reference."""

    seal: Seal
    evaluation: Evaluation
    temperatures: GroupTemperatures
    per: str | None
    calibration_sha256: str
    model_sha256: str | None  # the validated model's fingerprint (None: the baseline read a predictions file)
    reference: Mapping[tuple[str, str], NDArray[np.float64]]  # (attribute, group) -> confidences


@dataclass(frozen=True)
class Scores:
    """The scores over time, after the deployed calibration, with what each row belongs to."""

    keys: NDArray[np.str_]
    patients: NDArray[np.str_]
    logits: NDArray[np.float64]  # after the deployed temperature
    labels: NDArray[np.int64]  # -1: not yet labelled
    windows: NDArray[np.str_]
    attributes: Mapping[str, NDArray[np.str_]]
    fallback: NDArray[np.bool_]
    excluded: Mapping[str, int]


def open_baseline(loaded: LoadedProtocol, settings: MonitoringSettings, key_file: Path | None) -> Baseline:
    """The baseline run, verified against its seal; its temperatures, criteria and reference confidences."""
    folder = loaded.resolve(settings.baseline)
    seal = open_run(folder, key_file=key_file or loaded.key_file)
    evaluation = Evaluation.from_dict(json.loads(seal.read_bytes("evaluation.json")), source=str(folder))
    calibration_bytes = seal.read_bytes("calibration.json")
    calibration = json.loads(calibration_bytes)
    if calibration.get("method", "temperature") != "temperature":
        raise InputError(
            f"{folder / 'calibration.json'}: calibrated by {calibration.get('method')!r}; sitecal monitor "
            "watches temperature scaling only."
        )
    if list(calibration.get("class_names", [])) != list(loaded.protocol.model.class_names):
        raise InputError(
            f"{loaded.path}: model.class_names {list(loaded.protocol.model.class_names)} are not the "
            f"baseline's {calibration.get('class_names')}: monitor the model the baseline validated."
        )
    temperatures = GroupTemperatures.from_dict(calibration)
    per = calibration.get("per")
    if per is not None and per not in loaded.protocol.subgroups:
        source = "its column of the predictions file" if loaded.predictions_path else "its DICOM tag"
        raise InputError(
            f"{loaded.path}: the baseline calibrates per {per!r}, which this protocol does not read: add the "
            f"subgroup {per!r} ({source})."
        )
    return Baseline(
        seal=seal,
        evaluation=evaluation,
        temperatures=temperatures,
        per=per,
        calibration_sha256=hashlib.sha256(calibration_bytes).hexdigest(),
        model_sha256=calibration.get("model_sha256"),
        reference=_reference(folder, temperatures, per),
    )


def _reference(
    folder: Path, temperatures: GroupTemperatures, per: str | None
) -> dict[tuple[str, str], NDArray[np.float64]]:
    """The baseline's evaluated studies' confidences after calibration: overall and per calibration group.

    Read as ``sitecal plan --from-run`` reads a run (:func:`~sitecal.run._stored_run.read_run`), after the
    folder's seal was verified.
    """
    stored = read_run(folder)
    held = stored.split.held  # the evaluation part, or every study of a cross-fitted run
    groups = stored.groups[held]
    scale = (
        temperatures.temperatures_for(groups)
        if per
        else np.full(groups.size, temperatures.global_temperature)
    )
    confidences = softmax(stored.logits[held] / scale[:, None]).max(axis=1)
    out = {OVERALL: confidences}
    if per:
        out |= {(per, str(g)): confidences[groups == g] for g in np.unique(groups)}
    return out


def read_scores(
    loaded: LoadedProtocol,
    settings: MonitoringSettings,
    baseline: Baseline,
    *,
    today: dt.date,
    progress: bool = False,
) -> Scores:
    """The scores over time: pseudonymised, dated, windowed and calibrated by the deployed temperatures.

    From the predictions file (dated by ``monitoring.date_column``: a bad date refuses the file), or
    without one from the DICOM studies the validated model is run on here (dated by StudyDate: a study
    without a usable date is an exclusion).
    """
    if loaded.predictions_path is None:
        rows = dicom_rows(loaded, baseline.model_sha256, baseline.seal.folder, today=today, progress=progress)
        return _calibrated(rows, settings, baseline)
    protocol = loaded.protocol
    data = protocol.data
    assert settings.date_column is not None  # the schema requires it with data.predictions
    subgroup_columns = {name: s.column for name, s in protocol.subgroups.items() if s.column is not None}
    table = read_predictions(
        loaded.predictions_path,
        class_names=protocol.model.class_names,
        key_column=data.key_column or data.key,
        patient_column=data.patient_column,
        label_column=data.label_column,
        columns=[*subgroup_columns.values(), settings.date_column],
        label_optional=True,  # labels come after the scores: a file without them yet is read as such
    )
    usable = table.usable
    assert usable is not None
    where = f"{loaded.predictions_path}: column {settings.date_column!r}"
    days = parse_dates(usable.columns[settings.date_column], where=where, today=today)
    positions = zip(usable.positions, usable.keys, usable.labels or [""] * len(usable.keys), strict=True)
    known = label_table(positions, table.key_column, protocol.model.class_names, table.numbered_by).labels
    pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    keys = np.array([pseudonymize("study", k) for k in usable.keys], dtype=str)
    patients = (
        np.array([pseudonymize("patient", p or k) for p, k in zip(usable.patients, usable.keys, strict=True)])
        if usable.patients is not None
        else keys
    )
    # the subgroups as a run shows them: normalised, mapped, rare values pooled (privacy.min_count_shown)
    shown = shown_subgroups(
        table,
        protocol.subgroups,  # columns and their intersections (the schema refuses tags when monitoring)
        read_mappings(protocol.subgroups, loaded.resolve),
        min_count_shown=protocol.privacy.min_count_shown,
    )
    rows = DatedRows(
        keys=keys,
        patients=np.asarray(patients, dtype=str),
        logits=np.asarray(usable.logits, dtype=np.float64),
        labels=np.array([known.get(k, UNLABELLED) for k in usable.keys], dtype=np.int64),
        days=days,
        attributes={name: np.array(values, dtype=str) for name, values in shown.items()},
        excluded=_excluded(table.bad_rows),
    )
    return _calibrated(rows, settings, baseline)


def _calibrated(rows: DatedRows, settings: MonitoringSettings, baseline: Baseline) -> Scores:
    """The rows with the deployed temperature of each one's calibration group, and their windows."""
    per = baseline.per
    n = len(rows.keys)
    groups = rows.attributes[per] if per is not None else np.full(n, "", dtype=str)
    scale = (
        baseline.temperatures.temperatures_for(groups)
        if per is not None
        else np.full(n, baseline.temperatures.global_temperature)
    )
    fallback = np.array([per is not None and str(g) not in baseline.temperatures.groups for g in groups])
    return Scores(
        keys=rows.keys,
        patients=rows.patients,
        logits=rows.logits / scale[:, None],
        labels=rows.labels,
        windows=window_labels(rows.days, settings.window),
        attributes=rows.attributes,
        fallback=fallback.astype(bool),
        excluded=rows.excluded,
    )


def _excluded(bad_rows: Sequence[tuple[int, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, reason in bad_rows:
        counts[reason] = counts.get(reason, 0) + 1
    return counts
