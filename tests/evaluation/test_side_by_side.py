"""Analyses run side by side: results in order, the first failure raised, Ctrl-C stops at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from sitecal.evaluation._side_by_side import side_by_side


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_results_come_in_the_items_order_whatever_the_threads(workers: int) -> None:
    ticks: list[int] = []

    def slow_square(x: int) -> int:
        time.sleep(0.01 * (5 - x))  # later items finish first
        return x * x

    out = side_by_side(slow_square, [0, 1, 2, 3, 4], workers, lambda: ticks.append(1))
    assert out == [0, 1, 4, 9, 16] and len(ticks) == 5


def test_the_first_failed_item_s_error_is_raised() -> None:
    def check(x: int) -> int:
        if x in (1, 3):
            time.sleep(0.05 if x == 1 else 0.0)  # item 3 fails first in time
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 1"):
        side_by_side(check, [0, 1, 2, 3], 4)


def test_ctrl_c_ends_the_process_without_waiting_for_running_analyses() -> None:
    code = (
        "import signal, time\n"
        # as in a terminal: a test runner's worker may pass SIGINT on ignored to its children
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from sitecal.evaluation._side_by_side import side_by_side\n"
        "print('started', flush=True)\n"
        "try:\n"
        "    side_by_side(lambda x: time.sleep(60), [0, 1], 2)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
            time.sleep(1.0)
            start = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=30)
            assert out.strip() == "interrupted" and time.monotonic() - start < 10
        finally:
            proc.kill()
