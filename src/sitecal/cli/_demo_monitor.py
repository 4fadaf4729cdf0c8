"""``sitecal demo --monitor``: a year after go-live, monitored against the demo's validation run.

1. The baseline is the newest ``demo-*`` run folder of the packaged demo protocol that opens against its
   seal (:func:`find_demo_run`); ``sitecal demo`` makes one first when there is none.
2. Its evaluation studies' logits and scanners (``predictions.csv``, ``cohort.csv``) and its deployed
   temperatures (``calibration.json``) are read through the seal, never from the folder unverified.
3. :func:`sitecal.demo.monitoring.after_go_live` writes
   ``sitecal-demo/monitoring/predictions-after-go-live.csv``, and ``sitecal-demo/demo-monitor.yaml``
   monitors it against the baseline; ``sitecal monitor`` runs it.

The months are the twelve before the validation run's month, not the twelve after it: the monitor
refuses study dates in the future (they are typing errors in real data), and a clock set forward would
seal its folder under a false time and leave ``sitecal monitor sitecal-demo/demo-monitor.yaml`` refused
when run by hand. Anchored to the run's date (not today's), the files stay the same on every run.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sitecal._io import write_text_atomic
from sitecal.errors import DataError, OutputError, SitecalError

__all__ = ["MONITOR_PROTOCOL", "PREDICTIONS_FILE", "demo_monitor_command", "find_demo_run", "monitor_demo"]

logger = logging.getLogger(__name__)

#: The monitoring protocol ``sitecal demo --monitor`` writes in the demo folder.
MONITOR_PROTOCOL = "demo-monitor.yaml"
#: The scores after go-live, relative to the demo folder.
PREDICTIONS_FILE = Path("monitoring") / "predictions-after-go-live.csv"
#: The first line of a monitoring protocol this command wrote (one without it is never overwritten).
_HEADER = "# Written by 'sitecal demo --monitor', and again on every run of it: edit a copy."
#: Bound on a table read back from the baseline (the default demo's are well under a megabyte).
_MAX_TABLE_BYTES = 256 << 20


def demo_monitor_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """``sitecal demo --monitor``: the demo's validation run (made first if there is none), then a year."""
    from sitecal.demo import DEMO_FOLDER, demo_protocol_path, prepare_demo
    from sitecal.protocol import load_protocol

    from ._exit import EXIT_INPUT, EXIT_INTERNAL
    from ._run import run_protocol_file

    if args.generate_only:
        raise DataError("--monitor runs the monitor: leave out --generate-only.")
    packaged = demo_protocol_path().read_bytes()
    copy = DEMO_FOLDER / demo_protocol_path().name
    run = find_demo_run(load_protocol(copy).output_root, packaged) if copy.is_file() else None
    if run is None:
        print("No sealed run of the demo protocol yet: running the demo first, as 'sitecal demo' does.")
        prepared = prepare_demo(n_studies=args.studies, seed=args.seed, progress=not args.no_progress)
        code = run_protocol_file(prepared.protocol, args, argv)
        if code in {EXIT_INPUT, EXIT_INTERNAL}:
            return code
        run = find_demo_run(load_protocol(prepared.protocol).output_root, packaged)
        if run is None:
            raise DataError(
                f"{copy}: the demo ran but left no sealed run folder of the demo protocol; see its run.log."
            )
    print(f"Baseline:  {run} (the newest sealed run of the demo protocol)")
    return monitor_demo(
        run,
        home=DEMO_FOLDER,
        key_file=load_protocol(copy).key_file,
        seed=args.seed,
        progress=not args.no_progress,
    )


def find_demo_run(reports: Path, protocol_text: bytes) -> Path | None:
    """The newest ``demo-*`` folder of ``reports`` that opens against its seal and ran ``protocol_text``.

    Folders that do not open (incomplete, unsealed, edited, another key) or ran another protocol are
    passed over, each said in the log.
    """
    from sitecal.run.sealed import open_run

    if not reports.is_dir():
        return None
    for folder in sorted((p for p in reports.glob("demo-*") if p.is_dir()), reverse=True):
        try:
            seal = open_run(folder)
            ran = seal.read_bytes("protocol.yaml")
        except SitecalError as exc:
            logger.info("Not a baseline for the monitoring demo: %s (%s)", folder, exc)
            continue
        if ran == protocol_text:
            return folder
        logger.info("Not a baseline for the monitoring demo: %s ran another protocol", folder)
    return None


