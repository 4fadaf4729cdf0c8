"""What ``sitecal demo --monitor`` monitors: a year of scores after go-live, with one scanner drifting.

The scores are the validation run's own evaluation studies' logits, resampled per scanner, so that the
label-free checks see the scanners as they were validated; the labels are drawn from the scores under a
*true* temperature per scanner and month:

- every scanner is calibrated by its deployed temperature: ``y ~ softmax(z / T_scanner)``;
- one scanner (:data:`DRIFTING_SCANNER`) from month :data:`DRIFT_FROM_MONTH` on has a true temperature
  :data:`DRIFT` times its deployed one, ``y ~ softmax(z / (DRIFT * T_scanner))``: its calibrated scores
  are over-confident, a calibration slope of ``1 / DRIFT`` (0.5, far outside the demo's [0.8, 1.25]).

Why 2.0 and :data:`STUDIES_PER_MONTH` studies: ``benchmarks/monitor_alarms.md`` finds a drift to 1.6
times undetectable within two months at 150 studies a month against the slope margin [0.8, 1.25], and a
drift to 2.0 caught in about 80 % of series at 150 a month; the demo shows a drift it can show. On the
default demo's validation run, seeds 0-9 each alarmed on the drifting scanner (first 0 to 4 months after
the drift began) and on no other scanner (``tests/demo/test_demo_monitor.py`` has the small-baseline
equivalent).

The studies are new: keys ``MON-000001``, ... and one patient per study (``MONP-000001``, ...), never a
key of the validation run. Everything is drawn from ``seed``: the same inputs give the same file.
"""

from __future__ import annotations

import calendar
import csv
import datetime as dt
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .._progress import progress_over
from ..errors import DataError

__all__ = [
    "DRIFT",
    "DRIFTING_SCANNER",
    "DRIFT_FROM_MONTH",
    "MONITOR_MONTHS",
    "STUDIES_PER_MONTH",
    "MonitorScenario",
    "after_go_live",
    "months_before",
]

#: Months of scores after go-live.
MONITOR_MONTHS = 12
#: Studies a month per scanner, on average (each month's count is Poisson).
STUDIES_PER_MONTH = 150
#: The scanner whose calibration drifts (its site's CR plate reader, e.g. after new imaging plates).
DRIFTING_SCANNER = "FCR Demo CR"
#: The first month (1-based) of the drift.
DRIFT_FROM_MONTH = 7
#: The drifting scanner's true temperature over its deployed one from that month on.
DRIFT = 2.0


