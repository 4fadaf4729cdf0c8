"""Wire the stages and own the run folder ``<output_dir>/<protocol name>-<UTC time>/``."""

from __future__ import annotations

import logging
import shlex
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from sitecal import __version__
from sitecal._io import write_json_atomic, write_text_atomic
from sitecal._pseudonym import Pseudonymizer, load_or_create_key
from sitecal._run_folder import attach_log, detach_log, new_run_folder, write_tables
from sitecal.cohort import (
    UNKNOWN,
    UNMAPPED,
    Cohort,
    Exclusion,
    Study,
    build_cohort,
    read_labels,
    read_mappings,
    scan_folder,
)
from sitecal.cohort.attributes import suppress_rare_values
from sitecal.cohort.series import describe_selection
from sitecal.cohort.sources import summarise_sources
from sitecal.evaluation import EvaluationData, evaluate
from sitecal.inference import (
    LogitCache,
    build_transforms,
    cache_identity,
    file_sha256,
    image_key,
    load_model,
    predict_files,
    transform_fingerprint,
)
from sitecal.protocol import LoadedProtocol, SeriesRules, protocol_summary
from sitecal.provenance import instances_sha256, manifest_sha256, provenance_document
from sitecal.report import ReportInputs, render_report
from sitecal.report.dicom_pdf import write_report_dicom

