"""``sitecal monitor PROTOCOL``: the deployed model's calibration over time, against its validation run."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ._exit import EXIT_FAIL, EXIT_PASS
from ._options import add_key_option

#: How each alert reads on the console (the report words them in full).
_ALERT_WORDS = {
    "alarm": "ALARM",
    "new_group": "a group not seen before",
    "unseen_group": "no temperature of its own: calibrated by the global one",
    "score_shift": "confidences shifted from the baseline's",
    "accuracy_estimate": "expected accuracy below the margin",
}


def add_monitor_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal monitor``."""
    parser.add_argument("protocol", type=Path, help="a protocol with a monitoring section")
    add_key_option(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def monitor_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Monitor; print the alerts (alarms first) and where the folder is; exit 1 on an alarm."""
    from sitecal.protocol import load_protocol
    from sitecal.run.monitoring import monitor_protocol

    from ._protocol import source_date

    loaded = load_protocol(args.protocol)
    # SOURCE_DATE_EPOCH fixes the run's time (its document ID and folder name), as for sitecal run
    result = monitor_protocol(loaded, key_file=args.key, progress=not args.no_progress, now=source_date())
    document = result.document
    windows = sorted({w.window for w in document.windows})
    span = f"{windows[0]} to {windows[-1]}" if windows else "no window"
    print(f"Monitored: {len(windows)} {document.window_kind} windows ({span}), {len(document.tests)} tests")
    for alert in document.alerts:
        where = f"{alert.window}  {alert.attribute}={alert.group}"
        detail = f"  {alert.test}" if alert.test else ""
        print(f"  {_ALERT_WORDS[alert.kind]}: {where}{detail}")
    print(f"Verdict:   {'ALARM' if result.alarmed else 'no alarm'}")
    print(f"Report:    {result.folder / 'monitoring.pdf'}")
    print(f"Folder:    {result.folder}")
    return EXIT_FAIL if result.alarmed else EXIT_PASS
