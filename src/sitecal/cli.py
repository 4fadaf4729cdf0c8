"""The ``sitecal`` command line: a thin layer over :mod:`sitecal.run` and the stages.

Exit codes: 0 every acceptance criterion passes; 1 a criterion fails or has insufficient data;
2 bad input or usage (one-line message, no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from sitecal import __version__
from sitecal.errors import SitecalError

__all__ = ["main"]

EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_DEMO_PROTOCOL = Path("protocols/demo.yaml")
_DEMO_STAMP = ".sitecal-demo.json"
_DEMO_STUDIES = 2000
_CT_DEMO_STUDIES = 600  # about 200 per scanner: with 300, a 46-study fit split gave one scanner T = 3.1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sitecal",
        description="Validate a model's calibration per site and scanner, from DICOM to a PDF report.",
    )
    parser.add_argument("--version", action="version", version=f"sitecal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,check,demo}")

    run = sub.add_parser("run", help="run a protocol and write a run folder with the validation report")
    run.add_argument("protocol", type=Path, help="protocol YAML file")
    _run_options(run)

    check = sub.add_parser("check", help="validate a protocol and the files it names, without running")
    check.add_argument("protocol", type=Path, help="protocol YAML file")

    demo = sub.add_parser(
        "demo",
        help="generate the synthetic demo cohort and run protocols/demo.yaml (or demo-ct.yaml) on it",
    )
    demo.add_argument(
        "--protocol", type=Path, default=DEFAULT_DEMO_PROTOCOL, help="demo protocol (default: %(default)s)"
    )
    demo.add_argument(
        "--studies",
        type=int,
        default=None,
        help=f"number of studies (default: {_DEMO_STUDIES} radiographs, {_CT_DEMO_STUDIES} CT studies)",
    )
    demo.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    demo.add_argument("--generate-only", action="store_true", help="generate the cohort, do not run")
    _run_options(demo)
    return parser


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--workers", type=int, default=None, help="processes for the header scan")
    parser.add_argument("--device", default="cpu", help="torch device for inference (default: %(default)s)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sitecal`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    _configure_console_logging()
    try:
        if args.command == "check":
            return _check(args.protocol)
        if args.command == "demo":
            return _demo(args, argv)
        return _run(args.protocol, args, argv)
    except SitecalError as exc:
        print(f"sitecal: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("sitecal: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _configure_console_logging() -> None:
    """Warnings and errors on stderr; the run log (INFO) is written by the run itself."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("sitecal: %(levelname)s: %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    # MONAI announces on every worker that an optional GPU decoder is absent; sitecal does not use it.
    logging.getLogger("monai.data.nvimgcodec_pydicom_plugin").setLevel(logging.ERROR)


def _check(path: Path) -> int:
    from sitecal.protocol import load_protocol

    loaded = load_protocol(path)
    problems = _missing_inputs(loaded)
    if problems:
        print(f"sitecal: error: {path}: the protocol is valid but:\n" + "\n".join(problems), file=sys.stderr)
        return EXIT_INPUT
    p = loaded.protocol
    print(
        f"{path}: valid protocol '{p.name}' (sha256 {loaded.sha256[:12]}); "
        f"{len(p.subgroups)} subgroups, calibration per {p.calibration.per or 'nothing (global)'}, "
        f"{len(p.acceptance)} acceptance criteria."
    )
    return EXIT_PASS


def _missing_inputs(loaded: object) -> list[str]:
    from sitecal.cohort.mapping import read_mapping
    from sitecal.inference import build_transforms
    from sitecal.protocol import LoadedProtocol

    assert isinstance(loaded, LoadedProtocol)
    problems = []
    if not loaded.dicom_dir.is_dir():
        problems.append(f"  data.dicom_dir: folder not found: {loaded.dicom_dir}")
    if not loaded.labels_path.is_file():
        problems.append(f"  data.labels: file not found: {loaded.labels_path}")
    if not loaded.model_path.exists():
        problems.append(f"  model.path: file not found: {loaded.model_path}")
    for name, subgroup in loaded.protocol.subgroups.items():
        if subgroup.mapping is not None:
            try:
                read_mapping(loaded.resolve(subgroup.mapping), field=f"subgroups.{name}.mapping")
            except SitecalError as exc:
                problems.append(f"  subgroups.{name}.mapping: {exc}")
    try:
        build_transforms(loaded.protocol.inputs.transforms, load=False)
    except SitecalError as exc:
        problems.append(f"  {exc}")
    return problems


