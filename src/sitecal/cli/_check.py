"""``sitecal check``: the protocol and everything a run needs, checked without running."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from sitecal._text import plural

from ._exit import EXIT_PASS
from ._options import add_placement_options, add_predictions_option
from ._protocol import load, refuse_if_not_ready, source_date


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal check``."""
    parser.add_argument("protocol", type=Path, help="protocol YAML file")
    add_predictions_option(parser, "check the protocol as 'sitecal evaluate --predictions FILE' would run it")
    add_placement_options(parser)


def check_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Load the protocol and run the preflight a run would; print a summary of what was checked."""
    from sitecal.protocol import LoadedProtocol

    path: Path = args.protocol
    loaded = load(path, args)
    assert isinstance(loaded, LoadedProtocol)
    source_date()  # a run would refuse a malformed SOURCE_DATE_EPOCH: so does check
    refuse_if_not_ready(path, loaded, args, verb="the protocol is valid but")
    p = loaded.protocol
    inputs = (
        f"labels, model ({len(p.model.class_names)} outputs), device {args.device}"
        if loaded.predictions_path is None
        else "labels, predictions file (the model is not run)"
    )
    if p.monitoring is not None:  # sitecal monitor: the baseline gives the calibration and the criteria
        what = f"monitoring against {p.monitoring.baseline} (its seal, its calibration and its criteria)"
    else:
        what = (
            f"calibration per {p.calibration.per or 'nothing (global)'}, "
            f"{len(p.acceptance)} {plural(len(p.acceptance), 'acceptance criterion', 'acceptance criteria')}"
        )
    subgroups = f"{len(p.subgroups)} {plural(len(p.subgroups), 'subgroup')}"
    print(
        f"{path}: valid protocol '{p.name}' (sha256 {loaded.sha256[:12]}); "
        f"{subgroups}, {what}; {inputs} and output folder checked."
    )
    return EXIT_PASS
