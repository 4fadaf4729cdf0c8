"""``sitecal export``: a run's model with its temperatures, written for deployment and checked."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ._exit import EXIT_PASS
from ._options import add_key_option


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal export``."""
    parser.add_argument("run_dir", type=Path, help="a run folder (reports/<name>-<UTC time>)")
    parser.add_argument(
        "--format",
        required=True,
        metavar="{torchscript,torch-export,onnx,monai-bundle}",
        help="onnx needs the extra: pip install 'sitecal[onnx]'",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="the file (a folder for monai-bundle) to write; default RUN_DIR/export/calibrated.<ext>",
    )
    parser.add_argument(
        "--protocol",
        type=Path,
        default=None,
        help="take the model and data from this protocol instead of the run's own protocol.yaml",
    )
    add_key_option(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def export_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Export the run's model; print where it went, its group table and how closely it was checked."""
    from sitecal.run.export import export_run

    done = export_run(
        args.run_dir,
        args.format,
        output=args.output,
        protocol=args.protocol,
        key_file=args.key,
        progress=not args.no_progress,
    )
    left = f"; {done.n_left_out} chosen could not be read again" if done.n_left_out else ""
    print(f"Exported: {done.path} ({done.format})")
    print(
        f"Groups:   {done.groups_file} ({done.n_groups_table} groups per {done.per or 'nothing'}; index "
        f"{done.n_groups_table} is the global fit)"
    )
    print(
        f"Checked:  {done.n_checked} evaluation studies of {done.n_groups} groups{left}: largest difference "
        f"from sitecal's calibrated probabilities {done.max_difference:.2g} (the eager model: "
        f"{done.max_model_difference:.2g}; tolerance {done.tolerance:g})"
    )
    return EXIT_PASS
