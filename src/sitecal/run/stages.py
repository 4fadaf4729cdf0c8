"""The stages of a run, each runnable alone: scan, predict, evaluate, render.

- :func:`scan` (protocol → :class:`~sitecal.cohort.Cohort`): the DICOM folder and the labels, or a
  predictions file (with or without the DICOM folder);
- :func:`predict` (cohort + model → :class:`~sitecal.results.Predictions`), or
  :func:`predictions_from_file` when the cohort came with a predictions file;
- :func:`evaluate_cohort` (cohort + predictions + protocol → evaluation);
- :func:`render_run` (stored results of a run folder → ``report.pdf`` and ``report.dcm``), which
  recomputes no number.

:func:`sitecal.run.run_protocol` composes them and writes the run folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sitecal._pseudonym import Pseudonymizer
from sitecal._seal import COMPLETE, EVALUATED, mark_incomplete, reseal, verify_seal
from sitecal.cohort import (
    UNKNOWN,
    UNMAPPED,
    Cohort,
    Exclusion,
    LabelTable,
    PredictionTable,
    Study,
    ValueMapping,
    build_cohort,
    check_subgroup_columns,
    cohort_from_predictions,
    exclusion_counts,
    labels_from_predictions,
    network_order,
    part_facts,
    read_labels,
    read_mappings,
    read_parts,
    read_predictions,
    scan_folder,
)
from sitecal.cohort.attributes import suppress_rare_values
from sitecal.cohort.series import describe_selection
from sitecal.cohort.sources import summarise_sources
from sitecal.evaluation import EvaluationData, EvaluationOutcome, evaluate
from sitecal.protocol import LoadedProtocol, Protocol, SeriesRules, protocol_summary
from sitecal.results import CalibrationDocument, MethodCalibrationDocument, Predictions
from sitecal.run._model_run import SHARD_PARTS as SHARD_PARTS
from sitecal.run._model_run import ModelRun, file_hashes_of, hashed, predict
from sitecal.run._render_stored import REPORT_CONTEXT as REPORT_CONTEXT
from sitecal.run._render_stored import render_stored

__all__ = [
    "Analysed",
    "ModelRun",
    "analysed_studies",
    "calibration_document",
    "evaluate_cohort",
    "file_hashes_of",
    "hashed",
    "predict",
    "predictions_from_file",
    "render_run",
    "render_stored",
    "report_context",
    "scan",
    "series_rules",
]


def series_rules(loaded: LoadedProtocol) -> SeriesRules | None:
    """The series rules of a volume protocol (defaults when it states none); ``None`` for images."""
    protocol = loaded.protocol
    return (protocol.data.series or SeriesRules()) if protocol.inputs.kind == "volume" else None


def scan(
    loaded: LoadedProtocol,
    pseudonymize: Pseudonymizer,
    *,
    workers: int | None = None,
    progress: bool = True,
    label_optional: bool = False,
) -> Cohort:
    """Protocol → cohort: studies with labels and subgroups (and given predictions), and exclusions.

    With ``data.predictions`` the file is read first (a bad file fails before the DICOM scan); without
    ``data.dicom_dir`` the cohort is the file's rows. With ``label_optional`` (``sitecal monitor``, DICOM
    studies only) a study without a label is kept, labelled :data:`~sitecal.cohort.UNLABELLED`.
    """
    protocol = loaded.protocol
    data = protocol.data
    mappings = read_mappings(protocol.subgroups, loaded.resolve)  # before the scan: fail fast
    if loaded.parts:
        assert loaded.predictions_path is not None
        return read_parts(
            loaded.predictions_path,
            facts=part_facts(protocol, pseudonymize.fingerprint, model_sha256=None),
            subgroups=protocol.subgroups,
            min_count_shown=protocol.privacy.min_count_shown,
            pseudonymize=pseudonymize,
        )
    table = _predictions_table(loaded)
    labels = _labels(loaded, table, none_yet=label_optional)
    if loaded.dicom_dir is None:
        assert table is not None
        return cohort_from_predictions(
            table,
            labels,
            subgroups=protocol.subgroups,
            mappings=mappings,
            key=data.key,
            pseudonymize=pseudonymize,
            min_count_shown=protocol.privacy.min_count_shown,
            labels_from_file=loaded.labels_path is not None,
        )
    return _scan_dicom(
        loaded,
        labels,
        table,
        mappings,
        pseudonymize,
        workers=workers,
        progress=progress,
        label_optional=label_optional,
    )


def _predictions_table(loaded: LoadedProtocol) -> PredictionTable | None:
    """The predictions file read, its subgroup columns checked; ``None`` without ``data.predictions``."""
    if loaded.predictions_path is None:
        return None
    protocol = loaded.protocol
    data = protocol.data
    table = read_predictions(
        loaded.predictions_path,
        class_names=protocol.model.class_names,
        key_column=data.key_column or data.key,
        patient_column=data.patient_column,
        label_column=data.label_column if loaded.labels_path is None else None,
        columns=[s.column for s in protocol.subgroups.values() if s.column is not None],
    )
    check_subgroup_columns(table, protocol.subgroups)  # every route, DICOM joined or not
    return table


def _labels(loaded: LoadedProtocol, table: PredictionTable | None, *, none_yet: bool = False) -> LabelTable:
    """The labels file's labels, or without one the predictions file's label column.

    With ``none_yet`` (``sitecal monitor``), a protocol without either has no labels yet.
    """
    data = loaded.protocol.data
    class_names = loaded.protocol.model.class_names
    if loaded.labels_path is not None:
        return read_labels(
            loaded.labels_path,
            key_column=data.key_column or data.key,
            label_column=data.label_column,
            class_names=class_names,
        )
    if table is None and none_yet:
        return LabelTable(labels={}, bad_rows=(), n_rows=0)
    assert table is not None  # the protocol schema requires labels or predictions, but for monitoring
    return labels_from_predictions(table, class_names)


def _scan_dicom(
    loaded: LoadedProtocol,
    labels: LabelTable,
    table: PredictionTable | None,
    mappings: Mapping[str, ValueMapping],
    pseudonymize: Pseudonymizer,
    *,
    workers: int | None,
    progress: bool,
    label_optional: bool = False,
) -> Cohort:
    """The cohort of the DICOM folder's studies (retrieved from a PACS first with ``data.source``)."""
    protocol = loaded.protocol
    data = protocol.data
    assert loaded.dicom_dir is not None
    retrieval = None
    if data.source is not None:  # the studies come from a PACS, into the store the scan then reads
        from sitecal.pacs import retrieve_studies

        retrieval = retrieve_studies(
            data.source, store=loaded.pacs_store, resolve=loaded.resolve, progress=progress
        )
    # what the transforms hold at the image's loaded size counts in its budget, as the reader counts it
    # (imported here: the transforms load MONAI)
    from sitecal.inference.transforms import loaded_size_multiple

    found = scan_folder(
        loaded.dicom_dir,
        [s.tag for s in protocol.subgroups.values() if s.tag is not None],
        workers=workers,
        progress=progress,
        max_pixels_per_image=protocol.inputs.max_pixels_per_image,
        transform_multiple=loaded_size_multiple(protocol.inputs.transforms),
        read_timeout_s=data.read_timeout_s,
        only=None if retrieval is None else retrieval.files,
    )
    cohort = build_cohort(
        found,
        labels,
        subgroups=protocol.subgroups,
        mappings=mappings,
        key=data.key,
        pseudonymize=pseudonymize,
        series=series_rules(loaded),
        min_count_shown=protocol.privacy.min_count_shown,
        predictions=table,
        labels_from_file=loaded.labels_path is not None,
        label_optional=label_optional,
        unavailable=()
        if retrieval is None
        else [
            Exclusion(stage="retrieve", reason=reason, study_uid=uid, unit="study")
            for uid, reason in retrieval.failed
        ],
    )
    if loaded.network:  # the split follows the network pseudonyms, as the parts of every site do
        cohort = network_order(cohort)
    return cohort if retrieval is None else replace(cohort, retrieval=retrieval.summary)


