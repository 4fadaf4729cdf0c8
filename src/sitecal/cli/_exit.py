"""The exit codes of the ``sitecal`` command, one meaning each (listed in :mod:`sitecal.cli`)."""

from __future__ import annotations

EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM stopped
# A verdict's exit code: 'insufficient data' is no evidence either way, like an interval on the margin.
VERDICT_EXIT = {
    "pass": EXIT_PASS,
    "fail": EXIT_FAIL,
    "inconclusive": EXIT_INCONCLUSIVE,
    "insufficient data": EXIT_INCONCLUSIVE,
}
