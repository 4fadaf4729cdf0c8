"""Check a demo's central phenomenon on a freshly generated cohort, through the DICOM files.

Run from the repository root::

    python examples/demo/verify.py [--n-studies 2000] [--seed 2024] [--weights PATH]
    python examples/demo/verify.py --ct [--n-studies 600] [--seed 2024] [--weights PATH]

It generates a cohort in a temporary folder with the installed ``sitecal.demo`` generator, reads every
usable file with pydicom (for CT, each study's selected series, slices ordered by position), applies the
protocol's transforms, runs the bundled model (or ``--weights``), and prints per scanner: accuracy, mean
confidence and top-label ECE (15 equal-width bins), then, on a patient-level 50/50 split, the held-out
ECE before and after a temperature fitted on the other half.

The ECE and the temperature fit are this folder's own small functions (``_local_metrics.py``) on purpose:
an independent check of the demo data, not a use of :mod:`sitecal.metrics` or :mod:`sitecal.calibration`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this script

import _ct
import _radiograph
from _checks import format_table

from sitecal.demo import default_studies, generate_demo, load_demo_model
from sitecal.demo.ct import generate_ct_demo, load_demo_ct_model

__all__ = ["main"]

logger = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python examples/demo/verify.py [--ct] [--n-studies N] [--seed S] [--weights PATH]``."""
    parser = argparse.ArgumentParser(
        prog="python examples/demo/verify.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--ct", action="store_true", help="check the CT demo instead of the radiograph one")
    parser.add_argument(
        "--n-studies", type=int, default=None, help="default: 2000 radiographs, 600 CT studies"
    )
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--weights", type=Path, default=None, help="default: the bundled weights")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    n_studies = (
        default_studies("ct" if args.ct else "radiograph") if args.n_studies is None else args.n_studies
    )
    with tempfile.TemporaryDirectory() as tmp:
        if args.ct:
            ct_cohort = generate_ct_demo(Path(tmp), n_studies=n_studies, seed=args.seed)
            rows = _ct.check_cohort(ct_cohort, model=load_demo_ct_model(args.weights))
        else:
            cohort = generate_demo(Path(tmp), n_studies=n_studies, seed=args.seed)
            rows = _radiograph.check_cohort(cohort, model=load_demo_model(args.weights))
    logger.info("%s", format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