def predictions_from_file(cohort: Cohort, class_names: Sequence[str]) -> Predictions:
    """The predictions a cohort read from a predictions file carries, as the predict stage hands them on."""
    rows = [(s, s.logits) for s in cohort.studies if s.logits is not None]
    studies = [s for s, _ in rows]
    logits = np.stack([row for _, row in rows]) if rows else np.zeros((0, len(class_names)))
    return Predictions(
        class_names=tuple(class_names),
        study_keys=tuple(s.study_key for s in studies),
        patient_keys=tuple(s.patient_key for s in studies),
        logits=np.asarray(logits, dtype=np.float64),
        source="file",
    )


@dataclass(frozen=True)
class Analysed:
    """The studies that have predictions, their logits (same order), and every exclusion so far."""

    studies: tuple[Study, ...]
    logits: np.ndarray
    exclusions: tuple[Exclusion, ...]


def analysed_studies(cohort: Cohort, predictions: Predictions, *, min_count_shown: int) -> Analysed:
    """Join predictions to the cohort's studies; a study the model could not predict is an exclusion.

    Studies the model could not read leave their groups smaller, so rare values are pooled again.
    """
    row = predictions.row_of()
    reasons = dict(predictions.failures)
    # in an order of the data alone (split key, then the study's own key-independent order), not of
    # the pseudonyms: the split and the evaluation's sums must not change with the site key
    studies = sorted(
        (s for s in cohort.studies if s.study_key in row), key=lambda s: (s.split_key, s.study_order)
    )
    shown = suppress_rare_values([s.attributes for s in studies], min_count_shown, keep=(UNKNOWN, UNMAPPED))
    studies = [replace(s, attributes=a) for s, a in zip(studies, shown, strict=True)]
    exclusions = list(cohort.exclusions) + [
        Exclusion(stage="inference", reason=reasons[s.study_key], key=s.study_key, unit="study")
        for s in cohort.studies
        if s.study_key not in row and s.study_key in reasons
    ]
    logits = predictions.logits[[row[s.study_key] for s in studies]] if studies else predictions.logits[:0]
    return Analysed(studies=tuple(studies), logits=logits, exclusions=tuple(exclusions))


