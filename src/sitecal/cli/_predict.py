"""``sitecal predict``: scan and run the model, write the predictions file and stop.

The model runs in this process, or sharded on a Dask cluster (``--dask-workers``, ``--scheduler``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sitecal.errors import InputError

from ._exclusions import print_exclusion_rows
from ._exit import EXIT_PASS
from ._options import add_run_options
from ._protocol import load, refuse_if_not_ready

if TYPE_CHECKING:
    from sitecal.inference import Placement


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal predict``, the sharding options in their own group."""
    parser.add_argument("protocol", type=Path, help="protocol YAML file")
    parser.add_argument(
        "--output", type=Path, required=True, help="the predictions CSV to write (read by 'sitecal evaluate')"
    )
    add_run_options(parser)
    _add_shard_options(parser)


def _add_shard_options(parser: argparse.ArgumentParser) -> None:
    """``--dask-workers``, ``--scheduler`` and ``--shard-size``: where the model runs, in shards."""
    group = parser.add_argument_group(
        "sharded inference on Dask (same predictions file; see 'Network scale' in the README)"
    )
    group.add_argument(
        "--dask-workers",
        type=int,
        default=None,
        metavar="N",
        help="run the model on a Dask LocalCluster of N worker processes (with --device cuda: one per GPU)",
    )
    group.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run the model on the Dask cluster whose scheduler is at ADDRESS (e.g. tcp://host:8786)",
    )
    group.add_argument(
        "--shard-size",
        type=int,
        default=None,
        metavar="N",
        help="studies per Dask task (default 256, rounded up to a multiple of inputs.batch_size)",
    )


def predict_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Check the output file, the protocol and the cluster, then write the predictions file."""
    from sitecal.protocol import LoadedProtocol
    from sitecal.run import predict_protocol
    from sitecal.run.preflight import output_file_problem

    path: Path = args.protocol
    loaded = load(path, args)
    assert isinstance(loaded, LoadedProtocol)
    problem = output_file_problem(args.output, loaded, allow_anywhere=args.allow_output_anywhere)
    if problem:
        raise InputError(f"--output: {problem}")
    refuse_if_not_ready(path, loaded, args, verb="cannot predict")
    placement = _shard_placement(args)
    if placement is not None and placement.scheduler is not None:  # before the scan, not after it
        from sitecal.inference import scheduler_problem

        if problem := scheduler_problem(placement.scheduler):
            raise InputError(problem)
    result = predict_protocol(
        loaded,
        args.output,
        progress=not args.no_progress,
        workers=args.workers,
        device=args.device,
        placement=placement,
    )
    from sitecal.cohort import exclusion_counts

    print_exclusion_rows(exclusion_counts(result.exclusions), listed_in=result.exclusions_csv.name)
    print(f"Predicted: {result.n_predicted} studies")
    print(f"Predictions: {result.path}")
    return EXIT_PASS


def _shard_placement(args: argparse.Namespace) -> Placement | None:
    """Where ``--dask-workers``/``--scheduler``/``--shard-size`` send the model; ``None``: this process."""
    from sitecal.inference import DEFAULT_SHARD_SIZE, Placement

    if args.dask_workers is not None and args.scheduler is not None:
        raise InputError("give --dask-workers (a new cluster) or --scheduler (a running one), not both.")
    if args.dask_workers is None and args.scheduler is None:
        if args.shard_size is not None:
            raise InputError("--shard-size needs --dask-workers N or --scheduler ADDRESS.")
        return None
    size = DEFAULT_SHARD_SIZE if args.shard_size is None else args.shard_size
    return Placement(n_workers=args.dask_workers, scheduler=args.scheduler, shard_size=size)
