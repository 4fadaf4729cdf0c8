"""What the command does around every subcommand: the console's log, SIGTERM, and the words for a crash."""

from __future__ import annotations

import logging
import os

from sitecal._scrub import ScrubFilter, scrub
from sitecal.errors import Terminated


def configure_console_logging() -> logging.Handler:
    """Warnings and errors on stderr, scrubbed; the run log (INFO) is written by the run itself.

    Python warnings (a library's, e.g. pydicom quoting a header value) go through logging too, so that
    they are scrubbed like every other line instead of being printed as they are. Returns the console's
    handler, which the command removes when it returns (a notebook or a test calling ``main`` again
    gets one console, not one more per call, and none bound to a stream closed since).
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
    return handler


def terminate_as_interrupt() -> object:
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


def restore_sigterm(previous: object) -> None:
    """Put back the SIGTERM handler :func:`terminate_as_interrupt` replaced (none: nothing to do)."""
    import signal

    if previous is not None:
        signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, at most 300 characters, for a one-line report."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "no message"


def notes(exc: BaseException) -> str:
    """The notes a run added to its exception (where its run.log is), as text for the console."""
    found = getattr(exc, "__notes__", None) or []
    return "".join(f"\n  {note}" for note in found)


def crash_log(exc: BaseException) -> str:
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
