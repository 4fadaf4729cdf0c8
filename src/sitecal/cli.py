"""The ``sitecal`` command line: a thin layer over :mod:`sitecal.run` and the stages.

Exit codes, one meaning each: 0 every acceptance criterion passes; 1 a criterion fails or has
insufficient data; 2 bad input or usage (a message naming the file, field or tag; no traceback);
3 inconclusive (kept for verdicts whose intervals straddle a margin); 4 internal error (one line on the
console, the traceback in run.log); 130 interrupted. A crash is never reported as a FAIL.
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
from sitecal._scrub import ScrubFilter, scrub
from sitecal.errors import SitecalError

__all__ = ["main"]

EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
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

    check = sub.add_parser(
        "check",
        help="validate a protocol and everything a run needs (files, labels, model, device, output folder)",
    )
    check.add_argument("protocol", type=Path, help="protocol YAML file")
    _placement_options(check)

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
    _placement_options(parser)


def _placement_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="torch device for inference (default: %(default)s)")
    parser.add_argument(
        "--allow-output-anywhere",
        action="store_true",
        help="accept a report.output_dir outside the protocol's folder and the working folder",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sitecal`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    _configure_console_logging()
    try:
        if args.command == "check":
            return _check(args.protocol, args)
        if args.command == "demo":
            return _demo(args, argv)
        return _run(args.protocol, args, argv)
    except SitecalError as exc:
        print(scrub(f"sitecal: error: {exc}{_notes(exc)}"), file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("sitecal: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug, not bad input: never exit 1, which reads as a FAIL verdict
        where = _notes(exc) or _crash_log(exc)
        print(
            scrub(
                f"sitecal: internal error ({type(exc).__name__}: {_first_line(exc)}). This is a bug in "
                f"sitecal or a library it uses; nothing was judged.{where}"
            ),
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "no message"


def _notes(exc: BaseException) -> str:
    """The notes a run added to its exception (where its run.log is), as text for the console."""
    notes = getattr(exc, "__notes__", None) or []
    return "".join(f"\n  {note}" for note in notes)


def _crash_log(exc: BaseException) -> str:
    """Write the traceback of a failure outside any run folder to a private temporary file; say where."""
    import tempfile
    import traceback

    text = scrub("".join(traceback.format_exception(exc)))
    try:
        fd, name = tempfile.mkstemp(prefix="sitecal-error-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError:
        return ""
    return f"\n  The traceback is in {name}."


def _configure_console_logging() -> None:
    """Warnings and errors on stderr, scrubbed; the run log (INFO) is written by the run itself.

    Python warnings (a library's, e.g. pydicom quoting a header value) go through logging too, so that
    they are scrubbed like every other line instead of being printed as they are.
    """
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("sitecal: %(levelname)s: %(name)s: %(message)s"))
    handler.addFilter(ScrubFilter())
    handler.addFilter(lambda record: not getattr(record, "run_log_only", False))
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)
    # MONAI announces on every worker that an optional GPU decoder is absent; sitecal does not use it.
    logging.getLogger("monai.data.nvimgcodec_pydicom_plugin").setLevel(logging.ERROR)


def _check(path: Path, args: argparse.Namespace) -> int:
    from sitecal.protocol import load_protocol

    loaded = load_protocol(path)
    _source_date()  # a run would refuse a malformed SOURCE_DATE_EPOCH: so does check
    _refuse_if_not_ready(path, loaded, args, verb="the protocol is valid but")
    p = loaded.protocol
    print(
        f"{path}: valid protocol '{p.name}' (sha256 {loaded.sha256[:12]}); "
        f"{len(p.subgroups)} subgroups, calibration per {p.calibration.per or 'nothing (global)'}, "
        f"{len(p.acceptance)} acceptance criteria; labels, model ({len(p.model.class_names)} outputs), "
        f"device {args.device} and output folder checked."
    )
    return EXIT_PASS


def _refuse_if_not_ready(path: Path, loaded: object, args: argparse.Namespace, *, verb: str) -> None:
    """Raise :class:`_InputError` listing every problem :func:`sitecal.preflight.preflight` finds."""
    from sitecal.preflight import preflight

    outcome = preflight(
        loaded,  # type: ignore[arg-type]
        device=args.device,
        allow_output_anywhere=args.allow_output_anywhere,
    )
    for note in outcome.notes:
        print(f"sitecal: note: {note}", file=sys.stderr)
    if outcome.problems:
        raise _InputError(f"{path}: {verb}:\n" + "\n".join(f"  {p}" for p in outcome.problems))


def _run(path: Path, args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from sitecal.protocol import load_protocol
    from sitecal.run import run_protocol

    loaded = load_protocol(path)
    _refuse_if_not_ready(path, loaded, args, verb="cannot run")
    result = run_protocol(
        loaded,
        progress=not args.no_progress,
        command_line=["sitecal", *(argv if argv is not None else sys.argv[1:])],
        workers=args.workers,
        device=args.device,
        now=_source_date(),
    )
    _print_exclusions(result.evaluation)
    print(f"Verdict: {result.verdict.upper()}")
    print(f"Report:  {result.report_pdf}")
    if result.verdict == "pass":
        return EXIT_PASS
    if result.verdict == "inconclusive":
        return EXIT_INCONCLUSIVE
    return EXIT_FAIL


_UNITS = {"file": "files", "image": "images", "series": "series", "study": "studies", "label": "label rows"}


def _print_exclusions(evaluation: object) -> None:
    """One console line per exclusion reason (most frequent first), so that none goes unnoticed."""
    flow = evaluation.get("cohort_flow", {}) if isinstance(evaluation, dict) else {}
    rows = sorted(flow.get("exclusions") or [], key=lambda r: (-int(r["count"]), r["stage"], r["reason"]))
    if not rows:
        print("Excluded: nothing.")
        return
    total = sum(int(r["count"]) for r in rows)
    print(f"Excluded: {total} (see exclusions.csv):")
    for row in rows[:12]:
        unit = _UNITS.get(row.get("unit", ""), "items")
        print(f"  {int(row['count']):>6} {unit} at {row['stage']}: {row['reason']}")
    if len(rows) > 12:
        print(f"  ... and {len(rows) - 12} more reasons (exclusions.csv lists every one)")


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
