"""Train one of the bundled demo models on its reference scanner only, deterministically.

Run from the repository root::

    python examples/demo/train.py          # the 2-D radiograph CNN: about a minute on 2 CPU cores
    python examples/demo/train.py --ct     # the 3-D CT CNN: about 10 minutes on 2 CPU cores

It writes the weights (safetensors, no pickle) and a model card (``.json``) next to them, by default over
the files shipped in ``src/sitecal/demo/`` (``demo_cnn.*``, or ``ct/demo_ct.*`` with ``--ct``). With the
defaults, the same torch build and the same CPU kind, the weights come out byte-identical to the shipped
ones (``weights_sha256`` in the card); see ``examples/demo/README.md``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this script

import _ct
import _radiograph

__all__ = ["main"]

logger = logging.getLogger(__name__)

#: The package's source folder, where the shipped weights live (never an installed copy of sitecal).
PACKAGE_SOURCE = Path(__file__).resolve().parents[2] / "src" / "sitecal" / "demo"
DEFAULT_OUT = {
    "radiograph": PACKAGE_SOURCE / "demo_cnn.safetensors",
    "ct": PACKAGE_SOURCE / "ct" / "demo_ct.safetensors",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python examples/demo/train.py [--ct] [--out PATH] [--seed N] [--epochs N] ...``."""
    parser = argparse.ArgumentParser(
        prog="python examples/demo/train.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--ct", action="store_true", help="train the CT model instead of the radiograph one")
    parser.add_argument(
        "--out", type=Path, default=None, help="weights file to write (default: the shipped one)"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--n-val", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    kind = "ct" if args.ct else "radiograph"
    route = _ct if args.ct else _radiograph
    given = {
        name: value
        for name in ("seed", "epochs", "n_train", "n_val", "threads")
        if (value := getattr(args, name)) is not None
    }
    config = route.TrainingConfig(**given)
    result = route.train_model(config)
    weights, card = route.write_model(result, args.out or DEFAULT_OUT[kind])
    logger.info("Wrote %s and %s", weights, card)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
