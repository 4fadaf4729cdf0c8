"""Log a sealed run folder to MLflow (``report.mlflow``): its parameters, metrics and documents.

After a run seals its folder, :func:`log_after_run` logs it as one MLflow run; :func:`log_to_mlflow` does
the work and may be called on any finished folder. Everything logged is read back from the folder through
its seal (:func:`sitecal.run.sealed.open_run`), never from the run's memory: only what the run validated
and sealed reaches MLflow, and a folder edited since is refused.

What is logged
--------------
- parameters: the protocol's name and sha256, the sha256 provenance records (model, labels, predictions,
  ...), the model's name and version, the calibration method and attribute, the split, the bootstrap
  (resamples, seed, level, method), the ECE binning, the sitecal version, the document id, the run folder;
- metrics: every number of ``metrics.csv`` (estimate, low, high, n), keyed
  ``<metric>.<stage>.<attribute>.<group>.<column>`` (``<metric>.<stage>.overall.<column>`` for the
  overall row), e.g. ``ece.after.scanner.GE Signa.estimate`` (see :func:`metric_key`);
- tags: ``sitecal.verdict``, ``sitecal.document_id``, ``sitecal.run_folder`` and the protocol's own;
- artefacts: :data:`ARTIFACTS`, those the folder holds, and ``seal.json``.

Never logged: the per-study tables (``cohort.csv``, ``predictions.csv``, ``exclusions.csv``: one row per
study with its pseudonymised study and patient keys and file paths), ``metrics.parquet`` (the same table
as ``metrics.csv``), ``report.dcm`` (the PDF again, as a DICOM instance), ``protocol.yaml``,
``resolved.json`` and ``run.log`` (the site's folder paths and hosts; the protocol's sha256 is logged) and
``report-context.json``. ``evaluation.json`` and the report name at most a handful of misclassified
evaluation studies by pseudonymised study key, as the report does for the committee (the site alone can
map a key back).

MLflow runs inside :func:`_mlflow_session`: its HTTP calls are bounded (``MLFLOW_HTTP_REQUEST_TIMEOUT``,
``..._MAX_RETRIES``, ``..._BACKOFF_FACTOR``, unless the environment sets them), its usage telemetry is off,
its file store is allowed (MLflow 3 keeps it behind ``MLFLOW_ALLOW_FILE_STORE``), and its log records and
warnings go to ``run.log`` only; the environment and the ``mlflow`` logger are restored afterwards. The
client API is used (:class:`mlflow.tracking.MlflowClient`), never MLflow's global active run.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from sitecal.errors import DataError, SitecalError
from sitecal.run._mlflow_content import ARTIFACTS, metric_key, read_sealed_run
from sitecal.run.sealed import open_run

if TYPE_CHECKING:
    from sitecal.protocol import LoadedProtocol

__all__ = [
    "ARTIFACTS",
    "MLFLOW_MISSING",
    "MlflowRun",
    "log_after_run",
    "log_to_mlflow",
    "metric_key",
    "mlflow_problems",
    "tracking_uri",
]

logger = logging.getLogger(__name__)

#: The refusal when ``report.mlflow`` is set and MLflow cannot be imported.
MLFLOW_MISSING = "report.mlflow needs the mlflow package: pip install 'sitecal[mlflow]'"
_INSTALL = "pip install --force-reinstall 'sitecal[mlflow]'"

#: MLflow's settings while sitecal calls it; ``None``: only when the environment does not set it.
_FORCED_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_ALLOW_FILE_STORE": "true"}
_DEFAULT_ENV = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}


@dataclass(frozen=True)
class MlflowRun:
    """What :func:`log_to_mlflow` logged: where, and how much."""

    tracking_uri: str
    experiment_id: str
    run_id: str
    n_params: int
    n_metrics: int
    artifacts: tuple[str, ...]


def tracking_uri(value: str, resolve: Callable[[str], Path]) -> str:
    """The MLflow tracking URI of ``report.mlflow.tracking_uri``.

    An http(s) URL as it is, else the ``file:`` URI of the folder (a relative path is taken from the
    protocol's folder, by ``resolve``).
    """
    if value.lower().startswith(("http://", "https://")):
        return value
    return _folder(value, resolve).as_uri()


def _folder(value: str, resolve: Callable[[str], Path]) -> Path:
    """The local folder of a validated ``tracking_uri`` that is not a URL."""
    if value.lower().startswith("file:"):
        return Path(unquote(urlsplit(value).path))
    return resolve(value)


def mlflow_problems(loaded: LoadedProtocol, *, allow_anywhere: bool = False) -> list[str]:
    """What keeps ``report.mlflow`` from logging the run, found before the run (for the preflight).

    MLflow must be importable; a local store's folder must be writable (and, unless ``allow_anywhere``,
    below the protocol's folder or the working folder, as ``report.output_dir``); a server must answer.
    """
    from sitecal._io import unwritable_folder

    settings = loaded.protocol.report.mlflow
    if settings is None:
        return []
    try:
        with _mlflow_session():
            import mlflow.tracking  # noqa: F401
    except ImportError as exc:
        if _is_mlflow_missing(exc):
            return [f"{MLFLOW_MISSING}, or remove report.mlflow from the protocol."]
        return [f"report.mlflow: the mlflow package does not import ({exc}). Reinstall it: {_INSTALL}."]
    except Exception as exc:  # a broken installation: whatever its import raises
        return [
            f"report.mlflow: the mlflow package does not import ({type(exc).__name__}: {_first_line(exc)}). "
            f"Reinstall it: {_INSTALL}."
        ]
    field = "report.mlflow.tracking_uri"
    uri = settings.tracking_uri
    if not uri.lower().startswith(("http://", "https://")):
        folder = _folder(uri, loaded.resolve)
        roots = (loaded.path.parent.resolve(), Path.cwd().resolve())
        if not allow_anywhere and not any(folder.resolve().is_relative_to(root) for root in roots):
            return [
                f"{field}: {folder} is outside the protocol's folder ({loaded.path.parent}) and the working "
                "folder. Keep the MLflow store below one of them, or pass --allow-output-anywhere."
            ]
        problem = unwritable_folder(folder)
        return [f"{field}: {problem}. Choose a folder this account may write to."] if problem else []
    try:
        with _mlflow_session():
            from mlflow.tracking import MlflowClient

            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:  # whatever MLflow or the network raise, the server cannot take the run
        return [
            f"{field}: the MLflow server at {uri} did not answer ({type(exc).__name__}: {_first_line(exc)}). "
            "Start it or fix the URL (credentials: MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD), or remove report.mlflow."
        ]
    return []


def log_after_run(loaded: LoadedProtocol, folder: Path) -> MlflowRun | None:
    """Log a sealed run to ``report.mlflow``, when set; a failure is a warning (the verdict stands).

    The MLflow run id goes to the run's log (``run.log``), which grows after the seal; nothing is written
    into the sealed files.
    """
    settings = loaded.protocol.report.mlflow
    if settings is None:
        return None
    where = settings.tracking_uri
    try:
        where = tracking_uri(settings.tracking_uri, loaded.resolve)
        logged = log_to_mlflow(
            folder,
            tracking_uri=where,
            experiment=settings.experiment,
            run_name=settings.run_name,
            tags=settings.tags,
            protocol=loaded.path,
        )
    except SitecalError as exc:
        logger.warning(
            "the run was not logged to MLflow at %s: %s The run itself is complete and its verdict stands.",
            where,
            exc,
        )
        return None
    logger.info(
        "logged to MLflow at %s: run %s in experiment %s (%d parameters, %d metrics, artefacts: %s)",
        logged.tracking_uri,
        logged.run_id,
        logged.experiment_id,
        logged.n_params,
        logged.n_metrics,
        ", ".join(logged.artifacts),
    )
    return logged


def log_to_mlflow(
    folder: Path,
    *,
    tracking_uri: str,
    experiment: str | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    key_file: Path | None = None,
    protocol: Path | None = None,
) -> MlflowRun:
    """Log a finished run folder as one MLflow run, everything read from the folder through its seal.

    Parameters
    ----------
    folder : pathlib.Path
        A complete, sealed run folder.
    tracking_uri : str
        Where: a ``file:`` URI of a local folder or an http(s) URL (:func:`tracking_uri` makes it).
    experiment : str, optional
        The MLflow experiment, created when missing; default the protocol's name.
    run_name : str, optional
        The MLflow run's name; default the folder's.
    tags : mapping of str to str, optional
        Tags besides sitecal's own (``report.mlflow.tags``, validated by the protocol).
    key_file, protocol : pathlib.Path, optional
        Where the site key is found, as :func:`sitecal.run.sealed.open_run` takes them.

    Returns
    -------
    MlflowRun

    Raises
    ------
    SealError
        The folder is incomplete or was edited after the run sealed it (nothing is logged).
    DataError
        A sealed document cannot be read as the run wrote it, or MLflow refused or could not be reached
        (the message names the tracking URI; an MLflow run left half-logged is marked FAILED).
    """
    folder = Path(folder)
    record = read_sealed_run(open_run(folder, key_file=key_file, protocol=protocol))
    own = {"verdict": record.verdict, "document_id": record.document_id, "run_folder": folder.name}
    all_tags = {**(tags or {}), **{f"sitecal.{key}": value for key, value in own.items() if value}}
    name = experiment or record.protocol_name or "sitecal"
    params, metrics, artifacts = record.params, record.metrics, record.artifacts
    try:
        with _mlflow_session():
            return _log(tracking_uri, name, run_name or folder.name, params, metrics, all_tags, artifacts)
    except SitecalError:
        raise
    except ImportError as exc:
        if _is_mlflow_missing(exc):
            raise DataError(f"{MLFLOW_MISSING}.") from None
        raise DataError(f"MLflow at {tracking_uri}: {exc}. Install what it names.") from exc
    except Exception as exc:  # MLflow's own errors, the network's and the file system's alike
        raise DataError(
            f"MLflow at {tracking_uri}: {type(exc).__name__}: {_first_line(exc)}. {_what_to_do(tracking_uri)}"
        ) from exc


def _log(
    uri: str,
    experiment: str,
    run_name: str,
    params: Mapping[str, str],
    metrics: Mapping[str, float],
    tags: Mapping[str, str],
    artifacts: Mapping[str, bytes],
) -> MlflowRun:
    """The MLflow calls, through the client (no global active run); a run left half-logged is FAILED."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is not None and found.lifecycle_stage != "active":
        raise DataError(
            f"MLflow at {uri}: the experiment '{experiment}' was deleted. Restore it in MLflow, or name "
            "another with report.mlflow.experiment."
        )
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    run = client.create_run(experiment_id, run_name=run_name, tags=dict(tags))
    run_id = run.info.run_id
    try:
        stamp = int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[Metric(key, value, stamp, 0) for key, value in metrics.items()],
            params=[Param(key, value) for key, value in params.items()],
        )
        with tempfile.TemporaryDirectory(prefix="sitecal-mlflow-") as staging:
            for name, data in artifacts.items():  # the bytes checked against the seal, not the folder's now
                path = Path(staging) / name
                path.write_bytes(data)
                client.log_artifact(run_id, str(path))
        client.set_terminated(run_id, "FINISHED")
    except BaseException as exc:
        try:
            client.set_terminated(run_id, "FAILED")
        except Exception:  # the store is what failed: the first error is the one to tell
            logger.debug("could not mark MLflow run %s FAILED", run_id, exc_info=True)
        exc.add_note(f"MLflow run {run_id} was left incomplete and marked FAILED.")
        raise
    return MlflowRun(
        tracking_uri=uri,
        experiment_id=str(experiment_id),
        run_id=run_id,
        n_params=len(params),
        n_metrics=len(metrics),
        artifacts=tuple(artifacts),
    )