__all__ = ["RunResult", "run_protocol"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """Where the run wrote its files and what it concluded."""

    folder: Path
    verdict: str
    evaluation: dict[str, Any]

    @property
    def report_pdf(self) -> Path:
        """The validation report."""
        return self.folder / "report.pdf"


def run_protocol(
    loaded: LoadedProtocol,
    *,
    progress: bool = True,
    command_line: Sequence[str] | None = None,
    now: datetime | None = None,
    workers: int | None = None,
    device: str = "cpu",
) -> RunResult:
    """Run every stage of a validated protocol and write the run folder.

    Parameters
    ----------
    loaded : LoadedProtocol
        From :func:`sitecal.protocol.load_protocol`.
    progress : bool
        Progress bars for scanning, inference and bootstrap.
    command_line : sequence of str, optional
        Recorded in provenance; default ``sys.argv``.
    now : datetime, optional
        The run's UTC time (names the folder); default the current time.
    workers : int, optional
        Processes for the header scan.
    device : str
        Where the model runs ("cpu", "cuda", ...); recorded in provenance.

    Returns
    -------
    RunResult
    """
    protocol = loaded.protocol
    started = (now or datetime.now(UTC)).astimezone(UTC)
    folder = new_run_folder(loaded.output_root, protocol.name, started)
    handler = attach_log(folder / "run.log")
    try:
        logger.info("sitecal %s, protocol %s (sha256 %s)", __version__, protocol.name, loaded.sha256[:12])
        pseudonymize = Pseudonymizer(load_or_create_key(loaded.key_file))
        cohort = _cohort(loaded, pseudonymize, workers=workers, progress=progress)
        series_rules = _series_rules(loaded)
        _check_run_size(cohort, protocol.inputs.max_pixels_per_run)
        model = load_model(protocol.model, loaded.model_path)
        transforms = build_transforms(
            protocol.inputs.transforms,
            voi=protocol.inputs.voi,
            max_values=protocol.inputs.max_pixels_per_image,
        )
        transforms_sha256 = transform_fingerprint(protocol.inputs.transforms, protocol.inputs.voi)
        cache_dir = loaded.logit_cache_dir
        file_hashes = _file_hashes(cohort, progress=progress)  # cache keys and the dataset manifest
        n_classes = len(protocol.model.class_names)
        volume = protocol.inputs.kind == "volume"
        inference = predict_files(
            model,
            [list(s.files) if volume else s.path for s in cohort.studies],
            transforms,
            n_classes=n_classes,
            batch_size=protocol.inputs.batch_size,
            num_workers=protocol.inputs.num_workers,
            device=device,
            progress=progress,
            cache=(
                LogitCache(
                    cache_dir,
                    cache_identity(model.identity(), transforms_sha256=transforms_sha256),
                    n_classes,
                    secret=pseudonymize.key,
                )
                if cache_dir
                else None
            ),
            keys=[image_key(pseudonymize, _hashed(s, file_hashes)) for s in cohort.studies],
        )
        logger.info("logits: %d from the cache, %d computed", inference.n_cached, inference.n_computed)
        studies = [cohort.studies[i] for i in inference.ok]
        # studies the model could not read leave their groups smaller: pool again what is now rare
        shown = suppress_rare_values(
            [s.attributes for s in studies], protocol.privacy.min_count_shown, keep=(UNKNOWN, UNMAPPED)
        )
        studies = [replace(s, attributes=a) for s, a in zip(studies, shown, strict=True)]
        exclusions = list(cohort.exclusions) + [
            Exclusion(stage="inference", reason=reason, key=cohort.studies[i].study_key, unit="study")
            for i, reason in inference.failures
        ]
        if not studies:
            write_tables(
                folder,
                protocol.model.class_names,
                [],
                exclusions,
                np.zeros(0, bool),
                np.zeros((0, n_classes)),
                pseudonymize,
            )
            raise _nothing_to_analyse(loaded, cohort, exclusions, folder)
        data = EvaluationData(
            logits=inference.logits.astype(np.float64),
            labels=np.array([s.label for s in studies], dtype=np.int64),
            patient_keys=np.array([s.patient_key for s in studies]),
            study_keys=np.array([s.study_key for s in studies]),
            attributes={name: np.array([s.attributes[name] for s in studies]) for name in protocol.subgroups},
            class_names=protocol.model.class_names,
        )
        flow = {
            "files_found": cohort.files_found,
            "dicom_instances": cohort.dicom_instances,
            "studies": cohort.n_studies_found,
            "labelled": cohort.n_labelled,
            "analysed": len(studies),
            "exclusions": Cohort.exclusion_counts(_with(cohort, exclusions)),
            "sources": summarise_sources(
                (s.sources for s in studies), min_count_shown=protocol.privacy.min_count_shown
            ),
        }
        if inference.n_model_failed or inference.n_non_finite:  # a finding about the model, for the report
            flow |= {"model_failed": inference.n_model_failed, "non_finite_logits": inference.n_non_finite}
        if cohort.n_series_found is not None:
            flow |= {"series_found": cohort.n_series_found, "series_selected": cohort.n_series_selected}
        outcome = evaluate(protocol, data, cohort_flow=flow, protocol_sha256=loaded.sha256, progress=progress)
        calibration = {
            "schema_version": 1,
            "method": protocol.calibration.method,
            "per": protocol.calibration.per,
            "class_names": list(protocol.model.class_names),
            "model_sha256": model.sha256,
            **outcome.temperatures.to_dict(),
        }
        write_tables(
            folder,
            protocol.model.class_names,
            studies,
            exclusions,
            outcome.fit_mask,
            inference.logits,
            pseudonymize,
        )
        provenance = provenance_document(
            sitecal_version=__version__,
            created_utc=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            command_line=shlex.join(command_line if command_line is not None else sys.argv),
            run_folder=folder.name,
            seeds={
                "split": protocol.calibration.split.seed,
                "bootstrap": protocol.evaluation.bootstrap.seed,
            },
            sha256={
                "model": model.sha256,
                "protocol": loaded.sha256,
                "labels": file_sha256(loaded.labels_path),
                "dataset_manifest": manifest_sha256(
                    pair for s in studies for pair in _hashed(s, file_hashes)
                ),
                "instances": instances_sha256(uid for s in studies for uid in s.instance_uids),
            },
            outputs_sha256={"predictions": file_sha256(folder / "predictions.csv")},
            model=model.record(),
            transforms_sha256=transforms_sha256,
            pseudonym_key=pseudonymize.fingerprint,
            device=device,
            logits={"cached": inference.n_cached, "computed": inference.n_computed},
        )
        write_json_atomic(folder / "calibration.json", calibration)
        write_json_atomic(folder / "evaluation.json", outcome.document)
        write_json_atomic(folder / "provenance.json", provenance)
        write_text_atomic(folder / "protocol.yaml", loaded.text)
        write_text_atomic(folder / "protocol.sha256", f"{loaded.sha256}  protocol.yaml\n")
        render_report(
            ReportInputs(
                evaluation=outcome.document,
                calibration=calibration,
                provenance=provenance,
                protocol={
                    **protocol_summary(loaded),
                    "image_selection": describe_selection(series_rules),
                    "eligibility": {
                        "key": protocol.data.key,
                        "key_column": protocol.data.key_column or protocol.data.key,
                        "labels_file": loaded.labels_path.name,
                    },
                },
            ),
            folder,
            page_size=protocol.report.page_size,
        )
        write_report_dicom(
            folder / "report.pdf",
            folder / "report.dcm",
            document_id=provenance["document_id"],
            title=protocol.report.title,
            created_utc=provenance["created_utc"],
        )
        logger.info("verdict: %s; report: %s", outcome.verdict, folder / "report.pdf")
        return RunResult(folder=folder, verdict=outcome.verdict, evaluation=outcome.document)
    except KeyboardInterrupt:
        logger.error("run interrupted; nothing was judged (start it again: finished logits are cached)")
        raise
    except Exception as exc:
        # every failure leaves its reason in run.log; the console gets one line and this pointer
        logger.error(
            "run failed, nothing was judged: %s: %s",
            type(exc).__name__,
            exc,
            exc_info=True,
            extra={"run_log_only": True},  # the console gets one line from the CLI instead
        )
        exc.add_note(f"The run log is {folder / 'run.log'}.")
        raise
    finally:
        detach_log(handler)


def _check_run_size(cohort: Cohort, limit: int) -> None:
    """Stop before inference when the studies to analyse declare more pixel values than ``limit``."""
    from sitecal.errors import DataError

    total = sum(s.declared_values for s in cohort.studies)
    if total > limit:
        raise DataError(
            f"the {len(cohort.studies)} studies to analyse declare {total:,} pixel values in all, more than "
            f"inputs.max_pixels_per_run ({limit:,}). Nothing was inferred. Raise inputs.max_pixels_per_run "
            "in the protocol if this is the cohort you mean to validate, or narrow data.dicom_dir."
        )


def _nothing_to_analyse(
    loaded: LoadedProtocol, cohort: Cohort, exclusions: Sequence[Exclusion], folder: Path
) -> Exception:
    """The error of a run in which no study is left, with the likeliest cause named."""
    from sitecal.errors import DataError

    data = loaded.protocol.data
    key_column = data.key_column or data.key
    counts = Counter(e.reason for e in exclusions)
    top = "; ".join(f"{n} × {reason}" for reason, n in counts.most_common(3)) or "nothing was found"
    hint = ""
    if cohort.n_studies_found and not cohort.n_labelled:
        hint = (
            f" None of the {cohort.n_studies_found} studies found matches a label row by data.key "
            f"({data.key}, labels column '{key_column}'): check data.key and data.key_column."
        )
    elif not cohort.files_found:
        hint = f" {loaded.dicom_dir} holds no files: check data.dicom_dir."
    elif not cohort.dicom_instances:
        hint = f" None of the {cohort.files_found} files under data.dicom_dir is a usable DICOM image."
    return DataError(
        f"{loaded.dicom_dir}: no study could be analysed ({top}).{hint} Every exclusion is listed in "
        f"{folder / 'exclusions.csv'}."
    )


def _cohort(
    loaded: LoadedProtocol, pseudonymize: Pseudonymizer, *, workers: int | None, progress: bool
) -> Cohort:
    protocol = loaded.protocol
    mappings = read_mappings(protocol.subgroups, loaded.resolve)  # before the scan: fail fast
    tags = [s.tag for s in protocol.subgroups.values() if s.tag is not None]
    scan = scan_folder(
        loaded.dicom_dir,
        tags,
        workers=workers,
        progress=progress,
        max_pixels_per_image=protocol.inputs.max_pixels_per_image,
        read_timeout_s=protocol.data.read_timeout_s,
    )
    labels = read_labels(
        loaded.labels_path,
        key_column=protocol.data.key_column or protocol.data.key,
        label_column=protocol.data.label_column,
        class_names=protocol.model.class_names,
    )
    return build_cohort(
        scan,
        labels,
        subgroups=protocol.subgroups,
        mappings=mappings,
        key=protocol.data.key,
        pseudonymize=pseudonymize,
        series=_series_rules(loaded),
        min_count_shown=protocol.privacy.min_count_shown,
    )


def _file_hashes(cohort: Cohort, *, progress: bool) -> dict[Path, str]:
    """sha256 of every file a study of the cohort is analysed on (read once, in 1 MiB chunks)."""
    paths = [path for s in cohort.studies for path in s.files]
    return {
        path: file_sha256(path) for path in tqdm(paths, desc="Hashing", unit="file", disable=not progress)
    }


def _hashed(study: Study, file_hashes: Mapping[Path, str]) -> list[tuple[str, str]]:
    """The study's ``(SOPInstanceUID, file sha256)`` pairs."""
    return [(uid, file_hashes[path]) for uid, path in zip(study.instance_uids, study.files, strict=True)]


def _series_rules(loaded: LoadedProtocol) -> SeriesRules | None:
    """The series rules of a volume protocol (defaults when it states none); ``None`` for images."""
    protocol = loaded.protocol
    return (protocol.data.series or SeriesRules()) if protocol.inputs.kind == "volume" else None


def _with(cohort: Cohort, exclusions: list[Exclusion]) -> Cohort:
    return replace(cohort, exclusions=tuple(exclusions))
