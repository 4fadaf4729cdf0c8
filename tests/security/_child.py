"""``sitecal`` in a child process that reports its own peak memory.

The peak of a process started from pytest cannot be read from ``os.wait4``'s ``ru_maxrss``: Linux carries
the memory high-water mark of the image a process replaced at ``exec`` into its ``ru_maxrss``, so a child
forked from a pytest worker holding 1 GiB reports at least 1 GiB whatever it did (seen in the full suite).
Its ``VmHWM`` starts again at ``exec`` (a new address space), so the child writes that, when ``main``
returns, to the file named by its first argument: run ``[sys.executable, "-c", SITECAL_MAIN, peak_file,
*args]`` and read it with :func:`peak_mib`.
"""

from __future__ import annotations

from pathlib import Path

SITECAL_MAIN = """
import re, sys
from pathlib import Path
from sitecal.cli import main
code = main(sys.argv[2:])
status = Path("/proc/self/status").read_text()
Path(sys.argv[1]).write_text(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1))
sys.exit(code)
"""


def peak_mib(peak_file: Path) -> float:
    """The child's peak resident memory in MiB (NaN when it did not get to write it)."""
    return int(peak_file.read_text()) / 1024 if peak_file.is_file() else float("nan")
