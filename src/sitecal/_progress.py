r"""The console's progress bars: one line a stage, ending on one 100 % frame with one rate.

tqdm draws a frame whenever enough time has passed since the last, and again when the bar closes. The
update that reaches the total therefore often draws a 100 % frame, and closing draws a second one a
moment later with another rate; a terminal overwrites the first, but a log or a CI console (stderr not a
terminal) keeps both. :func:`progress_bar` is tqdm with two changes: the update that completes the bar
draws nothing (closing draws the one final frame), and the rate is the average over the whole stage
(``smoothing=0``), so the frames of a stage never disagree with its last.

>>> import io
>>> out = io.StringIO()
>>> with progress_bar(total=3, desc="Demo", unit="study", file=out, mininterval=0) as bar:
...     for _ in range(3):
...         _ = bar.update()
>>> sum("100%" in frame for frame in out.getvalue().split("\r"))
1
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from tqdm import tqdm

__all__ = ["progress_bar", "progress_over"]

T = TypeVar("T")


class _Bar(tqdm):  # type: ignore[misc]
    """tqdm whose completing update leaves the drawing to ``close``."""

    def update(self, n: float | None = 1) -> bool | None:
        step = 1 if n is None else n
        if not self.disable and self.total is not None and self.n < self.total <= self.n + step:
            self.n += step  # complete: ``close`` draws the one 100 % frame
            return None
        result: bool | None = super().update(n)
        return result


def progress_bar(*, total: int, desc: str, unit: str, disable: bool = False, **options: Any) -> Any:
    """A progress bar over ``total`` items (tqdm's manual form: ``update`` it, use it as a context).

    Parameters
    ----------
    total : int
        Items the stage has.
    desc, unit : str
        The stage's name and its item's (``"Inference"``, ``"study"``).
    disable : bool
        No bar at all (``--no-progress``, or a caller that shows its own).
    **options
        Further tqdm options (``initial``, ``delay``, ``file``, ``mininterval``).
    """
    return _Bar(total=total, desc=desc, unit=unit, disable=disable, smoothing=0, **options)


def progress_over(
    items: Sequence[T], *, desc: str, unit: str, disable: bool = False, **options: Any
) -> Iterator[T]:
    """Each of ``items`` in turn, counted on a :func:`progress_bar` once the caller's loop body is done."""
    with progress_bar(total=len(items), desc=desc, unit=unit, disable=disable, **options) as bar:
        for item in items:
            yield item
            bar.update()
