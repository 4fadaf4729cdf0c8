"""One 100 % frame a stage: the update that completes a bar draws nothing, closing draws the last frame."""

from __future__ import annotations

import io
import time

from tqdm import tqdm

from sitecal._progress import progress_bar, progress_over


def _frames(text: str) -> list[str]:
    return [frame.strip() for frame in text.split("\r") if frame.strip()]


def _run(make: object, steps: list[int]) -> list[str]:
    out = io.StringIO()
    with make(total=sum(steps), desc="Stage", unit="study", file=out, mininterval=0) as bar:  # type: ignore[operator]
        for step in steps:
            time.sleep(0.002)
            bar.update(step)
    return _frames(out.getvalue())


def test_a_completed_bar_shows_100_percent_once_where_tqdm_shows_it_twice() -> None:
    assert sum("100%" in f for f in _run(tqdm, [1, 1, 1])) == 2  # what the bar mends
    frames = _run(progress_bar, [1, 1, 1])
    assert sum("100%" in f for f in frames) == 1
    assert "3/3" in frames[-1]
    assert sum("100%" in f for f in _run(progress_bar, [2, 5])) == 1  # an update past the total too


def test_a_bar_left_unfinished_ends_on_its_count_and_a_disabled_one_writes_nothing() -> None:
    out = io.StringIO()
    with progress_bar(total=4, desc="Stage", unit="study", file=out, mininterval=0) as bar:
        bar.update(2)
    assert "2/4" in _frames(out.getvalue())[-1] and "100%" not in out.getvalue()
    quiet = io.StringIO()
    with progress_bar(total=4, desc="Stage", unit="study", file=quiet, disable=True) as bar:
        bar.update(4)
    assert quiet.getvalue() == ""


def test_progress_over_yields_every_item_and_counts_each_once_its_body_is_done() -> None:
    out = io.StringIO()
    seen = list(progress_over(["a", "b", "c"], desc="Stage", unit="study", file=out, mininterval=0))
    assert seen == ["a", "b", "c"]
    frames = _frames(out.getvalue())
    assert frames[-1].startswith("Stage: 100%") and "3/3" in frames[-1]
    assert sum("100%" in f for f in frames) == 1
