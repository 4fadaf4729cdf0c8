"""``sitecal run`` and ``sitecal evaluate``: a protocol run end to end, into a run folder and its report.

``evaluate`` is ``run`` with the model's outputs read from a predictions file; ``sitecal demo`` ends
with the same run (:func:`run_protocol_file`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ._exclusions import print_exclusions
from ._exit import VERDICT_EXIT
from ._options import add_predictions_option, add_run_options
from ._protocol import load, refuse_if_not_ready, source_date


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal run``."""
    parser.add_argument("protocol", type=Path, help="protocol YAML file")
    add_run_options(parser)


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal evaluate``: those of ``run`` and ``--predictions``."""
    parser.add_argument("protocol", type=Path, help="protocol YAML file")
    add_predictions_option(parser, "the model's outputs per study; overrides data.predictions")
    add_run_options(parser)


def run_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Run (or evaluate) the protocol ``args.protocol``; the exit code of its verdict."""
    return run_protocol_file(args.protocol, args, argv)


def run_protocol_file(path: Path, args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Run the protocol at ``path`` once the preflight finds nothing; print its verdict and report."""
    from sitecal.protocol import LoadedProtocol
    from sitecal.run import run_protocol

    loaded = load(path, args)
    assert isinstance(loaded, LoadedProtocol)
    refuse_if_not_ready(path, loaded, args, verb="cannot run")
    result = run_protocol(
        loaded,
        progress=not args.no_progress,
        command_line=["sitecal", *(argv if argv is not None else sys.argv[1:])],
        workers=args.workers,
        device=args.device,
        now=source_date(),
    )
    print_exclusions(result.evaluation)
    print(f"Verdict: {result.verdict.upper()}")
    print(f"Report:  {result.report_pdf}")
    if result.sent is not None:
        print(f"Sent:    report.dcm to {result.sent['to']} by {result.sent['how']}: {result.sent['answer']}")
    return VERDICT_EXIT[result.verdict]
