"""Wire the stages and own the run folder ``<output_dir>/<protocol name>-<UTC time>/``."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sitecal import __version__
from sitecal._hash_manifest import FileHashes, HashManifest
from sitecal._io import write_json_atomic, write_text_atomic
from sitecal._pseudonym import Pseudonymizer
from sitecal._seal import EVALUATED, mark_incomplete, write_seal
from sitecal.cohort import Cohort, Exclusion, part_facts, write_part, write_predictions
from sitecal.errors import Terminated
from sitecal.evaluation import EvaluationOutcome
from sitecal.protocol import LoadedProtocol
from sitecal.results import (
    CalibrationDocument,
    MethodCalibrationDocument,
    write_document,
    write_metrics_table,
)
from sitecal.run._folder import attach_log, detach_log, new_run_folder, write_exclusions, write_tables
from sitecal.run._mlflow import log_after_run
from sitecal.run._provenance import run_provenance
from sitecal.run._resolved import write_resolved
from sitecal.run._send import send_after_run
from sitecal.run.stages import (
    REPORT_CONTEXT,
    Analysed,
    ModelRun,
    analysed_studies,
    calibration_document,
    evaluate_cohort,
    file_hashes_of,
    predict,
    predictions_from_file,
    render_run,
    report_context,
    scan,
)

if TYPE_CHECKING:
    from sitecal.inference import Placement

__all__ = ["PredictResult", "RunResult", "predict_protocol", "run_protocol"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """Where the run wrote its files and what it concluded."""

    folder: Path
    verdict: str
    evaluation: dict[str, Any]
    sent: dict[str, Any] | None = None  # the record of report.dcm sent after the run (report.send_to)

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

    The stages (:mod:`sitecal.run.stages`): scan, then predict (the model is run here) or the predictions of
    ``data.predictions`` (it is not), then evaluate, then render from the stored results.

    Parameters
    ----------
    loaded : LoadedProtocol
        From :func:`sitecal.protocol.load_protocol` (``with_predictions`` for ``sitecal evaluate``).
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
    mark_incomplete(folder, "the run is under way, or stopped before it finished (run.log says how far)")
    write_resolved(folder, loaded)  # sealed with the results: later commands need no --protocol
    handler = attach_log(folder / "run.log")
    sealed = False
    try:
        logger.info("sitecal %s, protocol %s (sha256 %s)", __version__, protocol.name, loaded.sha256[:12])
        pseudonymize = Pseudonymizer(loaded.pseudonym_key())
        outcome = _sealed_results(
            loaded,
            folder,
            started,
            pseudonymize,
            progress=progress,
            command_line=command_line,
            workers=workers,
            device=device,
        )
        render_run(folder, pseudonymize.key)
        sealed = True
        logger.info("verdict: %s; report: %s; folder sealed", outcome.verdict, folder / "report.pdf")
        sent = send_after_run(loaded, folder)
        log_after_run(loaded, folder)  # report.mlflow, read back from the sealed folder; a failure warns
        return RunResult(folder=folder, verdict=outcome.verdict, evaluation=outcome.document, sent=sent)
    except KeyboardInterrupt as exc:
        _log_interruption(folder, exc, sealed=sealed)
        raise
    except Exception as exc:
        _log_failure(folder, exc, sealed=sealed)
        raise
    finally:
        detach_log(handler)


def _sealed_results(
    loaded: LoadedProtocol,
    folder: Path,
    started: datetime,
    pseudonymize: Pseudonymizer,
    *,
    progress: bool,
    command_line: Sequence[str] | None,
    workers: int | None,
    device: str,
) -> EvaluationOutcome:
    """Scan, predict and evaluate; write the results into the folder and seal them, before the report."""
    protocol = loaded.protocol
    cohort = scan(loaded, pseudonymize, workers=workers, progress=progress)
    model_run: ModelRun | None = None
    if loaded.predictions_path is None:
        predictions, model_run = predict(loaded, cohort, pseudonymize, device=device, progress=progress)
    else:
        predictions = predictions_from_file(cohort, protocol.model.class_names)
        logger.info(
            "the model was not run here: %d studies' predictions read from a file",
            len(predictions.study_keys),
        )
    analysed = analysed_studies(cohort, predictions, min_count_shown=protocol.privacy.min_count_shown)
    if not analysed.studies:
        _write_tables(folder, loaded, analysed, np.zeros(0, bool), pseudonymize)
        raise _nothing_to_analyse(loaded, cohort, analysed.exclusions, folder)
    outcome = evaluate_cohort(loaded, cohort, predictions, analysed, progress=progress)
    _write_tables(folder, loaded, analysed, outcome.split.row_labels(), pseudonymize)
    file_hashes = _file_hashes(loaded, cohort, model_run, pseudonymize, progress=progress)
    provenance = run_provenance(
        loaded,
        folder,
        started,
        cohort,
        analysed,
        predictions,
        model_run,
        file_hashes,
        pseudonymize=pseudonymize,
        command_line=command_line,
        device=device,
    )
    write_document(folder / "calibration.json", _calibration(loaded, outcome, provenance))
    write_document(folder / "evaluation.json", outcome.result)
    write_metrics_table(folder, outcome.result)  # metrics.csv and .parquet, for the hospital's tools
    write_json_atomic(folder / "provenance.json", provenance)
    write_text_atomic(folder / "protocol.yaml", loaded.text)
    write_text_atomic(folder / "protocol.sha256", f"{loaded.sha256}  protocol.yaml\n")
    write_json_atomic(folder / REPORT_CONTEXT, report_context(loaded))
    write_seal(folder, pseudonymize.key, state=EVALUATED)  # the results, before the report
    logger.info("results sealed (seal.json, key fingerprint %s)", pseudonymize.fingerprint)
    return outcome


def _file_hashes(
    loaded: LoadedProtocol,
    cohort: Cohort,
    model_run: ModelRun | None,
    pseudonymize: Pseudonymizer,
    *,
    progress: bool,
) -> FileHashes:
    """The sha256 of every file analysed: the model run's, else hashed now; none without DICOM files."""
    if model_run is not None:
        return model_run.file_hashes
    if loaded.dicom_dir is None:
        return FileHashes({})
    return file_hashes_of(
        cohort, progress=progress, manifest=HashManifest(loaded.hash_manifest_path, pseudonymize.key)
    )