def evaluate_cohort(
    loaded: LoadedProtocol,
    cohort: Cohort,
    predictions: Predictions,
    analysed: Analysed,
    *,
    progress: bool = True,
) -> EvaluationOutcome:
    """Analysed studies + their logits + protocol → the evaluation (temperatures, metrics, verdicts)."""
    protocol = loaded.protocol
    studies = analysed.studies
    data = EvaluationData(
        logits=analysed.logits,
        labels=np.array([s.label for s in studies], dtype=np.int64),
        # split keys, not pseudonyms: the split and the resampling must not change with the site key
        patient_keys=np.array([s.split_key for s in studies]),
        study_keys=np.array([s.study_key for s in studies]),
        attributes={name: np.array([s.attributes[name] for s in studies]) for name in protocol.subgroups},
        class_names=protocol.model.class_names,
    )
    flow: dict[str, Any] = {
        "files_found": cohort.files_found,
        "dicom_instances": cohort.dicom_instances,
        "studies": cohort.n_studies_found,
        "labelled": cohort.n_labelled,
        "analysed": len(studies),
        "exclusions": exclusion_counts(analysed.exclusions),
    }
    if loaded.dicom_dir is not None:
        # sites, scanners and months come from the headers
        flow["sources"] = summarise_sources(
            (s.sources for s in studies), min_count_shown=protocol.privacy.min_count_shown
        )
    if predictions.n_model_failed or predictions.n_non_finite:  # a finding about the model, for the report
        flow |= {"model_failed": predictions.n_model_failed, "non_finite_logits": predictions.n_non_finite}
    if cohort.n_series_found is not None:
        flow |= {"series_found": cohort.n_series_found, "series_selected": cohort.n_series_selected}
    if loaded.parts:  # the sites' scans, summed (sitecal.cohort._parts)
        flow |= {"source": "network_parts"}
    elif loaded.dicom_dir is None:
        flow |= {"source": "predictions_file"}
    return evaluate(protocol, data, cohort_flow=flow, protocol_sha256=loaded.sha256, progress=progress)


