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

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sitecal._hash_manifest import FileHashes, HashManifest, hash_files
from sitecal._io import read_json
from sitecal._pseudonym import Pseudonymizer
from sitecal._seal import COMPLETE, EVALUATED, mark_incomplete, reseal, verify_seal
from sitecal.cohort import (
    UNKNOWN,
    UNMAPPED,
    Cohort,
    Exclusion,
    Study,
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
from sitecal.errors import DataError
from sitecal.evaluation import EvaluationData, EvaluationOutcome, evaluate, verdict_problems
from sitecal.protocol import LoadedProtocol, Protocol, SeriesRules, protocol_summary
from sitecal.results import (
    CalibrationDocument,
    Evaluation,
    MethodCalibrationDocument,
    Predictions,
    read_calibration,
    read_document,
)

if TYPE_CHECKING:
    from sitecal.inference import Placement

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

logger = logging.getLogger(__name__)

#: The run folder file holding the protocol facts the report prints (besides protocol.yaml).
REPORT_CONTEXT = "report-context.json"
#: Where sharded inference writes its parts (under the protocol's output folder) until they are merged.
SHARD_PARTS = ".sitecal-shards"


def series_rules(loaded: LoadedProtocol) -> SeriesRules | None:
    """The series rules of a volume protocol (defaults when it states none); ``None`` for images."""
    protocol = loaded.protocol
    return (protocol.data.series or SeriesRules()) if protocol.inputs.kind == "volume" else None


def scan(
    loaded: LoadedProtocol, pseudonymize: Pseudonymizer, *, workers: int | None = None, progress: bool = True
) -> Cohort:
    """Protocol → cohort: studies with labels and subgroups (and given predictions), and exclusions.

    With ``data.predictions`` the file is read first (a bad file fails before the DICOM scan); without
    ``data.dicom_dir`` the cohort is the file's rows.
    """
    protocol = loaded.protocol
    data = protocol.data
    class_names = protocol.model.class_names
    mappings = read_mappings(protocol.subgroups, loaded.resolve)  # before the scan: fail fast
    key_column = data.key_column or data.key
    table = None
    if loaded.parts:
        assert loaded.predictions_path is not None
        return read_parts(
            loaded.predictions_path,
            facts=part_facts(protocol, pseudonymize.fingerprint, model_sha256=None),
            subgroups=protocol.subgroups,
            min_count_shown=protocol.privacy.min_count_shown,
            pseudonymize=pseudonymize,
        )
    if loaded.predictions_path is not None:
        table = read_predictions(
            loaded.predictions_path,
            class_names=class_names,
            key_column=key_column,
            patient_column=data.patient_column,
            label_column=data.label_column if loaded.labels_path is None else None,
            columns=[s.column for s in protocol.subgroups.values() if s.column is not None],
        )
        check_subgroup_columns(table, protocol.subgroups)  # every route, DICOM joined or not
    if loaded.labels_path is not None:
        labels = read_labels(
            loaded.labels_path, key_column=key_column, label_column=data.label_column, class_names=class_names
        )
    else:
        assert table is not None  # the protocol schema requires labels or predictions
        labels = labels_from_predictions(table, class_names)
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


@dataclass(frozen=True)
class ModelRun:
    """What provenance records of a model run here."""

    sha256: str
    record: Mapping[str, Any]
    transforms_sha256: str
    file_hashes: FileHashes
    #: how the logits were computed: batch size, precision and its check, and the Dask shards if any
    inference: Mapping[str, Any] = field(default_factory=dict)


def predict(
    loaded: LoadedProtocol,
    cohort: Cohort,
    pseudonymize: Pseudonymizer,
    *,
    device: str = "cpu",
    progress: bool = True,
    placement: Placement | None = None,
) -> tuple[Predictions, ModelRun]:
    """Cohort + model → logits of every study the model could read (the others in ``failures``).

    With ``placement`` the model runs shard by shard on Dask workers
    (:mod:`sitecal.inference._sharded`), giving the same logits.
    """
    from sitecal.inference import (
        LogitCache,
        build_transforms,
        cache_identity,
        image_key,
        load_model,
        predict_files,
        transform_fingerprint,
    )

    protocol = loaded.protocol
    if loaded.model_path is None:
        raise DataError(f"{loaded.path}: model.path is not given, so the model cannot be run here.")
    _check_run_size(cohort, protocol.inputs.max_pixels_per_run)
    model = load_model(protocol.model, loaded.model_path)
    transforms = build_transforms(
        protocol.inputs.transforms, voi=protocol.inputs.voi, max_values=protocol.inputs.max_pixels_per_image
    )
    transforms_sha256 = transform_fingerprint(protocol.inputs.transforms, protocol.inputs.voi)
    file_hashes = file_hashes_of(  # cache keys and the dataset manifest
        cohort, progress=progress, manifest=HashManifest(loaded.hash_manifest_path, pseudonymize.key)
    )
    n_classes = len(protocol.model.class_names)
    volume = protocol.inputs.kind == "volume"
    cache_dir = loaded.logit_cache_dir
    identity = cache_identity(model.identity(), transforms_sha256=transforms_sha256)
    cache = LogitCache(cache_dir, identity, n_classes, secret=pseudonymize.key) if cache_dir else None
    items = [list(s.files) if volume else s.path for s in cohort.studies]
    keys = [image_key(pseudonymize, hashed(s, file_hashes)) for s in cohort.studies]
    if placement is not None:
        from sitecal.inference import predict_sharded, settle_inference

        assert loaded.model_path is not None
        size, check = settle_inference(  # once for every shard: one batch size, one precision
            model,
            items,
            transforms,
            n_classes=n_classes,
            batch_size=protocol.inputs.batch_size,
            precision=protocol.inputs.precision,
            tolerance=protocol.inputs.precision_tolerance,
            device="cuda:0" if device == "cuda" else device,
        )
        inference = predict_sharded(
            model=protocol.model,
            model_path=loaded.model_path,
            model_sha256=model.sha256,
            inputs=protocol.inputs,
            items=items,
            keys=keys,
            n_classes=n_classes,
            identity_sha256=_canonical_sha256(identity),
            cache=cache,
            parts_dir=loaded.output_root / SHARD_PARTS,
            placement=placement,
            batch_size=size,
            precision_check=check,
            device=device,
            progress=progress,
        )
    else:
        inference = predict_files(
            model,
            items,
            transforms,
            n_classes=n_classes,
            batch_size=protocol.inputs.batch_size,
            num_workers=protocol.inputs.num_workers,
            device=device,
            progress=progress,
            cache=cache,
            keys=keys,
            precision=protocol.inputs.precision,
            precision_tolerance=protocol.inputs.precision_tolerance,
        )
    logger.info("logits: %d from the cache, %d computed", inference.n_cached, inference.n_computed)
    ok = [cohort.studies[i] for i in inference.ok]
    predictions = Predictions(
        class_names=tuple(protocol.model.class_names),
        study_keys=tuple(s.study_key for s in ok),
        patient_keys=tuple(s.patient_key for s in ok),
        logits=inference.logits.astype(np.float64),
        source="model",
        failures=tuple((cohort.studies[i].study_key, reason) for i, reason in inference.failures),
        n_cached=inference.n_cached,
        n_model_failed=inference.n_model_failed,
        n_non_finite=inference.n_non_finite,
    )
    return predictions, ModelRun(
        sha256=model.sha256,
        record=model.record(),
        transforms_sha256=transforms_sha256,
        file_hashes=file_hashes,
        inference={
            "batch_size": inference.batch_size,
            "precision": inference.precision_check.to_dict(),
            "dask": None
            if placement is None
            else {
                "cluster": "existing scheduler" if placement.scheduler else "LocalCluster",
                "workers": placement.n_workers,
                "shard_size": placement.shard_size,
            },
        },
    )


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


def render_stored(folder: Path) -> Path:
    """Render a folder's stored results, unsealed (``sitecal.evaluate_arrays(...).render``, no key).

    Reads ``evaluation.json``, ``calibration.json``, ``provenance.json``, ``report-context.json`` and
    ``protocol.yaml``; recomputes no number but the verdict, judged again from the stored criteria. The
    PDF's own time stamps are the run's time (``provenance.created_utc``), so rendering a run again gives
    the same PDF, byte for byte.
    """
    from sitecal.report import ReportInputs, render_report
    from sitecal.report.dicom_pdf import write_report_dicom

    folder = Path(folder)
    documents: dict[str, Mapping[str, Any]] = {}
    for name in ("evaluation.json", "calibration.json"):
        _stored(folder, name)  # a missing file is named as such, before its checks
    evaluation = read_document(folder / "evaluation.json", Evaluation)
    if problems := verdict_problems(evaluation):
        raise DataError(
            f"{folder / 'evaluation.json'}: its verdicts are not those its own numbers give "
            f"({'; '.join(problems[:3])}). Nothing was rendered: the document was edited, or made by a "
            "faulty sitecal. Run the protocol again."
        )
    documents["evaluation.json"] = evaluation.to_dict()
    documents["calibration.json"] = read_calibration(folder / "calibration.json").to_dict()
    documents |= {name: _stored(folder, name) for name in ("provenance.json", REPORT_CONTEXT)}
    context = dict(documents[REPORT_CONTEXT])
    page_size = str(context.pop("page_size", "A4"))
    protocol_yaml = folder / "protocol.yaml"
    try:
        context["yaml_text"] = protocol_yaml.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{protocol_yaml}: cannot read the protocol as run ({exc}).") from None
    provenance = documents["provenance.json"]
    with _pdf_time(str(provenance.get("created_utc", ""))):
        artifacts = render_report(
            ReportInputs(
                evaluation=documents["evaluation.json"],
                calibration=documents["calibration.json"],
                provenance=provenance,
                protocol=context,
            ),
            folder,
            page_size=page_size,
        )
    write_report_dicom(
        artifacts.pdf,
        folder / "report.dcm",
        document_id=str(provenance["document_id"]),
        title=str(context.get("title") or "Calibration validation report"),
        created_utc=str(provenance["created_utc"]),
    )
    return artifacts.pdf


@contextmanager
def _pdf_time(created_utc: str) -> Iterator[None]:
    """Date the PDF by the run's time: reportlab reads ``SOURCE_DATE_EPOCH`` for its time stamps."""
    import os

    try:
        epoch = int(datetime.strptime(created_utc, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        raise DataError(
            f"provenance.json: created_utc {created_utc!r} is not a UTC time (YYYY-MM-DDThh:mm:ssZ)."
        ) from None
    before = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = before


def _stored(folder: Path, name: str) -> Mapping[str, Any]:
    path = folder / name
    if name == REPORT_CONTEXT and not path.is_file() and (folder / "evaluation.json").is_file():
        raise DataError(
            f"{path}: not found: this run was made by a sitecal older than 'sitecal report', which stores "
            "what the report prints of the protocol there. Run the protocol again to get a run that can be "
            "rendered again."
        )
    if not path.is_file():
        raise DataError(
            f"{path}: not found. {folder} is not a finished sitecal run folder (a run writes {name} before "
            "its report); give the folder of a run that completed."
        )
    document = read_json(path)
    if not isinstance(document, dict):
        raise DataError(f"{path}: expected a JSON object.")
    return document


def _check_run_size(cohort: Cohort, limit: int) -> None:
    """Stop before inference when the studies to analyse declare more pixel values than ``limit``."""
    total = sum(s.declared_values for s in cohort.studies)
    if total > limit:
        raise DataError(
            f"the {len(cohort.studies)} studies to analyse declare {total:,} pixel values in all, more than "
            f"inputs.max_pixels_per_run ({limit:,}). Nothing was inferred. Raise inputs.max_pixels_per_run "
            "in the protocol if this is the cohort you mean to validate, or narrow data.dicom_dir."
        )


def _canonical_sha256(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_hashes_of(cohort: Cohort, *, progress: bool, manifest: HashManifest | None = None) -> FileHashes:
    """sha256 of every file a study of the cohort is analysed on (read once, in 1 MiB chunks).

    With ``manifest``, a file unchanged since a run hashed it is not read again
    (:mod:`sitecal._hash_manifest`).
    """
    hashes = hash_files(
        (path for s in cohort.studies for path in s.files), manifest=manifest, progress=progress
    )
    logger.info("file hashes: %d from the manifest, %d computed", hashes.n_reused, hashes.n_hashed)
    return hashes


def hashed(study: Study, file_hashes: Mapping[Path, str]) -> list[tuple[str, str]]:
    """The study's ``(SOPInstanceUID, file sha256)`` pairs."""
    return [(uid, file_hashes[path]) for uid, path in zip(study.instance_uids, study.files, strict=True)]
