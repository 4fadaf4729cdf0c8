"""Options several subcommands share, each added by one function so that its wording is said once."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_key_option(parser: argparse.ArgumentParser) -> None:
    """``--key FILE``: the site key a finished run folder was sealed under."""
    parser.add_argument(
        "--key",
        type=Path,
        default=None,
        metavar="FILE",
        help=(
            "the site key the run was sealed under (default: the run protocol's privacy.key_file, else "
            ".sitecal-pseudonym-key beside the run folder)"
        ),
    )


def add_predictions_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--predictions FILE``: the model's outputs read from a file instead of running the model."""
    parser.add_argument("--predictions", type=Path, default=None, metavar="FILE", help=help_text)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command that scans a cohort: progress bars, scan processes and placement."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--workers", type=int, default=None, help="processes for the header scan")
    add_placement_options(parser)


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--allow-output-anywhere``: where the model runs and the run folder may go."""
    parser.add_argument("--device", default="cpu", help="torch device for inference (default: %(default)s)")
    parser.add_argument(
        "--allow-output-anywhere",
        action="store_true",
        help="accept a report.output_dir outside the protocol's folder and the working folder",
    )
