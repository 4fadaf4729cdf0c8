"""The table of subcommands, and the parser built from it.

Each row names a subcommand, its help (and, for some, a longer description), the function that adds its
arguments and the function that runs it. A subcommand's module imports what it runs only when it runs,
so that ``sitecal --help`` loads no torch, MONAI or pydicom.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sitecal import __version__

from ._apply import add_apply_arguments, apply_command
from ._check import add_check_arguments, check_command
from ._demo import add_demo_arguments, demo_command
from ._export import add_export_arguments, export_command
from ._monitor import add_monitor_arguments, monitor_command
from ._network_key import add_network_key_arguments, network_key_command
from ._plan import add_plan_arguments, plan_command
from ._predict import add_predict_arguments, predict_command
from ._report import add_report_arguments, add_send_arguments, report_command, send_command
from ._run import add_evaluate_arguments, add_run_arguments, run_command
from ._schema import add_schema_arguments, schema_command


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, its help line, how its arguments are added and how it runs.

    ``run`` takes the parsed arguments and the command line as given to :func:`sitecal.cli.main`
    (``None``: ``sys.argv``) and returns the exit code.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Sequence[str] | None], int]
    description: str | None = None


# In the order ``sitecal --help`` lists them.
COMMANDS = (
    Command(
        "run",
        "run a protocol and write a run folder with the validation report",
        add_run_arguments,
        run_command,
    ),
    Command(
        "network-key",
        "create a network's shared pseudonymisation key (privacy.network_key_file of every site)",
        add_network_key_arguments,
        network_key_command,
    ),
    Command(
        "check",
        "validate a protocol and everything a run needs (files, labels, model, device, output folder)",
        add_check_arguments,
        check_command,
    ),
    Command(
        "predict",
        "scan and run the model, write the predictions file (pseudonymised keys, logits) and stop",
        add_predict_arguments,
        predict_command,
    ),
    Command(
        "evaluate",
        "evaluate a predictions file (the model is not run) and write a run folder with the report",
        add_evaluate_arguments,
        run_command,
    ),
    Command(
        "report",
        "render a finished run folder's report again from its stored results (no recomputation)",
        add_report_arguments,
        report_command,
    ),
    Command(
        "send",
        "send a run folder's report.dcm to an archive (report.send_to, or --to) by STOW-RS or C-STORE",
        add_send_arguments,
        send_command,
    ),
    Command(
        "apply",
        "calibrate scores made elsewhere (a vendor's logits or probabilities) with a calibration.json",
        add_apply_arguments,
        apply_command,
    ),
    Command(
        "export",
        "write a run's model with its temperatures for deployment, checked on the run's studies",
        add_export_arguments,
        export_command,
        description=(
            "Write the run's model with its temperatures (the group an int64 input) as TorchScript, a "
            "torch.export program, ONNX or a MONAI bundle, with its group table, and check it on up to 32 "
            "of the run's evaluation studies read again: its probabilities must equal sitecal's calibrated "
            "ones to 1e-6 (ONNX: 1e-5, onnxruntime's float32 kernels round otherwise than PyTorch's)."
        ),
    ),
    Command(
        "plan",
        "how many evaluation studies a group needs for an 80%% chance to pass each criterion",
        add_plan_arguments,
        plan_command,
        description=(
            "Simulate, with sitecal's own bootstrap and acceptance rule, the chance that each acceptance "
            "criterion passes in a group of 50 to 1,600 evaluation studies if the model is calibrated: "
            "before data collection from an assumed prevalence and accuracy, after a run from its "
            "calibrated evaluation studies (--from-run). Prints one table per criterion."
        ),
    ),
    Command(
        "monitor",
        "after go-live: the deployed calibration over time, with alarms valid however often it is run",
        add_monitor_arguments,
        monitor_command,
        description=(
            "Read scores over time (data.predictions with monitoring.date_column, or DICOM studies from "
            "data.dicom_dir or data.source, dated by StudyDate, the validated model run here), apply the "
            "deployed calibration of a sealed validation run (monitoring.baseline), and judge each window "
            "and group with anytime-valid tests of the validation's margins. Exit 0: no alarm; 1: an alarm; "
            "2: bad input; 4: internal error. Every window is kept in a history database; a window already "
            "stored is not computed again unless its rows changed."
        ),
    ),
    Command(
        "schema",
        "print the JSON Schema of a document: evaluation, calibration, metrics, protocol, ...",
        add_schema_arguments,
        schema_command,
    ),
    # The demo's texts are written out here and in _demo.py: importing sitecal.demo for them would load
    # torch on every command. tests/demo/test_demo_command.py keeps the numbers equal to sitecal.demo's.
    Command(
        "demo",
        "generate a synthetic cohort and run the packaged demo protocol on it, in any folder",
        add_demo_arguments,
        demo_command,
        description=(
            "Copy the packaged demo protocol to sitecal-demo/demo.yaml (with --ct: "
            "sitecal-demo/demo-ct.yaml) in the working folder, generate the synthetic cohort it names "
            "beside it (sitecal-demo/radiographs/ or sitecal-demo/ct/), then run it; run folders go to "
            "reports/. A copy you have edited is never overwritten: run it with --protocol. Nothing is "
            "written inside the installed package."
        ),
    ),
)
COMMANDS_BY_NAME = {command.name: command for command in COMMANDS}
# The usage line lists the commands a site runs, then the network's key (made once for a whole network);
# the help lists them in the table's order. tests/cli/test_cli.py keeps the two lists the same commands.
COMMANDS_METAVAR = (
    "{run,check,predict,evaluate,report,send,apply,export,plan,monitor,schema,demo,network-key}"
)


def build_parser() -> argparse.ArgumentParser:
    """The ``sitecal`` parser: ``--version`` and one subparser per row of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="sitecal",
        description="Validate a model's calibration per site and scanner, from DICOM to a PDF report.",
    )
    parser.add_argument("--version", action="version", version=f"sitecal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar=COMMANDS_METAVAR)
    for command in COMMANDS:
        subparser = sub.add_parser(command.name, help=command.help, description=command.description)
        command.add_arguments(subparser)
    return parser
