"""Logging on Dask workers as on the command line: scrubbed, library warnings through logging, quiet MONAI.

A worker process is started by Dask, not by ``sitecal``'s console entry point, so the console set-up
(:func:`sitecal.cli.main`) does not reach it. :class:`QuietWorkerLogs`, registered as a worker plugin
before any task is sent, does the same there: every handler of the worker's loggers scrubs identifiers
(:class:`sitecal._scrub.ScrubFilter`), Python warnings go through logging, and MONAI's notice that an
optional GPU decoder is absent (printed on every import) is silenced. This module stays light (no torch
or MONAI): it is imported on the worker before a task's own modules are.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed import WorkerPlugin

from sitecal._scrub import ScrubFilter

__all__ = ["QuietWorkerLogs", "quiet_logs"]

#: Loggers whose handlers get the scrubbing filter (Dask's own, and the root).
_LOGGERS = ("", "distributed", "dask")


def quiet_logs() -> None:
    """Scrub every handler of the worker's loggers and route warnings through logging."""
    logging.getLogger("monai.data.nvimgcodec_pydicom_plugin").setLevel(logging.ERROR)
    logging.captureWarnings(True)
    for name in _LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, ScrubFilter) for f in handler.filters):
                handler.addFilter(ScrubFilter())


class QuietWorkerLogs(WorkerPlugin):
    """A worker plugin running :func:`quiet_logs` on every worker, the ones started later included."""

    name = "sitecal-quiet-logs"
    idempotent = True

    def setup(self, worker: Any) -> None:
        """Called by Dask when the plugin is registered and on every worker that joins afterwards."""
        quiet_logs()
