"""Where the model's outputs came from, in the report's words: run here, or read from a predictions file.

A run whose ``provenance.json`` has a ``predictions_file`` record did not run the model: its outputs per
study were read from a file (issue 14, item 4). Every section that would otherwise describe the model as
run here (title page, Data, Methods, Limitations, Provenance, crosswalk) takes its sentences from this
module, so that the route is described the same way everywhere. Without the record each helper answers
``None`` (or ``False``) and the sections print what they print for a model run here.

The record, as :mod:`sitecal.run` writes it: ``model_run_here`` (false), ``rows``, ``usable_rows``,
``scores`` (``probabilities`` or ``logits``), ``key`` (``StudyInstanceUID``, ``AccessionNumber`` or
``sitecal study pseudonym``), ``patients`` (``column``, ``one per study`` or ``DICOM PatientID``),
``labels`` (``labels file`` or ``predictions file``), ``subgroups_from``, ``dicom_joined``, and for
probabilities ``probability_floor`` and ``sum_tolerance``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._inputs import get
from ._text import NOT_RECORDED, format_count, para_text, short_sha

__all__ = [
    "ONE_PER_STUDY",
    "calibration_text",
    "flow_without_dicom",
    "labels_text",
    "patients_text",
    "predictions_record",
    "pseudonym_keys",
    "read_from_file_text",
    "rows_text",
    "subgroups_text",
    "weights_text",
]

#: ``predictions_file.patients`` when the file names no patient: each study is its own patient.
ONE_PER_STUDY = "one per study"
_PSEUDONYM_KEY = "sitecal study pseudonym"


def predictions_record(provenance: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``predictions_file`` record of ``provenance.json``; ``None`` when the model was run here."""
    record = get(provenance, "predictions_file")
    return record if isinstance(record, Mapping) else None


def flow_without_dicom(flow: Mapping[str, Any], record: Mapping[str, Any] | None) -> bool:
    """Whether the studies came from the predictions file alone (no DICOM folder was read)."""
    if flow.get("source") == "predictions_file":
        return True
    return record is not None and record.get("dicom_joined") is False


def _number(value: object) -> str:
    """A recorded floor or tolerance as printed: ``1e-12``, ``0.001``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g}"
    return NOT_RECORDED


def pseudonym_keys(record: Mapping[str, Any]) -> bool:
    """Whether the file's keys are sitecal's own study pseudonyms (a file written by sitecal predict)."""
    return record.get("key") == _PSEUDONYM_KEY


def _key_text(record: Mapping[str, Any]) -> str:
    if pseudonym_keys(record):
        return "sitecal's own study pseudonyms (a file written by sitecal predict; no key is shown)"
    return f"{para_text(record.get('key'))} (pseudonymised on read; no key is shown)"


def _scores(record: Mapping[str, Any]) -> str:
    return para_text(record.get("scores"))


def read_from_file_text(record: Mapping[str, Any], provenance: Mapping[str, Any]) -> str:
    """The plain statement that the model was not run here, as Paragraph markup."""
    if record.get("source") == "arrays":
        return (
            "The model was not run by sitecal: its scores were given as arrays (sitecal.evaluate_arrays), "
            f"as {_scores(record)}, one row per study."
        )
    sha = short_sha(get(provenance, "sha256", "predictions_file"))
    return (
        "The model was not run by sitecal: its outputs were read from a predictions file "
        f"(sha256 {para_text(sha)}), given as {_scores(record)}, keyed by {_key_text(record)}."
    )


def weights_text(provenance: Mapping[str, Any]) -> str:
    """The model file's fingerprint as printed for a model not run here (plain text)."""
    sha = get(provenance, "sha256", "model")
    if sha:
        return f"{short_sha(sha)} (model file named by the protocol; not run here)"
    return "not run here"


def rows_text(record: Mapping[str, Any]) -> str:
    """How many rows the file had and how many could be used (markup)."""
    return (
        f"The file has {format_count(record.get('rows'))} rows, "
        f"{format_count(record.get('usable_rows'))} of them usable."
    )


def patients_text(record: Mapping[str, Any]) -> str:
    """How patients were identified, with the caveat when each study is its own patient (markup)."""
    patients = record.get("patients")
    if patients == ONE_PER_STUDY:
        return (
            "The predictions file names no patient, so each study is treated as its own patient: the "
            "patient-level split and the bootstrap intervals assume independent studies, and the intervals "
            "are too narrow if one patient has several studies in the file."
        )
    if patients == "column":
        return "Patients are read from the patient column of the predictions file (pseudonymised on read)."
    if patients == "DICOM PatientID":
        return "Patients are read from the PatientID of each study's DICOM headers (pseudonymised on read)."
    return f"How patients were identified: {para_text(patients)}."


def labels_text(record: Mapping[str, Any]) -> str:
    """Where the ground-truth labels came from (markup)."""
    labels = record.get("labels")
    if labels == "labels file":
        return "Ground-truth labels come from the labels file (its sha256 is among the run's fingerprints)."
    if labels == "predictions file":
        return "Ground-truth labels come from the label column of the predictions file itself."
    if labels == "arrays":
        return "Ground-truth labels were given as an array beside the scores."
    return f"Where the labels came from: {para_text(labels)}."


def subgroups_text(record: Mapping[str, Any]) -> str | None:
    """Where the subgroup attributes were read (markup); ``None`` when nothing is recorded."""
    sources = record.get("subgroups_from")
    if not isinstance(sources, list) or not sources:
        return None
    return "Subgroup attributes are read from " + " and ".join(para_text(s) for s in sources) + "."


def calibration_text(record: Mapping[str, Any]) -> str:
    """Temperature scaling as it acts on the scores of the file (markup)."""
    text = "Temperature scaling (Guo et al., 2017): "
    if record.get("scores") == "probabilities":
        text += (
            "the predictions file gives probabilities, so the temperature acts on their logarithms: "
            "p<sub>T</sub> = softmax(log p / T), which gives back p at T = 1, with T &gt; 0 chosen to "
            "minimise the negative log-likelihood on the fit split. Before the logarithm each probability "
            f"is floored at {_number(record.get('probability_floor'))} (0 has no logarithm), and a row's "
            f"probabilities must sum to 1 within {_number(record.get('sum_tolerance'))} (a row that does "
            "not is excluded)."
        )
    else:
        text += (
            "the model's logits, as the predictions file gives them, are divided by a temperature "
            "T &gt; 0 chosen to minimise the negative log-likelihood on the fit split."
        )
    return text + (
        " T &gt; 1 softens over-confident probabilities, T &lt; 1 sharpens them; the predicted class is "
        "unchanged."
    )