@dataclass(frozen=True)
class MonitorScenario:
    """What is planted in the scores after go-live.

    Attributes
    ----------
    first_month : datetime.date
        The first day of the first month.
    months : int
        How many months.
    per_month : int
        Mean studies a month per scanner.
    drifting : str
        The scanner that drifts (a group of the baseline's calibration attribute).
    drift_from : int
        The first month (1-based) of the drift.
    drift : float
        The drifting scanner's true temperature over its deployed one from then on (> 0; 1 is no drift).
    seed : int
        Seed of every draw.
    """

    first_month: dt.date
    months: int = MONITOR_MONTHS
    per_month: int = STUDIES_PER_MONTH
    drifting: str = DRIFTING_SCANNER
    drift_from: int = DRIFT_FROM_MONTH
    drift: float = DRIFT
    seed: int = 0

    def month(self, index: int) -> dt.date:
        """The first day of month ``index`` (0-based)."""
        total = self.first_month.year * 12 + self.first_month.month - 1 + index
        return dt.date(total // 12, total % 12 + 1, 1)


def months_before(day: dt.date, months: int) -> dt.date:
    """The first day of the month ``months`` calendar months before ``day``'s month.

    >>> months_before(dt.date(2026, 3, 15), 12)
    datetime.date(2025, 3, 1)
    """
    total = day.year * 12 + day.month - 1 - months
    return dt.date(total // 12, total % 12 + 1, 1)


def after_go_live(
    logits: NDArray[np.floating],
    scanners: Sequence[str] | NDArray[np.str_],
    temperatures: Mapping[str, float],
    *,
    class_names: Sequence[str],
    scenario: MonitorScenario,
    scanner_column: str = "scanner",
    progress: bool = False,
) -> str:
    """The predictions file (CSV text) of the months after go-live.

    Parameters
    ----------
    logits : (N, C) array
        The validation run's evaluation studies' logits (before calibration).
    scanners : (N,) sequence of str
        Each study's scanner (its group of the calibration attribute).
    temperatures : mapping of scanner to float
        The deployed temperature of each scanner; the scanners monitored are these, in sorted order.
    class_names : sequence of str
        The model's classes, in logit order.
    scenario : MonitorScenario
        The months, sizes, the drift and the seed.
    scanner_column : str, default "scanner"
        The name of the scanner column.
    progress : bool, default False
        Show a progress bar over the months.

    Returns
    -------
    str
        CSV with columns ``study``, ``patient``, ``study_date`` (``YYYY-MM-DD``), the scanner column,
        ``label`` (a class name) and ``logit:<class>`` (six decimals), in date order.

    Raises
    ------
    DataError
        If a scanner of ``temperatures`` has no study in ``logits``, the drifting scanner is not one of
        them, or the scenario's sizes are not positive.
    """
    z = np.asarray(logits, dtype=np.float64)
    groups = np.asarray(scanners, dtype=str)
    if z.ndim != 2 or z.shape[1] != len(class_names) or len(groups) != len(z):
        raise DataError(
            f"after_go_live: logits must be (N, {len(class_names)}) with one scanner per row. Got "
            f"{z.shape} logits and {len(groups)} scanners."
        )
    names = sorted(temperatures)
    if scenario.drifting not in names:
        raise DataError(
            f"The drifting scanner {scenario.drifting!r} has no deployed temperature of its own in the "
            f"baseline (its scanners: {names}). Run the demo with its default size."
        )
    if scenario.months < 1 or scenario.per_month < 1 or not scenario.drift > 0:
        raise DataError(
            f"The scenario needs months >= 1, per_month >= 1 and drift > 0. Got {scenario.months}, "
            f"{scenario.per_month} and {scenario.drift}."
        )
    pools = {name: np.flatnonzero(groups == name) for name in names}
    empty = [name for name, rows in pools.items() if len(rows) == 0]
    if empty:
        raise DataError(f"The baseline has no evaluation study of the scanner(s) {empty} to resample.")
    rng = np.random.default_rng(scenario.seed)
    rows: list[tuple[dt.date, str, int, NDArray[np.float64]]] = []
    for index in progress_over(range(scenario.months), desc="Months", unit="month", disable=not progress):
        first = scenario.month(index)
        days = calendar.monthrange(first.year, first.month)[1]
        for name in names:
            n = int(rng.poisson(scenario.per_month))
            drawn = z[rng.choice(pools[name], size=n)]
            true_temperature = temperatures[name] * (
                scenario.drift if name == scenario.drifting and index + 1 >= scenario.drift_from else 1.0
            )
            labels = _draw_labels(rng, drawn / true_temperature)
            day = rng.integers(0, days, size=n)
            rows += [
                (first + dt.timedelta(days=int(d)), name, int(y), row)
                for d, y, row in zip(day, labels, drawn, strict=True)
            ]
    rows.sort(key=lambda r: (r[0], r[1]))  # stable: the draw order breaks ties
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["study", "patient", "study_date", scanner_column, "label", *(f"logit:{c}" for c in class_names)]
    )
    for i, (day_, name, y, row) in enumerate(rows, start=1):
        writer.writerow(
            [
                f"MON-{i:06d}",
                f"MONP-{i:06d}",
                day_.isoformat(),
                name,
                class_names[y],
                *(f"{v:.6f}" for v in row),
            ]
        )
    return out.getvalue()


def _draw_labels(rng: np.random.Generator, z: NDArray[np.float64]) -> NDArray[np.intp]:
    """One class per row drawn from ``softmax(z)`` (inverse CDF on one uniform per row)."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    cumulative = np.cumsum(e / e.sum(axis=1, keepdims=True), axis=1)
    u = rng.uniform(size=(len(z), 1))
    drawn: NDArray[np.intp] = np.minimum((cumulative < u).sum(axis=1), z.shape[1] - 1)
    return drawn
