"""``sitecal plan``: how many evaluation studies a group needs, by simulating the acceptance rule."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from sitecal.errors import InputError

from ._exit import EXIT_PASS
from ._options import add_key_option


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal plan``."""
    parser.add_argument(
        "protocol",
        type=Path,
        nargs="?",
        default=None,
        help="protocol YAML file (its criteria, bins and level); with --from-run, default: the run's own",
    )
    parser.add_argument(
        "--prevalence",
        default=None,
        metavar="SHARES",
        help="share of each class in the protocol's class order, e.g. 0.6,0.25,0.15 (before data)",
    )
    parser.add_argument("--accuracy", type=float, default=None, help="expected accuracy, e.g. 0.75")
    parser.add_argument(
        "--from-run",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="plan from a finished run folder",
    )
    add_key_option(parser)
    parser.add_argument(
        "--simulations", type=int, default=200, help="simulated groups per size (default: %(default)s)"
    )
    parser.add_argument(
        "--sizes",
        default=None,
        metavar="N,N,...",
        help="group sizes to simulate (default: 50,100,200,300,400,600,800,1200,1600)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def plan_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Simulate each criterion at each group size; print one table per criterion."""
    from sitecal._progress import progress_bar
    from sitecal.protocol import load_protocol
    from sitecal.run.planning import parse_sizes, plan_criteria, plan_models, plan_table, stored_protocol

    if args.protocol is not None:
        protocol = load_protocol(args.protocol).protocol
    elif args.from_run is not None:
        protocol = stored_protocol(args.from_run, key_file=args.key)
    else:
        raise InputError(
            "give the protocol file (plan before data), or --from-run RUN_DIR (plan with the run's own)."
        )
    if args.simulations < 20:
        raise InputError(f"--simulations {args.simulations}: give at least 20 (200 for a plan to rely on).")
    models = plan_models(
        protocol,
        from_run=args.from_run,
        prevalence=args.prevalence,
        accuracy=args.accuracy,
        key_file=args.key,
    )
    sizes = parse_sizes(args.sizes)
    with progress_bar(total=1, desc="Simulating", unit="size", disable=args.no_progress) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        plans = plan_criteria(
            protocol, models, sizes=sizes, n_simulations=args.simulations, progress=progress
        )
    print(plan_table(protocol, models, plans))
    return EXIT_PASS
