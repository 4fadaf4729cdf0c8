"""``sitecal apply``: a run's calibration applied to scores made elsewhere."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ._exit import EXIT_PASS
from ._options import add_key_option


def add_apply_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal apply``."""
    parser.add_argument("calibration", type=Path, help="a run's calibration.json")
    parser.add_argument("scores", type=Path, help="CSV or Parquet: logit:<class> or prob:<class> columns")
    parser.add_argument(
        "--group-column",
        default=None,
        help="the column of group values (default: the subgroup the temperatures were fitted per)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="where to write (default: <scores>-calibrated.csv)"
    )
    parser.add_argument("--force", action="store_true", help="replace the output file if it exists")
    add_key_option(parser)
    parser.add_argument(
        "--unverified",
        action="store_true",
        help=(
            "use a calibration.json whose run folder cannot be verified here (no site key at hand, or the "
            "file outside its sealed run folder); the output records that it was not verified"
        ),
    )


def apply_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Calibrate the scores file with the calibration.json; print how many rows were calibrated."""
    from sitecal.run.apply import apply_calibration_file

    output = args.output or args.scores.with_name(f"{args.scores.stem}-calibrated.csv")
    done = apply_calibration_file(
        args.calibration,
        args.scores,
        output,
        group_column=args.group_column,
        force=args.force,
        key_file=args.key,
        unverified=args.unverified,
    )
    if not done.verified:
        print(
            "sitecal: warning: the calibration was used unverified (--unverified): its run folder's seal was "
            "not checked; the output's calibration_check column says so.",
            file=sys.stderr,
        )
    left = f"; {len(done.bad_rows)} rows left out (scores that cannot be used)" if done.bad_rows else ""
    print(
        f"Calibrated: {done.n_calibrated} of {done.n_rows} rows ({done.n_global} with the global fit){left}"
    )
    print(f"Written: {done.output}")
    return EXIT_PASS