def _log_interruption(folder: Path, exc: KeyboardInterrupt, *, sealed: bool) -> None:
    """Log an interrupted run (SIGINT or SIGTERM) and mark its folder incomplete unless it was sealed."""
    signal_name = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
    logger.error(
        "run interrupted (%s); the folder is marked incomplete and nothing was judged (start it again: "
        "finished logits are cached)",
        signal_name,
    )
    if not sealed:
        mark_incomplete(folder, f"the run was interrupted ({signal_name})")


def _log_failure(folder: Path, exc: Exception, *, sealed: bool) -> None:
    """Log a failed run's reason and traceback in run.log, mark its folder incomplete, point ``exc`` there.

    Called while ``exc`` is being handled, so that the log takes its traceback.
    """
    if not sealed:
        mark_incomplete(folder, f"the run failed ({type(exc).__name__}); run.log says why")
    # every failure leaves its reason in run.log; the console gets one line and this pointer
    logger.error(
        "run failed, nothing was judged: %s: %s",
        type(exc).__name__,
        exc,
        exc_info=True,
        extra={"run_log_only": True},  # the console gets one line from the CLI instead
    )
    exc.add_note(f"The run log is {folder / 'run.log'}.")


@dataclass(frozen=True)
class PredictResult:
    """What ``sitecal predict`` wrote, and what it could not predict."""

    path: Path
    n_predicted: int
    exclusions: tuple[Exclusion, ...]
    exclusions_csv: Path


