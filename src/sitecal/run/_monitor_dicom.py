"""``sitecal monitor`` on DICOM studies: a folder (or a PACS), the validated model run here, StudyDate.

The studies are scanned and read as ``sitecal run`` reads them (:func:`sitecal.run.stages.scan` and
:func:`~sitecal.run.stages.predict`: the same exclusions, logit cache and file-hash manifest), with two
differences: a study without a label yet is kept unlabelled (it counts in the label-free checks, and its
window is completed when the label comes), and each study is placed in its window by its StudyDate. A
study whose StudyDate is missing, not a date, before 1990 or in the future is an exclusion with that
reason; the others are monitored.

The model must be the one the baseline validated: its fingerprint is compared with the baseline's
``calibration.json`` before any study is read.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import numpy as np

from sitecal._pseudonym import Pseudonymizer
from sitecal.errors import DataError, InputError
from sitecal.monitor import read_date
from sitecal.protocol import LoadedProtocol
from sitecal.run._monitor_rows import DatedRows

__all__ = ["check_model", "dicom_rows"]


def check_model(loaded: LoadedProtocol, baseline_sha256: str | None, baseline: Path) -> None:
    """Refuse a model other than the one the baseline validated (its fingerprint), before any inference.

    ``baseline_sha256`` is the model fingerprint of the baseline run folder ``baseline``'s
    ``calibration.json`` (``None``: the baseline evaluated a predictions file).
    """
    from sitecal.inference import load_model

    if baseline_sha256 is None:
        raise InputError(
            f"{baseline / 'calibration.json'}: the baseline evaluated a predictions file, so no model of its "
            "own was validated to run here: monitor the scores the deployed model writes (data.predictions "
            "with monitoring.date_column)."
        )
    if loaded.model_path is None:
        raise InputError(f"{loaded.path}: model.path is not given, so the model cannot be run here.")
    model = load_model(loaded.protocol.model, loaded.model_path)
    if model.sha256 != baseline_sha256:
        raise InputError(
            f"{loaded.model_path}: not the model the baseline validated (its sha256 is "
            f"{model.sha256[:12]}..., the baseline's {baseline_sha256[:12]}...): monitor the deployed "
            "model, or validate this one first."
        )


def dicom_rows(
    loaded: LoadedProtocol, baseline_sha256: str | None, baseline: Path, *, today: dt.date, progress: bool
) -> DatedRows:
    """Scan, run the validated model, date: every study the model read with a usable StudyDate."""
    from sitecal.run.stages import analysed_studies, predict, scan

    check_model(loaded, baseline_sha256, baseline)
    protocol = loaded.protocol
    pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    cohort = scan(loaded, pseudonymize, progress=progress, label_optional=True)
    predictions, _ = predict(loaded, cohort, pseudonymize, progress=progress)
    analysed = analysed_studies(cohort, predictions, min_count_shown=protocol.privacy.min_count_shown)
    # what the scan and the model left out, as a run lists it: a study by its reason, anything else
    # (an unreadable file, a label matching no study) by its unit too
    excluded = Counter(
        e.reason if e.unit == "study" else f"{e.unit}: {e.reason}" for e in analysed.exclusions
    )
    days = [read_date(s.study_date, latest=today) for s in analysed.studies]
    for day in days:
        if isinstance(day, str):
            excluded[f"StudyDate is {day}"] += 1
    kept = [i for i, day in enumerate(days) if not isinstance(day, str)]
    if not kept:
        reasons = "; ".join(f"{reason}: {n}" for reason, n in sorted(excluded.items())) or "none found"
        raise DataError(
            f"{loaded.dicom_dir}: no study to monitor: the model read no study with a usable StudyDate "
            f"(left out: {reasons}). Check data.dicom_dir (or data.source) and the studies' StudyDate."
        )
    studies = [analysed.studies[i] for i in kept]
    return DatedRows(
        keys=np.array([s.study_key for s in studies], dtype=str),
        patients=np.array([s.patient_key for s in studies], dtype=str),
        logits=np.asarray(analysed.logits[kept], dtype=np.float64),
        labels=np.array([s.label for s in studies], dtype=np.int64),
        days=np.array([days[i] for i in kept], dtype=np.int64),
        attributes={
            name: np.array([s.attributes[name] for s in studies], dtype=str) for name in protocol.subgroups
        },
        excluded=dict(excluded),
    )