def monitor_demo(
    baseline: Path,
    *,
    home: Path,
    key_file: Path,
    drifting: str | None = None,
    seed: int = 0,
    progress: bool = True,
) -> int:
    """Generate the year after go-live of ``baseline``, write its protocol in ``home``, monitor it.

    Parameters
    ----------
    baseline : Path
        A sealed run folder of a protocol calibrated per scanner (``calibration.per``).
    home : Path
        The demo folder: ``demo-monitor.yaml`` and ``monitoring/`` go there.
    key_file : Path
        The site key the baseline was sealed under (the monitoring folder is sealed under it too).
    drifting : str, optional
        The scanner that drifts; default :data:`sitecal.demo.monitoring.DRIFTING_SCANNER`.
    seed : int, default 0
        Seed of the scores and labels.
    progress : bool, default True
        Progress bars.

    Returns
    -------
    int
        The monitor's exit code: 0 no alarm, 1 an alarm.
    """
    from sitecal.demo.monitoring import DRIFTING_SCANNER, MonitorScenario, after_go_live, months_before
    from sitecal.run.sealed import open_run

    from ._monitor import monitor_command

    seal = open_run(baseline, key_file=key_file)
    calibration = json.loads(_bounded(seal, "calibration.json"))
    per = calibration.get("per")
    class_names = [str(c) for c in calibration.get("class_names", [])]
    if not per or not class_names:
        raise DataError(
            f"{baseline / 'calibration.json'}: not calibrated per scanner (calibration.per); the monitoring "
            "demo needs a run of the demo protocol."
        )
    temperatures = {str(g): float(v["temperature"]) for g, v in calibration.get("groups", {}).items()}
    logits, scanners = _evaluation_scores(seal, per, class_names)
    provenance = json.loads(_bounded(seal, "provenance.json"))
    ran = dt.datetime.fromisoformat(str(provenance["created_utc"]).replace("Z", "+00:00")).date()
    scenario = MonitorScenario(
        first_month=months_before(ran, 12), drifting=drifting or DRIFTING_SCANNER, seed=seed
    )
    text = after_go_live(
        logits,
        scanners,
        temperatures,
        class_names=class_names,
        scenario=scenario,
        scanner_column=per,
        progress=progress,
    )
    predictions = home / PREDICTIONS_FILE
    predictions.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(predictions, text)
    protocol = _write_protocol(
        home,
        seal_protocol=_bounded(seal, "protocol.yaml"),
        baseline=baseline,
        per=per,
        class_names=class_names,
        key_file=key_file,
    )
    last = scenario.month(scenario.months - 1)
    drift_month = scenario.month(scenario.drift_from - 1)
    print(
        f"After go-live: {predictions} ({text.count(chr(10)) - 1} studies, {scenario.first_month:%Y-%m} "
        f"to {last:%Y-%m}, about {scenario.per_month} a month per {per})"
    )
    print(
        f"Planted:   {per} {scenario.drifting!r} drifts from {drift_month:%Y-%m} on: its true temperature "
        f"{scenario.drift:g} times the deployed one (over-confident, a calibration slope of "
        f"{1 / scenario.drift:g}); every other {per} stays calibrated"
    )
    print(f"Protocol:  {protocol} (run it again with 'sitecal monitor {protocol}')")
    return monitor_command(
        argparse.Namespace(protocol=protocol, key=key_file, no_progress=not progress), None
    )


def _bounded(seal: Any, name: str) -> bytes:
    data: bytes = seal.read_bytes(name)
    if len(data) > _MAX_TABLE_BYTES:
        raise DataError(f"{seal.folder / name}: {len(data)} bytes, more than a demo run writes.")
    return data


def _table(seal: Any, name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(_bounded(seal, name).decode("utf-8-sig"))))


def _evaluation_scores(
    seal: Any, per: str, class_names: Sequence[str]
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], list[str]]:
    """The run's evaluation studies' logits (before calibration) and each one's group of ``per``."""
    cohort = {row["study_key"]: row for row in _table(seal, "cohort.csv")}
    columns = [f"logit:{c}" for c in class_names]
    logits, groups = [], []
    for row in _table(seal, "predictions.csv"):
        study = cohort.get(row.get("study_key", ""))
        if study is None or study.get("split") == "fit":
            continue  # a temperature's own fitting studies are not what the validation judged
        try:
            logits.append([float(row[c]) for c in columns])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"{seal.folder / 'predictions.csv'}: a row without its {columns} ({exc})."
            ) from exc
        groups.append(study.get(per, ""))
    if not logits:
        raise DataError(f"{seal.folder}: no evaluation study to resample.")
    return np.asarray(logits, dtype=np.float64), groups


def _write_protocol(
    home: Path, *, seal_protocol: bytes, baseline: Path, per: str, class_names: Sequence[str], key_file: Path
) -> Path:
    """``demo-monitor.yaml``: the baseline's model and classes, the scanner column, the monitoring section."""
    ran = yaml.safe_load(seal_protocol.decode("utf-8")) or {}
    model = ran.get("model", {}) if isinstance(ran, dict) else {}
    target = home / MONITOR_PROTOCOL
    if target.exists() and not (target.is_file() and target.read_text(encoding="utf-8").startswith(_HEADER)):
        raise OutputError(
            f"{target}: exists and was not written by 'sitecal demo --monitor'; refusing to overwrite it. "
            "Move it away, or run from another folder."
        )
    document = {
        "name": "demo-monitor",
        "intended_use": "The demo model after go-live: its calibration watched month by month against "
        f"its validation run {baseline.name}, on scores generated by 'sitecal demo --monitor'.",
        "model": {"name": str(model.get("name", "demo model")), "class_names": list(class_names)},
        "data": {
            "predictions": PREDICTIONS_FILE.as_posix(),
            "key": "AccessionNumber",
            "key_column": "study",
            "patient_column": "patient",
            "label_column": "label",
        },
        "subgroups": {per: {"column": per}},
        # the validation's, as it ran (the monitor applies the baseline's fitted temperatures)
        "calibration": ran.get("calibration", {"per": per}) if isinstance(ran, dict) else {"per": per},
        "privacy": {"key_file": _relative(key_file, home)},
        "monitoring": {
            "baseline": _relative(baseline, home),
            "window": "month",
            "date_column": "study_date",
            # one history per baseline: a history refuses windows judged against another one
            "output_dir": (Path("monitoring") / baseline.name).as_posix(),
        },
    }
    text = _HEADER + "\n" + yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    write_text_atomic(target, text)
    return target


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), Path(start).resolve())).as_posix()
