"""The ``sitecal`` command line: a thin layer over :mod:`sitecal.run` and the stages.

Exit codes, one meaning each: 0 every acceptance criterion passes; 1 a criterion fails (an interval
lies wholly beyond its margin); 2 bad input or usage (a message naming the file, field or tag; no
traceback); 3 inconclusive (no criterion fails, but an interval straddles its margin or a group is too
small to judge: more studies are needed to decide); 4 internal error (one line on the console, the
traceback in run.log); 130 interrupted (Ctrl-C), 143 terminated (SIGTERM): the run folder is then
marked incomplete and its run.log says so. A crash is never reported as a FAIL.

Each subcommand is a row of the table in ``_commands.py`` (its name, help, arguments and the function
that runs it), in a small module of its own; :func:`main` parses, then runs the row the command names.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from sitecal._scrub import scrub
from sitecal.errors import SitecalError, Terminated

from ._commands import COMMANDS_BY_NAME, build_parser
from ._console import (
    configure_console_logging,
    crash_log,
    first_line,
    notes,
    restore_sigterm,
    terminate_as_interrupt,
)
from ._exit import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sitecal`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    console = configure_console_logging()
    previous = terminate_as_interrupt()
    try:
        return _dispatch(args, argv)
    finally:
        restore_sigterm(previous)
        logging.getLogger().removeHandler(console)


def _dispatch(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Run the subcommand ``args.command``; a failure becomes one console line and its exit code."""
    try:
        return COMMANDS_BY_NAME[args.command].run(args, argv)
    except SitecalError as exc:
        print(scrub(f"sitecal: error: {exc}{notes(exc)}"), file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"sitecal: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except Exception as exc:  # a bug, not bad input: never exit 1, which reads as a FAIL verdict
        where = notes(exc) or crash_log(exc)
        print(
            scrub(
                f"sitecal: internal error ({type(exc).__name__}: {first_line(exc)}). This is a bug in "
                f"sitecal or a library it uses; nothing was judged.{where}"
            ),
            file=sys.stderr,
        )
        return EXIT_INTERNAL
