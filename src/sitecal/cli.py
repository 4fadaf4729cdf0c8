"""The ``sitecal`` command line: a thin layer over :mod:`sitecal.run` and the stages.

Exit codes, one meaning each: 0 every acceptance criterion passes; 1 a criterion fails (an interval
lies wholly beyond its margin); 2 bad input or usage (a message naming the file, field or tag; no
traceback); 3 inconclusive (no criterion fails, but an interval straddles its margin or a group is too
small to judge: more studies are needed to decide); 4 internal error (one line on the console, the
traceback in run.log); 130 interrupted (Ctrl-C), 143 terminated (SIGTERM): the run folder is then
marked incomplete and its run.log says so. A crash is never reported as a FAIL.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sitecal import __version__
from sitecal._scrub import ScrubFilter, scrub
from sitecal.errors import SitecalError, Terminated

if TYPE_CHECKING:
    from sitecal.inference import Placement

__all__ = ["main"]

EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM stopped
# A verdict's exit code: 'insufficient data' is no evidence either way, like an interval on the margin.
_VERDICT_EXIT = {
    "pass": EXIT_PASS,
    "fail": EXIT_FAIL,
    "inconclusive": EXIT_INCONCLUSIVE,
    "insufficient data": EXIT_INCONCLUSIVE,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sitecal",
        description="Validate a model's calibration per site and scanner, from DICOM to a PDF report.",
    )
    parser.add_argument("--version", action="version", version=f"sitecal {__version__}")
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{run,check,predict,evaluate,report,send,apply,export,plan,demo,network-key}",
    )

    run = sub.add_parser("run", help="run a protocol and write a run folder with the validation report")
    run.add_argument("protocol", type=Path, help="protocol YAML file")
    _run_options(run)

    network_key = sub.add_parser(
        "network-key",
        help="create a network's shared pseudonymisation key (privacy.network_key_file of every site)",
    )
    network_key.add_argument("file", type=Path, help="where to write it (mode 0600); never overwritten")

    check = sub.add_parser(
        "check",
        help="validate a protocol and everything a run needs (files, labels, model, device, output folder)",
    )
    check.add_argument("protocol", type=Path, help="protocol YAML file")
    _predictions_option(check, "check the protocol as 'sitecal evaluate --predictions FILE' would run it")
    _placement_options(check)

    predict = sub.add_parser(
        "predict",
        help="scan and run the model, write the predictions file (pseudonymised keys, logits) and stop",
    )
    predict.add_argument("protocol", type=Path, help="protocol YAML file")
    predict.add_argument(
        "--output", type=Path, required=True, help="the predictions CSV to write (read by 'sitecal evaluate')"
    )
    _run_options(predict)
    _shard_options(predict)

    evaluate = sub.add_parser(
        "evaluate",
        help="evaluate a predictions file (the model is not run) and write a run folder with the report",
    )
    evaluate.add_argument("protocol", type=Path, help="protocol YAML file")
    _predictions_option(evaluate, "the model's outputs per study; overrides data.predictions")
    _run_options(evaluate)

    report = sub.add_parser(
        "report",
        help="render a finished run folder's report again from its stored results (no recomputation)",
    )
    report.add_argument("run_dir", type=Path, help="a run folder (reports/<name>-<UTC time>)")
    _key_option(report)

    send = sub.add_parser(
        "send",
        help="send a run folder's report.dcm to the archive of report.send_to (STOW-RS or C-STORE)",
    )
    send.add_argument("run_dir", type=Path, help="a run folder (reports/<name>-<UTC time>)")
    send.add_argument(
        "--protocol",
        type=Path,
        default=None,
        help="take report.send_to from this protocol instead of the run's own protocol.yaml",
    )
    _key_option(send)

    apply = sub.add_parser(
        "apply",
        help="calibrate scores made elsewhere (a vendor's logits or probabilities) with a calibration.json",
    )
    apply.add_argument("calibration", type=Path, help="a run's calibration.json")
    apply.add_argument("scores", type=Path, help="CSV or Parquet: logit:<class> or prob:<class> columns")
    apply.add_argument(
        "--group-column",
        default=None,
        help="the column of group values (default: the subgroup the temperatures were fitted per)",
    )
    apply.add_argument(
        "--output", type=Path, default=None, help="where to write (default: <scores>-calibrated.csv)"
    )
    apply.add_argument("--force", action="store_true", help="replace the output file if it exists")
    _key_option(apply)
    apply.add_argument(
        "--unverified",
        action="store_true",
        help=(
            "use a calibration.json whose run folder cannot be verified here (no site key at hand, or the "
            "file outside its sealed run folder); the output records that it was not verified"
        ),
    )

    export = sub.add_parser(
        "export",
        help="write a run's model with its temperatures for deployment, checked on the run's studies",
        description=(
            "Write the run's model with its temperatures (the group an int64 input) as TorchScript, a "
            "torch.export program, ONNX or a MONAI bundle, with its group table, and check it on up to 32 "
            "of the run's evaluation studies read again: its probabilities must equal sitecal's calibrated "
            "ones to 1e-6 (ONNX: 1e-5, onnxruntime's float32 kernels round otherwise than PyTorch's)."
        ),
    )
    export.add_argument("run_dir", type=Path, help="a run folder (reports/<name>-<UTC time>)")
    export.add_argument(
        "--format",
        required=True,
        metavar="{torchscript,torch-export,onnx,monai-bundle}",
        help="onnx needs the extra: pip install 'sitecal[onnx]'",
    )
    export.add_argument(
        "--output",
        type=Path,
        default=None,
        help="the file (a folder for monai-bundle) to write; default RUN_DIR/export/calibrated.<ext>",
    )
    export.add_argument(
        "--protocol",
        type=Path,
        default=None,
        help="take the model and data from this protocol instead of the run's own protocol.yaml",
    )
    _key_option(export)
    export.add_argument("--no-progress", action="store_true", help="no progress bars")

    plan = sub.add_parser(
        "plan",
        help="how many evaluation studies a group needs for an 80%% chance to pass each criterion",
        description=(
            "Simulate, with sitecal's own bootstrap and acceptance rule, the chance that each acceptance "
            "criterion passes in a group of 50 to 1,600 evaluation studies if the model is calibrated: "
            "before data collection from an assumed prevalence and accuracy, after a run from its "
            "calibrated evaluation studies (--from-run). Prints one table per criterion."
        ),
    )
    plan.add_argument("protocol", type=Path, help="protocol YAML file (its criteria, bins and level)")
    plan.add_argument(
        "--prevalence",
        default=None,
        metavar="SHARES",
        help="share of each class in the protocol's class order, e.g. 0.6,0.25,0.15 (before data)",
    )
    plan.add_argument("--accuracy", type=float, default=None, help="expected accuracy, e.g. 0.75")
    plan.add_argument(
        "--from-run",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="plan from a finished run folder",
    )
    _key_option(plan)
    plan.add_argument(
        "--simulations", type=int, default=200, help="simulated groups per size (default: %(default)s)"
    )
    plan.add_argument(
        "--sizes",
        default=None,
        metavar="N,N,...",
        help="group sizes to simulate (default: 50,100,200,300,400,600,800,1200,1600)",
    )
    plan.add_argument("--no-progress", action="store_true", help="no progress bar")

    # The demo's texts are written out here: importing sitecal.demo for them would load torch on every
    # command. tests/demo/test_demo_command.py keeps the numbers equal to sitecal.demo's.
    demo = sub.add_parser(
        "demo",
        help="generate a synthetic cohort and run the packaged demo protocol on it, in any folder",
        description=(
            "Copy the packaged demo protocol to sitecal-demo/demo.yaml (with --ct: "
            "sitecal-demo/demo-ct.yaml) in the working folder, generate the synthetic cohort it names "
            "beside it (sitecal-demo/radiographs/ or sitecal-demo/ct/), then run it; run folders go to "
            "reports/. A copy you have edited is never overwritten: run it with --protocol. Nothing is "
            "written inside the installed package."
        ),
    )
    which = demo.add_mutually_exclusive_group()
    which.add_argument(
        "--ct",
        action="store_true",
        help="the CT demo (multi-series chest CT volumes) instead of the radiographs",
    )
    which.add_argument(
        "--protocol",
        type=Path,
        default=None,
        help="run your own copy of a demo protocol; its cohort goes to the folder above its data.dicom_dir",
    )
    demo.add_argument(
        "--studies",
        type=int,
        default=None,
        help="number of studies, at least 50 (default: 2000 radiographs, 600 CT studies)",
    )
    demo.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    demo.add_argument("--generate-only", action="store_true", help="generate the cohort, do not run")
    _run_options(demo)
    return parser


def _key_option(parser: argparse.ArgumentParser) -> None:
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


def _predictions_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--predictions", type=Path, default=None, metavar="FILE", help=help_text)


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--workers", type=int, default=None, help="processes for the header scan")
    _placement_options(parser)


def _shard_options(parser: argparse.ArgumentParser) -> None:
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
    previous = _terminate_as_interrupt()
    try:
        return _dispatch(args, argv)
    finally:
        _restore_sigterm(previous)


def _dispatch(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    try:
        if args.command == "check":
            return _check(args.protocol, args)
        if args.command == "demo":
            return _demo(args, argv)
        if args.command == "predict":
            return _predict(args.protocol, args)
        if args.command == "report":
            return _report(args.run_dir, args.key)
        if args.command == "plan":
            return _plan(args)
        if args.command == "send":
            return _send(args.run_dir, args.protocol, args.key)
        if args.command == "apply":
            return _apply(args)
        if args.command == "export":
            return _export(args)
        if args.command == "network-key":
            return _network_key(args.file)
        return _run(args.protocol, args, argv)
    except SitecalError as exc:
        print(scrub(f"sitecal: error: {exc}{_notes(exc)}"), file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"sitecal: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
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


def _terminate_as_interrupt() -> object:
    """Handle SIGTERM (a scheduler's or a service manager's stop) as Ctrl-C; the handler it replaces.

    The run folder is then marked incomplete and run.log says so, instead of the process vanishing
    mid-write.
    """
    import signal

    def stop(signum: int, frame: object) -> None:
        raise Terminated

    try:
        return signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (main() called from a thread): leave the default
        return None


def _restore_sigterm(previous: object) -> None:
    import signal

    if previous is not None:
        signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]


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


def _load(path: Path, args: argparse.Namespace) -> object:
    """The protocol, reading the model's outputs from ``--predictions`` when it is given."""
    from sitecal.protocol import load_protocol

    loaded = load_protocol(path)
    predictions = getattr(args, "predictions", None)
    if predictions is not None:
        return loaded.with_predictions(predictions)
    if args.command == "evaluate" and loaded.protocol.data.predictions is None:
        raise _InputError(
            f"{path}: 'sitecal evaluate' reads the model's outputs from a file: pass --predictions FILE, or "
            "set data.predictions in the protocol. To run the model here, use 'sitecal run'."
        )
    return loaded