def _run(path: Path, args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from sitecal.protocol import load_protocol
    from sitecal.run import run_protocol

    loaded = load_protocol(path)
    problems = _missing_inputs(loaded)
    if problems:
        raise _InputError(f"{path}: cannot run:\n" + "\n".join(problems))
    result = run_protocol(
        loaded,
        progress=not args.no_progress,
        command_line=["sitecal", *(argv if argv is not None else sys.argv[1:])],
        workers=args.workers,
        device=args.device,
        now=_source_date(),
    )
    print(f"Verdict: {result.verdict.upper()}")
    print(f"Report:  {result.report_pdf}")
    return EXIT_PASS if result.verdict == "pass" else EXIT_FAIL


class _InputError(SitecalError, ValueError):
    """Inputs named by a valid protocol are missing."""


def _demo(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from sitecal.protocol import load_protocol

    if not args.protocol.is_file():
        raise _InputError(
            f"{args.protocol}: demo protocol not found. Run 'sitecal demo' from the repository root, "
            "or pass --protocol PATH/TO/demo.yaml."
        )
    loaded = load_protocol(args.protocol)
    ct = loaded.protocol.inputs.kind == "volume"
    n_studies = args.studies if args.studies is not None else (_CT_DEMO_STUDIES if ct else _DEMO_STUDIES)
    if n_studies < 50:
        raise _InputError(f"--studies must be at least 50. Got {n_studies}.")
    out_dir = loaded.dicom_dir.parent
    if loaded.labels_path != out_dir / "labels.csv":
        raise _InputError(
            f"{args.protocol}: for the demo, data.labels must be labels.csv beside data.dicom_dir "
            f"({out_dir / 'labels.csv'})."
        )
    _ensure_demo_data(
        out_dir,
        n_studies=n_studies,
        seed=args.seed,
        progress=not args.no_progress,
        ct=ct,
    )
    if args.generate_only:
        print(f"Demo cohort: {out_dir}")
        return EXIT_PASS
    return _run(args.protocol, args, argv)


def _ensure_demo_data(out_dir: Path, *, n_studies: int, seed: int, progress: bool, ct: bool = False) -> None:
    """Generate the demo cohort unless the same one (kind, size, seed, version) is already there.

    ``ct``: the CT volume cohort (for a volume protocol) instead of the radiographs.
    """
    import shutil

    stamp = {"n_studies": n_studies, "seed": seed, "sitecal": __version__, **({"kind": "ct"} if ct else {})}
    stamp_path = out_dir / _DEMO_STAMP
    if stamp_path.is_file():
        try:
            if json.loads(stamp_path.read_text()) == stamp:
                return
        except (OSError, ValueError):
            pass
    if out_dir.exists() and any(out_dir.iterdir()):
        if not stamp_path.is_file():
            raise _InputError(
                f"{out_dir}: exists and was not made by 'sitecal demo'; refusing to overwrite it. "
                "Point the demo protocol's data paths at an empty folder."
            )
        stamp_path.unlink()
        for child in ("dicom", "labels.csv", "manifest.json"):
            target = out_dir / child
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    if ct:
        from sitecal.demo.ct import generate_ct_demo

        generate_ct_demo(out_dir, n_studies=n_studies, seed=seed, progress=progress)
    else:
        from sitecal.demo import generate_demo

        generate_demo(out_dir, n_studies=n_studies, seed=seed, progress=progress)
    stamp_path.write_text(json.dumps(stamp) + "\n")


def _source_date() -> datetime | None:
    """The run time from ``SOURCE_DATE_EPOCH`` (reproducible-builds convention), else ``None`` (now).

    With it set, two runs of the same protocol on the same data give the same report, date included.
    """
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value is None or not value.strip():
        return None
    try:
        return datetime.fromtimestamp(int(value), UTC)
    except (ValueError, OverflowError, OSError):
        raise _InputError(
            f"SOURCE_DATE_EPOCH={value!r}: not a number of seconds since 1970-01-01 UTC. Unset it or fix it."
        ) from None


if __name__ == "__main__":
    raise SystemExit(main())