def predict_protocol(
    loaded: LoadedProtocol,
    output: Path,
    *,
    progress: bool = True,
    workers: int | None = None,
    device: str = "cpu",
    placement: Placement | None = None,
) -> PredictResult:
    """Scan and run the model, write the predictions file (sitecal's pseudonymised keys) and stop.

    What could not be predicted is listed in ``<output stem>-exclusions.csv`` beside it.

    ``sitecal evaluate`` with the same protocol and ``--predictions output`` then gives the evaluation a
    run would (the same numbers): the file holds every logit exactly. With ``placement`` the model runs
    shard by shard on Dask workers (:mod:`sitecal.inference._sharded`) and the file is the same.
    """
    if loaded.predictions_path is not None:
        from sitecal.errors import DataError

        raise DataError(
            f"{loaded.path}: data.predictions is given, so there is no model to run here. Run 'sitecal "
            "evaluate' on it, or remove data.predictions to predict with model.path."
        )
    pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    k = loaded.protocol.privacy.min_count_shown
    # a part holds values unpooled (rare ones as keyed tokens): the network pools them over every site
    shown = 1 if loaded.network else k
    cohort = scan(_min_count_shown(loaded, shown), pseudonymize, workers=workers, progress=progress)
    predictions, model_run = predict(
        loaded, cohort, pseudonymize, device=device, progress=progress, placement=placement
    )
    analysed = analysed_studies(cohort, predictions, min_count_shown=shown)
    if loaded.network:  # a part: what this site ships for the network's evaluation (sitecal.cohort._parts)
        write_part(
            output,
            cohort,
            analysed.studies,
            analysed.logits,
            analysed.exclusions,
            facts=part_facts(loaded.protocol, pseudonymize.fingerprint, model_sha256=model_run.sha256),
            pseudonymize=pseudonymize,
            min_count_shown=k,
        )
    else:
        split_keys = {s.study_key: (s.split_key, s.study_order) for s in cohort.studies}
        write_predictions(
            output,
            predictions.class_names,
            predictions.study_keys,
            predictions.patient_keys,
            [split_keys[key] for key in predictions.study_keys],
            predictions.logits,
        )
    exclusions_csv = output.with_name(f"{output.stem}-exclusions.csv")
    write_exclusions(exclusions_csv, analysed.exclusions, pseudonymize)
    return PredictResult(
        path=output,
        n_predicted=len(predictions.study_keys),
        exclusions=analysed.exclusions,
        exclusions_csv=exclusions_csv,
    )


def _min_count_shown(loaded: LoadedProtocol, k: int) -> LoadedProtocol:
    """The protocol with ``privacy.min_count_shown`` set to ``k``."""
    protocol = loaded.protocol
    privacy = protocol.privacy.model_copy(update={"min_count_shown": k})
    return replace(loaded, protocol=protocol.model_copy(update={"privacy": privacy}))


def _write_tables(
    folder: Path,
    loaded: LoadedProtocol,
    analysed: Analysed,
    split_parts: np.ndarray,
    pseudonymize: Pseudonymizer,
) -> None:
    class_names = loaded.protocol.model.class_names
    write_tables(folder, class_names, analysed.studies, analysed.exclusions, split_parts, pseudonymize)
    write_predictions(
        folder / "predictions.csv",
        class_names,
        [s.study_key for s in analysed.studies],
        [s.patient_key for s in analysed.studies],
        [(s.split_key, s.study_order) for s in analysed.studies],
        analysed.logits,
    )


def _calibration(
    loaded: LoadedProtocol, outcome: EvaluationOutcome, provenance: Mapping[str, Any]
) -> CalibrationDocument | MethodCalibrationDocument:
    """``calibration.json``: what deployment loads, bound to the model it was fitted for."""
    fitted = outcome.temperatures if outcome.methods is None else outcome.methods
    model_sha256 = provenance["sha256"].get("model")
    return calibration_document(loaded.protocol, fitted.to_dict(), model_sha256=model_sha256)


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
    elif not cohort.files_found and cohort.retrieval is not None:
        found = cohort.retrieval.get("studies_found")
        hint = (
            f" The PACS query returned {found} studies and none could be retrieved: check data.source.query "
            "(dates, modalities, worklist) and the exclusions."
            if found
            else " The PACS query returned no study: check data.source.query (dates, modalities, worklist)."
        )
    elif not cohort.files_found:
        hint = f" {loaded.dicom_dir} holds no files: check data.dicom_dir."
    elif not cohort.dicom_instances:
        hint = f" None of the {cohort.files_found} files under data.dicom_dir is a usable DICOM image."
    where = "data.source" if cohort.retrieval is not None else loaded.dicom_dir
    return DataError(
        f"{where}: no study could be analysed ({top}).{hint} Every exclusion is listed in "
        f"{folder / 'exclusions.csv'}."
    )
