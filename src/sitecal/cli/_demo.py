"""``sitecal demo``: a synthetic cohort generated beside the packaged demo protocol, then run.

``sitecal demo --monitor``: a year after go-live of the demo's validation run, monitored
(:mod:`sitecal.cli._demo_monitor`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ._exit import EXIT_PASS
from ._options import add_run_options
from ._run import run_protocol_file


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal demo``: the CT demo or a protocol of one's own, not both."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--ct",
        action="store_true",
        help="the CT demo (multi-series chest CT volumes) instead of the radiographs",
    )
    which.add_argument(
        "--protocol",
        type=Path,
        default=None,
        help="run your own copy of a demo protocol; its cohort goes to the folder above its data.dicom_dir",
    )
    which.add_argument(
        "--monitor",
        action="store_true",
        help="after the demo's validation run (made first if there is none): 12 months of scores, about "
        "150 studies a month per scanner, scanner 'FCR Demo CR' drifting from month 7 (its true "
        "temperature 2 times the deployed one), monitored with 'sitecal monitor'",
    )
    # Written out here: importing sitecal.demo for its numbers would load torch on every command.
    # tests/demo/test_demo_command.py keeps them equal to sitecal.demo's.
    parser.add_argument(
        "--studies",
        type=int,
        default=None,
        help="number of studies, at least 50 (default: 2000 radiographs, 600 CT studies)",
    )
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    parser.add_argument("--generate-only", action="store_true", help="generate the cohort, do not run")
    add_run_options(parser)


def demo_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Copy the demo protocol and generate its cohort; run it unless ``--generate-only``."""
    from sitecal.demo import prepare_demo

    if args.monitor:
        from ._demo_monitor import demo_monitor_command

        return demo_monitor_command(args, argv)
    prepared = prepare_demo(
        args.protocol,
        kind="ct" if args.ct else None,
        n_studies=args.studies,
        seed=args.seed,
        progress=not args.no_progress,
    )
    if args.generate_only:
        print(f"Demo cohort: {prepared.cohort_dir}")
        print(f"Protocol:    {prepared.protocol} (run it with 'sitecal run {prepared.protocol}')")
        return EXIT_PASS
    return run_protocol_file(prepared.protocol, args, argv)
