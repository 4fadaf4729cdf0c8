"""``sitecal network-key``: a network's shared pseudonymisation key, written once."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ._exit import EXIT_PASS


def add_network_key_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sitecal network-key``."""
    parser.add_argument("file", type=Path, help="where to write it (mode 0600); never overwritten")


def network_key_command(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Write a new network key to ``args.file``; say how the sites get their copies."""
    from sitecal._pseudonym import create_network_key

    path: Path = args.file
    create_network_key(path)
    print(f"Network key: {path} (mode 0600). Give each site a copy through a channel the network trusts;")
    print("each site's protocol names its copy in privacy.network_key_file.")
    return EXIT_PASS
