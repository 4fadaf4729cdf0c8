"""``sitecal monitor PROTOCOL``: scores over time, judged window by window against a sealed validation run.

1. The baseline (``monitoring.baseline``) is opened against its seal: its temperatures, its acceptance
   criteria (the margins), and its evaluation studies' confidences (the label-free reference).
2. The predictions file is read (scores, dates, labels where they have come, subgroup columns), or the
   DICOM studies are scanned and the validated model run on them (dated by StudyDate); keys are
   pseudonymised, dates cut into windows, and every score gets the deployed temperature of its group.
3. The history (``history.sqlite`` in the monitoring folder, or ``monitoring.database``) says which
   windows are new or changed; only those are computed, and written in one transaction.
4. ``monitoring.json`` is assembled from every stored window, the trend report drawn from it
   (``monitoring.pdf``, ``monitoring.html``, ``figures/``, and ``monitoring.dcm`` for the archive), and
   all sealed in a folder of its own, ``<monitoring.output_dir>/<name>-<UTC time>/``, with the protocol
   and ``run.log``; ``report.send_to`` with ``after_run`` sends ``monitoring.dcm`` as a run sends its
   report.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sitecal import __version__
from sitecal._io import write_text_atomic
from sitecal._progress import progress_over
from sitecal._seal import COMPLETE, mark_incomplete, write_seal
from sitecal._text import plural
from sitecal.errors import InputError
from sitecal.metrics.registry import ACCURACY
from sitecal.monitor import (
    OVERALL,
    GroupWindow,
    History,
    HistoryError,
    MonitorContext,
    WindowEntry,
    monitoring_document,
    test_family,
    window_result,
)
from sitecal.protocol import LoadedProtocol, MonitoringSettings
from sitecal.provenance import document_id
from sitecal.report import render_monitoring
from sitecal.report.dicom_pdf import write_report_dicom
from sitecal.results import (
    Criterion,
    MonitorBaseline,
    MonitoringDocument,
    ProtocolRef,
    write_document,
)
from sitecal.run._folder import attach_log, detach_log, new_run_folder
from sitecal.run._monitor_dicom import check_model
from sitecal.run._monitor_inputs import Baseline, Scores, open_baseline, read_scores
from sitecal.run._resolved import write_resolved
from sitecal.run._send import send_after_run
from sitecal.stats import BootstrapSpec

__all__ = ["MonitorResult", "monitor_protocol", "monitoring_problems"]

logger = logging.getLogger(__name__)

#: Bumped when a window's stored result changes form: stored windows are then computed again.
_RESULT_FORMAT = "sitecal monitor window 2"  # 2: fallback only in the calibration attribute


@dataclass(frozen=True)
class MonitorResult:
    """Where the monitor wrote its folder, and what it found."""

    folder: Path
    document: MonitoringDocument
    sent: dict[str, Any] | None = None  # the record of monitoring.dcm sent after the run (report.send_to)

    @property
    def alarmed(self) -> bool:
        """Whether any test alarmed."""
        return self.document.verdict == "alarm"


def _settings(loaded: LoadedProtocol) -> MonitoringSettings:
    settings = loaded.protocol.monitoring
    if settings is None:
        raise InputError(
            f"{loaded.path}: no monitoring section: name the validation run to monitor (monitoring.baseline) "
            "and the date column of the predictions file (monitoring.date_column)."
        )
    return settings


def _group_windows(scores: Scores, per: str | None) -> list[GroupWindow]:
    """Every (window, group) of the scores: overall and each group of each subgroup, in a fixed order.

    A group of the calibration attribute ``per`` without a temperature of its own is marked ``fallback``
    (calibrated by the global one); a group of another subgroup is not, whatever its studies' scanners.
    """
    out = []
    for window in np.unique(scores.windows):
        in_window = scores.windows == window
        targets = [(OVERALL, in_window)] + [
            ((attribute, str(g)), in_window & (values == g))
            for attribute, values in scores.attributes.items()
            for g in np.unique(values[in_window])
        ]
        for (attribute, group), mask in targets:
            out.append(
                GroupWindow(
                    window=str(window),
                    attribute=attribute,
                    group=group,
                    keys=scores.keys[mask],
                    logits=scores.logits[mask],
                    labels=scores.labels[mask],
                    patients=scores.patients[mask],
                    fallback=attribute == per and bool(scores.fallback[mask].any()),
                )
            )
    return out


def _data_sha256(rows: GroupWindow, baseline: Baseline) -> str:
    """What a stored window was computed from: its rows (keys, scores, labels) and the baseline."""
    keys = rows.keys
    order = np.argsort(keys, kind="stable")
    digest = hashlib.sha256(_RESULT_FORMAT.encode())
    digest.update(baseline.calibration_sha256.encode())
    digest.update("\n".join(keys[order]).encode())
    digest.update(np.ascontiguousarray(rows.logits[order]).tobytes())
    digest.update(np.ascontiguousarray(rows.labels[order]).tobytes())
    return digest.hexdigest()


def _baseline_groups(baseline: Baseline) -> dict[str, frozenset[str]]:
    """The groups the baseline saw, per attribute (its evaluation's groups)."""
    return {
        attribute: frozenset(row.group for row in rows)
        for attribute, rows in baseline.evaluation.subgroups.items()
    }


def _accuracy_margins(criteria: Sequence[Criterion]) -> dict[str, float]:
    """The highest accuracy margin (``above``, after calibration) of each scope."""
    out: dict[str, float] = {}
    for c in criteria:
        if (
            c.metric == ACCURACY.name
            and c.rule == "above"
            and c.stage == "after"
            and c.lower_margin is not None
        ):
            out[c.scope] = max(out.get(c.scope, c.lower_margin), c.lower_margin)
    return out


def _context(
    loaded: LoadedProtocol,
    settings: MonitoringSettings,
    baseline: Baseline,
    excluded: Mapping[str, int],
    started: datetime,
) -> MonitorContext:
    """The family of tests (fixed by the baseline) and what the document says besides the windows."""
    criteria = baseline.evaluation.acceptance
    per = baseline.per
    tested = {attribute: sorted(groups) for attribute, groups in _baseline_groups(baseline).items()}
    provenance = json.loads(baseline.seal.read_bytes("provenance.json"))
    created = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    inputs = {"protocol": loaded.sha256, "baseline_calibration": baseline.calibration_sha256}
    return MonitorContext(
        document_id=document_id(inputs, created_utc=created),
        created_utc=created,
        protocol=ProtocolRef(name=loaded.protocol.name, sha256=loaded.sha256),
        baseline=MonitorBaseline(
            run_folder=baseline.seal.folder.name,
            document_id=str(provenance.get("document_id", "")),
            calibration_sha256=baseline.calibration_sha256,
            per=per,
        ),
        window_kind=settings.window,
        alpha=settings.alpha,
        horizon=settings.horizon,
        tests=test_family(criteria, tested, alpha=settings.alpha, calibrated_by=per),
        known_groups=_baseline_groups(baseline),
        accuracy_margins=_accuracy_margins(criteria),
        excluded=excluded,
    )


def _history_location(settings: MonitoringSettings, root: Path) -> str:
    """Where the history is: the database URL, or ``history.sqlite`` in the monitoring folder."""
    return settings.database if settings.database is not None else str(root / "history.sqlite")


def _refuse_lost_labels(history: History, changed: Sequence[GroupWindow]) -> None:
    """Refuse rows that hold fewer labels than the history's window already did: nothing is overwritten.

    A window is computed again when its rows change, which is how late labels complete it; a file that
    has lost labels (exported again without them, or cut) would replace what was measured with less.
    """
    lost = []
    for rows in changed:
        stored = history.entry(rows.window, rows.attribute, rows.group)
        if stored is not None and int((rows.labels >= 0).sum()) < int(stored.result["n_labelled"]):
            lost.append(f"{rows.window} {rows.attribute}={rows.group}")
    if lost:
        shown = ", ".join(lost[:3]) + (", ..." if len(lost) > 3 else "")
        raise InputError(
            f"{history.where}: the scores now hold fewer labels than the history measured, in "
            f"{len(lost)} {plural(len(lost), 'window')} ({shown}): the file lost labels it had. Nothing "
            "was written; give the file with its labels, or a new monitoring.output_dir for a new history."
        )


def _update_history(
    history: History,
    windows: Sequence[GroupWindow],
    context: MonitorContext,
    baseline: Baseline,
    *,
    progress: bool,
) -> list[WindowEntry]:
    """Compute the new and changed windows, store them in one transaction; every stored window back."""
    hashes = {(w.window, w.attribute, w.group): _data_sha256(w, baseline) for w in windows}
    plan = history.plan([(*key, digest) for key, digest in hashes.items()])
    todo = {tuple(key) for key in plan.to_compute}
    _refuse_lost_labels(history, [w for w in windows if (w.window, w.attribute, w.group) in plan.changed])
    spec = BootstrapSpec(
        n_resamples=baseline.evaluation.bootstrap.n_resamples,
        level=0.95,
        seed=baseline.evaluation.bootstrap.seed,
    )
    computed = []
    for rows in progress_over(
        [w for w in windows if (w.window, w.attribute, w.group) in todo],
        desc="Windows",
        unit="window",
        disable=not progress,
    ):
        own = [t for t in context.tests if (t.attribute, t.group) == (rows.attribute, rows.group)]
        reference = baseline.reference.get((rows.attribute, rows.group), np.empty(0))
        result = window_result(rows, own, reference=reference, spec=spec)
        computed.append(
            WindowEntry(
                window=rows.window,
                attribute=rows.attribute,
                group=rows.group,
                data_sha256=hashes[(rows.window, rows.attribute, rows.group)],
                labelled=result["n_labelled"] > 0,
                result=result,
            )
        )
    if computed:
        history.write(computed)
    logger.info("history: %d windows computed, %d unchanged", len(computed), len(hashes) - len(computed))
    return history.entries()


def _monitored(
    loaded: LoadedProtocol,
    settings: MonitoringSettings,
    root: Path,
    *,
    key_file: Path | None,
    started: datetime,
    progress: bool,
) -> MonitoringDocument:
    """The baseline, the scores, the history brought up to date, and the document of every window."""
    baseline = open_baseline(loaded, settings, key_file)
    logger.info("baseline %s (its seal verified)", baseline.seal.folder.name)
    # a study is dated in the future by the clock, not by a fixed run time (SOURCE_DATE_EPOCH)
    scores = read_scores(loaded, settings, baseline, today=datetime.now(UTC).date(), progress=progress)
    logger.info("scores: %d studies, %d left out", scores.keys.size, sum(scores.excluded.values()))
    context = _context(loaded, settings, baseline, scores.excluded, started)
    windows = _group_windows(scores, baseline.per)
    password_file = None if settings.password_file is None else loaded.resolve(settings.password_file)
    with History.open(
        _history_location(settings, root),
        baseline_id=context.baseline.document_id,
        window_kind=settings.window,
        password_file=password_file,
    ) as history:
        entries = _update_history(history, windows, context, baseline, progress=progress)
    return monitoring_document(entries, context)


def monitor_protocol(
    loaded: LoadedProtocol,
    *,
    key_file: Path | None = None,
    progress: bool = True,
    now: datetime | None = None,
) -> MonitorResult:
    """Monitor the scores of ``loaded`` against its baseline; write and seal the monitoring folder.

    Parameters
    ----------
    loaded : LoadedProtocol
        A protocol with a ``monitoring`` section, and ``data.predictions`` or DICOM studies
        (``data.dicom_dir`` or ``data.source``) with the validated model.
    key_file : Path, optional
        The site key of the baseline, when it is not where the protocol says.
    progress : bool
        Show a progress bar over the windows computed.
    now : datetime, optional
        The run's time (default: now, UTC): its document ID, folder name and date. Study dates are
        checked against the clock, so a fixed time (``SOURCE_DATE_EPOCH``) refuses none that has passed.

    Raises
    ------
    InputError, DataError, SealError
        A protocol without monitoring, a baseline that is not a sealed run of this model, a predictions
        file with a date that is not one or lies in the future, a history of another baseline or schema:
        each named; nothing of the history is changed.
    """
    settings = _settings(loaded)
    started = (now or datetime.now(UTC)).astimezone(UTC)
    root = loaded.resolve(settings.output_dir)
    root.mkdir(parents=True, exist_ok=True)
    # the folder and its log first: a failure at any step leaves its reason in run.log, and the folder
    # says it is incomplete until its seal
    folder = new_run_folder(root, loaded.protocol.name, started)
    mark_incomplete(folder, "the monitor is under way, or stopped before it finished (run.log says how far)")
    handler = attach_log(folder / "run.log")
    try:
        logger.info(
            "sitecal %s, monitoring protocol %s (sha256 %s)",
            __version__,
            loaded.protocol.name,
            loaded.sha256[:12],
        )
        document = _monitored(loaded, settings, root, key_file=key_file, started=started, progress=progress)
        _write_folder(folder, loaded, document)
        logger.info("verdict: %s; folder sealed", document.verdict)
        sent = send_after_run(loaded, folder, name="monitoring.dcm")
    except KeyboardInterrupt:
        logger.error("the monitor was interrupted; nothing of the history was changed by an unfinished step")
        raise
    except Exception as exc:
        logger.error("the monitor failed: %s: %s", type(exc).__name__, exc)
        raise
    finally:
        detach_log(handler)
    return MonitorResult(folder=folder, document=document, sent=sent)


def _write_folder(folder: Path, loaded: LoadedProtocol, document: MonitoringDocument) -> None:
    """The monitoring folder's files, then its seal: it stands alone as a run folder does.

    ``monitoring.json``, the trend report (``monitoring.pdf``, ``monitoring.html``, ``figures/``), the
    report as a DICOM Encapsulated PDF for the archive (``monitoring.dcm``), and the protocol as read with
    where its paths were taken from (``protocol.yaml``, ``resolved.json``: ``sitecal send`` finds the
    key and the archive from them).
    """
    write_document(folder / "monitoring.json", document)
    artifacts = render_monitoring(document, folder, page_size=loaded.protocol.report.page_size)
    write_report_dicom(
        artifacts.pdf,
        folder / "monitoring.dcm",
        document_id=document.document_id,
        title=f"Calibration monitoring: {loaded.protocol.name}",
        created_utc=document.created_utc,
    )
    write_text_atomic(folder / "protocol.yaml", loaded.text)
    write_resolved(folder, loaded)
    logger.info("wrote %s, %s and monitoring.dcm", artifacts.pdf.name, artifacts.html.name)
    write_seal(folder, loaded.pseudonym_key(), state=COMPLETE)


def monitoring_problems(loaded: LoadedProtocol, *, key_file: Path | None = None) -> list[str]:
    """What ``sitecal monitor`` would refuse, found as it finds it (``sitecal check``); nothing is written.

    The baseline opened against its seal (its model's classes, its calibration method, its calibration
    attribute read by this protocol), every date of the predictions file (or, for DICOM studies, the model
    against the baseline's: the studies are read by the monitor itself), and an existing history (of this
    baseline and window kind, this schema version, not locked).
    """
    from sitecal.errors import SitecalError

    settings = _settings(loaded)
    try:
        baseline = open_baseline(loaded, settings, key_file)
        if loaded.predictions_path is None:  # DICOM studies: the model, not the long scan and inference
            check_model(loaded, baseline.model_sha256, baseline.seal.folder)
        else:
            read_scores(loaded, settings, baseline, today=datetime.now(UTC).date())
        context = _context(loaded, settings, baseline, {}, datetime.now(UTC))
        location = _history_location(settings, loaded.resolve(settings.output_dir))
        if settings.database is not None or Path(location).is_file():
            password_file = None if settings.password_file is None else loaded.resolve(settings.password_file)
            try:
                with History.open(
                    location,
                    baseline_id=context.baseline.document_id,
                    window_kind=settings.window,
                    create=False,
                    password_file=password_file,
                ):
                    pass
            except HistoryError as exc:
                if not str(exc).startswith("There is no monitoring history"):  # a first run creates it
                    raise
    except SitecalError as exc:
        return [f"monitoring: {exc}"]
    return []