def calibration_document(
    protocol: Protocol, temperatures: Mapping[str, Any], *, model_sha256: str | None
) -> CalibrationDocument | MethodCalibrationDocument:
    """``calibration.json``: the fitted temperatures (or the method's fits), with the model they apply to.

    ``temperatures``: ``GroupTemperatures.to_dict()``, or under another method than temperature scaling
    ``GroupMethods.to_dict()``.
    """
    if protocol.calibration.method != "temperature":
        return MethodCalibrationDocument.from_dict(
            {
                "schema_version": MethodCalibrationDocument.SCHEMA_VERSION,
                "method": protocol.calibration.method,
                "per": protocol.calibration.per,
                "class_names": list(protocol.model.class_names),
                "model_sha256": model_sha256,
                "fits": dict(temperatures),
            },
            source="calibration.json",
        )
    return CalibrationDocument.from_dict(
        {
            "schema_version": CalibrationDocument.SCHEMA_VERSION,
            "method": protocol.calibration.method,
            "per": protocol.calibration.per,
            "class_names": list(protocol.model.class_names),
            "model_sha256": model_sha256,
            **temperatures,
        },
        source="calibration.json",
    )


def report_context(loaded: LoadedProtocol) -> dict[str, Any]:
    """The protocol facts the report prints, stored in the run folder (:data:`REPORT_CONTEXT`).

    They are what :func:`render_run` needs besides the results and ``protocol.yaml``, so that a run can be
    rendered again without the protocol's files.
    """
    protocol = loaded.protocol
    summary = {k: v for k, v in protocol_summary(loaded).items() if k != "yaml_text"}
    return {
        **summary,
        "image_selection": (
            describe_selection(series_rules(loaded))
            if loaded.dicom_dir is not None
            else "The model's scores were given per study; no image was read here."
        ),
        "eligibility": {
            "key": protocol.data.key,
            "key_column": protocol.data.key_column or protocol.data.key,
            "labels_file": loaded.labels_path.name if loaded.labels_path is not None else None,
        },
        "page_size": protocol.report.page_size,
    }


def render_run(folder: Path, key: bytes) -> Path:
    """Render ``report.pdf`` and ``report.dcm`` of a sealed run folder from its stored results alone.

    The folder is verified against its seal under ``key`` first (its results at least: a run interrupted
    while rendering is finished here), the verdict is judged again from the stored criteria, and the
    rendered folder is sealed as complete (:mod:`sitecal._seal`).

    Raises
    ------
    SealError
        An unsealed or edited folder, named file by file.
    DataError
        A stored document that is malformed, or whose verdict its own criteria do not give.
    """
    folder = Path(folder)
    seal = verify_seal(folder, key, need=EVALUATED)
    if seal.state == COMPLETE:
        # back to 'evaluated' while the report files are rewritten: a crash midway leaves a folder that
        # says it is incomplete, never a complete seal over half-written files
        mark_incomplete(folder, "its report was being rendered again ('sitecal report') and did not finish")
        reseal(seal, key, state=EVALUATED)
    pdf = render_stored(folder)
    # the results rendered are still the sealed ones (none changed while the report was drawn), and the
    # complete seal keeps their verified hashes: only the report's new files are read for it
    reseal(verify_seal(folder, key, need=EVALUATED), key, state=COMPLETE)
    return pdf
