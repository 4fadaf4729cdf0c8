"""``sitecal report`` and ``sitecal send``: a finished run's report, rendered again or sent to the archive."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ._exit import EXIT_PASS
from ._options import add_key_option


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal report``."""
    parser.add_argument("run_dir", type=Path, help="a run folder (reports/<name>-<UTC time>)")
    add_key_option(parser)


def report_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Render the run folder's report again from its stored results, once its seal holds."""
    from sitecal.run.sealed import run_key
    from sitecal.run.stages import render_run

    folder: Path = args.run_dir
    pdf = render_run(folder, run_key(folder, key_file=args.key))  # verified before anything is rendered
    print(f"Report:  {pdf}")
    return EXIT_PASS


def add_send_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal send``."""
    parser.add_argument("run_dir", type=Path, help="a run folder (reports/<name>-<UTC time>)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--protocol",
        type=Path,
        default=None,
        help="take report.send_to from this protocol instead of the run's own protocol.yaml",
    )
    where.add_argument(
        "--to",
        metavar="ARCHIVE",
        default=None,
        help="send to this archive instead of report.send_to: a DICOMweb URL (https://host/dicom-web; "
        "http on loopback only) or dimse://AE_TITLE@host:port (no credentials: an archive that needs them "
        "is named in the protocol)",
    )
    add_key_option(parser)


def send_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Send the run folder's report.dcm to its archive (``--to``, or report.send_to); print the answer."""
    from sitecal.run import send_run

    folder: Path = args.run_dir
    record = send_run(folder, args.protocol, key_file=args.key, to=args.to)
    print(f"Sent:    {record['file']} to {record['to']} by {record['how']}: {record['answer']}")
    print(f"Record:  {folder / 'sent.json'}")
    return EXIT_PASS
