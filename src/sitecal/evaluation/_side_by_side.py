"""Independent analyses run side by side on the cores, and stopped at once by Ctrl-C."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

__all__ = ["side_by_side"]

T = TypeVar("T")
R = TypeVar("R")


def side_by_side(
    func: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    on_done: Callable[[], None] | None = None,
) -> list[R]:
    """``[func(item) for item in items]``, computed by up to ``workers`` threads.

    Each call must depend on its item only (the analyses draw from their own seeded streams), so the
    results are the same whatever the threads. The threads are daemons: an interrupted run (Ctrl-C in
    the main thread, which waits here) exits at once instead of waiting for the analyses still running.
    If calls fail, no further call starts and the error of the first failed item (in ``items`` order)
    is raised. ``on_done`` is called in the main thread after each call ends (a progress bar).
    """
    n = len(items)
    if workers <= 1 or n <= 1:
        out = []
        for item in items:  # a loop over analyses, one after the other
            out.append(func(item))
            if on_done is not None:
                on_done()
        return out
    results: list[R | None] = [None] * n
    errors: list[BaseException | None] = [None] * n
    pending = list(range(n))
    lock = threading.Lock()
    finished: queue.Queue[int] = queue.Queue()

    def work() -> None:
        while True:  # a loop over the items this thread takes
            with lock:
                if not pending:
                    return
                i = pending.pop(0)
            try:
                results[i] = func(items[i])
            except BaseException as exc:  # handed to the main thread, which raises it
                errors[i] = exc
                with lock:
                    pending.clear()
            finally:
                finished.put(i)

    threads = [
        threading.Thread(target=work, name=f"sitecal-analysis-{k}", daemon=True)
        for k in range(min(workers, n))
    ]
    for thread in threads:
        thread.start()
    # wait in short slices, so that Ctrl-C reaches the main thread while the analyses run
    while any(thread.is_alive() for thread in threads) or not finished.empty():
        try:
            finished.get(timeout=0.5)
        except queue.Empty:
            continue
        if on_done is not None:
            on_done()
    failed = [e for e in errors if e is not None]
    if failed:
        raise failed[0]
    return cast(list[R], results)