def _what_to_do(uri: str) -> str:
    if uri.startswith("file:"):
        return "Check that this account may write to that folder (report.mlflow.tracking_uri)."
    return (
        "Check that the server is up and reachable from here, and MLflow's credentials "
        "(MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)."
    )


def _is_mlflow_missing(exc: ImportError) -> bool:
    """Whether ``exc`` says MLflow itself is not installed (not a module MLflow needs)."""
    return exc.name is None or exc.name == "mlflow" or exc.name.startswith("mlflow.")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


@contextmanager
def _mlflow_session() -> Iterator[None]:
    """MLflow's environment while sitecal calls it, its records and warnings routed to ``run.log`` only."""
    saved = {name: os.environ.get(name) for name in (*_FORCED_ENV, *_DEFAULT_ENV)}
    os.environ.update(_FORCED_ENV)
    for name, default in _DEFAULT_ENV.items():
        os.environ.setdefault(name, default)
    mlflow_logger = logging.getLogger("mlflow")
    kept = (mlflow_logger.handlers[:], mlflow_logger.level, mlflow_logger.propagate)
    relay = _Relay()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mlflow_logger.handlers = [relay]
            mlflow_logger.propagate = False
            mlflow_logger.setLevel(logging.WARNING)
            try:
                yield
            finally:
                for warning in caught:
                    logger.info("mlflow: %s", warning.message, extra={"run_log_only": True})
    finally:
        mlflow_logger.handlers, level, mlflow_logger.propagate = kept
        mlflow_logger.setLevel(level)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Relay(logging.Handler):
    """MLflow's log records, into sitecal's log (``run.log``), not onto the console."""

    def emit(self, record: logging.LogRecord) -> None:
        logger.info("mlflow: %s", record.getMessage(), extra={"run_log_only": True})