def _check(path: Path, args: argparse.Namespace) -> int:
    from sitecal.protocol import LoadedProtocol

    loaded = _load(path, args)
    assert isinstance(loaded, LoadedProtocol)
    _source_date()  # a run would refuse a malformed SOURCE_DATE_EPOCH: so does check
    _refuse_if_not_ready(path, loaded, args, verb="the protocol is valid but")
    p = loaded.protocol
    inputs = (
        f"labels, model ({len(p.model.class_names)} outputs), device {args.device}"
        if loaded.predictions_path is None
        else "labels, predictions file (the model is not run)"
    )
    print(
        f"{path}: valid protocol '{p.name}' (sha256 {loaded.sha256[:12]}); "
        f"{len(p.subgroups)} subgroups, calibration per {p.calibration.per or 'nothing (global)'}, "
        f"{len(p.acceptance)} acceptance criteria; {inputs} and output folder checked."
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


def _predict(path: Path, args: argparse.Namespace) -> int:
    from sitecal.preflight import output_file_problem
    from sitecal.protocol import LoadedProtocol
    from sitecal.run import predict_protocol

    loaded = _load(path, args)
    assert isinstance(loaded, LoadedProtocol)
    problem = output_file_problem(args.output, loaded, allow_anywhere=args.allow_output_anywhere)
    if problem:
        raise _InputError(f"--output: {problem}")
    _refuse_if_not_ready(path, loaded, args, verb="cannot predict")
    placement = _shard_placement(args)
    if placement is not None and placement.scheduler is not None:  # before the scan, not after it
        from sitecal.inference import scheduler_problem

        if problem := scheduler_problem(placement.scheduler):
            raise _InputError(problem)
    result = predict_protocol(
        loaded,
        args.output,
        progress=not args.no_progress,
        workers=args.workers,
        device=args.device,
        placement=placement,
    )
    from sitecal.cohort import exclusion_counts

    _print_exclusion_rows(exclusion_counts(result.exclusions), listed_in=result.exclusions_csv.name)
    print(f"Predicted: {result.n_predicted} studies")
    print(f"Predictions: {result.path}")
    return EXIT_PASS


def _network_key(path: Path) -> int:
    from sitecal._pseudonym import create_network_key

    create_network_key(path)
    print(f"Network key: {path} (mode 0600). Give each site a copy through a channel the network trusts;")
    print("each site's protocol names its copy in privacy.network_key_file.")
    return EXIT_PASS


def _shard_placement(args: argparse.Namespace) -> Placement | None:
    """Where ``--dask-workers``/``--scheduler``/``--shard-size`` send the model; ``None``: this process."""
    from sitecal.inference import DEFAULT_SHARD_SIZE, Placement

    if args.dask_workers is not None and args.scheduler is not None:
        raise _InputError("give --dask-workers (a new cluster) or --scheduler (a running one), not both.")
    if args.dask_workers is None and args.scheduler is None:
        if args.shard_size is not None:
            raise _InputError("--shard-size needs --dask-workers N or --scheduler ADDRESS.")
        return None
    size = DEFAULT_SHARD_SIZE if args.shard_size is None else args.shard_size
    return Placement(n_workers=args.dask_workers, scheduler=args.scheduler, shard_size=size)


def _plan(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from sitecal.planning import parse_sizes, plan_criteria, plan_models, plan_table
    from sitecal.protocol import load_protocol

    protocol = load_protocol(args.protocol).protocol
    if args.simulations < 20:
        raise _InputError(f"--simulations {args.simulations}: give at least 20 (200 for a plan to rely on).")
    models = plan_models(
        protocol,
        from_run=args.from_run,
        prevalence=args.prevalence,
        accuracy=args.accuracy,
        key_file=args.key,
    )
    sizes = parse_sizes(args.sizes)
    with tqdm(total=1, desc="Simulating", unit="size", disable=args.no_progress) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        plans = plan_criteria(
            protocol, models, sizes=sizes, n_simulations=args.simulations, progress=progress
        )
    print(plan_table(protocol, models, plans))
    return EXIT_PASS


def _report(folder: Path, key_file: Path | None) -> int:
    from sitecal.sealed_run import run_key
    from sitecal.stages import render_run

    pdf = render_run(folder, run_key(folder, key_file=key_file))  # verified before anything is rendered
    print(f"Report:  {pdf}")
    return EXIT_PASS


def _apply(args: argparse.Namespace) -> int:
    from sitecal.apply import apply_calibration_file

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


def _export(args: argparse.Namespace) -> int:
    from sitecal.export_run import export_run

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


def _send(folder: Path, protocol: Path | None, key_file: Path | None) -> int:
    from sitecal.run import send_run

    record = send_run(folder, protocol, key_file=key_file)
    print(f"Sent:    report.dcm to {record['to']} by {record['how']}: {record['answer']}")
    print(f"Record:  {folder / 'sent.json'}")
    return EXIT_PASS


def _run(path: Path, args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from sitecal.protocol import LoadedProtocol
    from sitecal.run import run_protocol

    loaded = _load(path, args)
    assert isinstance(loaded, LoadedProtocol)
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
    if result.sent is not None:
        print(f"Sent:    report.dcm to {result.sent['to']} by {result.sent['how']}: {result.sent['answer']}")
    return _VERDICT_EXIT[result.verdict]


_UNITS = {
    "file": "files",
    "image": "images",
    "series": "series",
    "study": "studies",
    "label": "label rows",
    "prediction": "prediction rows",
}


def _print_exclusions(evaluation: object) -> None:
    """One console line per exclusion reason (most frequent first), so that none goes unnoticed."""
    flow = evaluation.get("cohort_flow", {}) if isinstance(evaluation, dict) else {}
    _print_exclusion_rows(flow.get("exclusions") or [])


def _print_exclusion_rows(found: Sequence[dict[str, object]], *, listed_in: str = "exclusions.csv") -> None:
    rows = sorted(found, key=lambda r: (-int(str(r["count"])), str(r["stage"]), str(r["reason"])))
    if not rows:
        print("Excluded: nothing.")
        return
    total = sum(int(str(r["count"])) for r in rows)
    print(f"Excluded: {total} (see {listed_in}):")
    for row in rows[:12]:
        unit = _UNITS.get(str(row.get("unit", "")), "items")
        print(f"  {int(str(row['count'])):>6} {unit} at {row['stage']}: {row['reason']}")
    if len(rows) > 12:
        print(f"  ... and {len(rows) - 12} more reasons ({listed_in} lists every one)")


class _InputError(SitecalError, ValueError):
    """Inputs named by a valid protocol are missing."""


def _demo(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from sitecal.demo import prepare_demo

    prepared = prepare_demo(
        args.protocol,
        kind="ct" if args.ct else None,
        n_studies=args.studies,
        seed=args.seed,
        progress=not args.no_progress,
    )
    if args.generate_only:
        print(f"Demo cohort: {prepared.cohort_dir}")
        print(f"Protocol:    {prepared.protocol} (run it with 'sitecal run {prepared.protocol}')")
        return EXIT_PASS
    return _run(prepared.protocol, args, argv)


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
