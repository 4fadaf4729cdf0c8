"""One table of paired bootstrap replicates, and the intervals read from it.

Every bootstrap engine returns its values as estimates and replicates over two named axes: metrics by
probability sets (``bootstrap_metrics``, ``refit_bootstrap``, ``crossfit_bootstrap``,
``refit_method_bootstrap``) or methods by metrics (``compare_methods``). Each cell's replicates are paired
with every other cell's along the last axis (resample ``b`` drew the same patients for all), so a
difference of two cells gets its own interval rather than being judged from two overlapping ones.

>>> import numpy as np
>>> from sitecal.stats import BootstrapSpec
>>> reps = np.array([[[0.10, 0.20, 0.30, 0.40], [0.05, 0.10, 0.15, 0.20]]])  # 1 metric, 2 sets, B = 4
>>> table = ReplicateTable(rows=("ece",), columns=("before", "after"), estimates=np.array([[0.25, 0.12]]),
...                        replicates=reps, spec=BootstrapSpec(n_resamples=4), n=8, n_clusters=8)
>>> round(table.get("ece", "after").estimate, 2), round(table.difference(("ece", "after"),
...                                                                   ("ece", "before")).estimate, 2)
(0.12, -0.13)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sitecal._validation import check_option
from sitecal.errors import DataError
from sitecal.stats._intervals import interval_result
from sitecal.stats._resample import ClusterPlan
from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = ["MetricTable", "ReplicateTable", "TableView"]


@dataclass(frozen=True, eq=False)
class ReplicateTable:
    """Estimates and paired replicates of named cells, with the interval of a cell or of a difference.

    Attributes
    ----------
    rows, columns : tuple of str
        The names along the first two axes (e.g. metrics and probability sets).
    estimates : numpy.ndarray, shape (R, C)
    replicates : numpy.ndarray, shape (R, C, B), B = ``spec.n_resamples``
    spec : BootstrapSpec
    n, n_clusters, n_strata : int
        The sizes every interval reports (the evaluated rows, patients and strata).
    jackknife : numpy.ndarray, shape (R, C, J), or None
        Influence values for BCa's acceleration; None unless ``spec.method`` is ``"bca"``.
    axes : (str, str)
        What the rows and columns are, for error messages (default ``("metric", "prob_set")``).
    owner : str
        The result's name, for error messages.

    The arrays are made read-only; their shapes are checked once, here.
    """

    rows: tuple[str, ...]
    columns: tuple[str, ...]
    estimates: NDArray[np.float64]
    replicates: NDArray[np.float64]
    spec: BootstrapSpec
    n: int
    n_clusters: int
    n_strata: int = 1
    jackknife: NDArray[np.float64] | None = None
    axes: tuple[str, str] = ("metric", "prob_set")
    owner: str = "ReplicateTable"

    def __post_init__(self) -> None:
        shape = (len(self.rows), len(self.columns))
        problems = []
        if self.estimates.shape != shape:
            problems.append(f"estimates of shape {self.estimates.shape}, not {shape}")
        wanted = (*shape, self.spec.n_resamples)
        if self.replicates.shape != wanted:
            problems.append(f"replicates of shape {self.replicates.shape}, not {wanted}")
        if self.jackknife is not None and self.jackknife.shape[:2] != shape:
            problems.append(f"jackknife values of shape {self.jackknife.shape}, not {shape} + (J,)")
        if problems:
            raise DataError(f"{self.owner}: " + "; ".join(problems) + ".")
        for array in (self.estimates, self.replicates, self.jackknife):  # a loop over the arrays
            if array is not None:
                array.setflags(write=False)

    @classmethod
    def from_plan(
        cls,
        rows: tuple[str, ...],
        columns: tuple[str, ...],
        estimates: NDArray[np.float64],
        replicates: NDArray[np.float64],
        *,
        spec: BootstrapSpec,
        plan: ClusterPlan,
        owner: str,
        jackknife: NDArray[np.float64] | None = None,
        axes: tuple[str, str] = ("metric", "prob_set"),
    ) -> ReplicateTable:
        """A table whose intervals report the sizes of ``plan`` (the evaluated rows, patients, strata)."""
        return cls(
            rows=rows,
            columns=columns,
            estimates=estimates,
            replicates=replicates,
            spec=spec,
            n=plan.n,
            n_clusters=plan.n_clusters,
            n_strata=plan.n_strata,
            jackknife=jackknife,
            axes=axes,
            owner=owner,
        )

    def cell(self, row: str, column: str, *, func: str) -> tuple[int, int]:
        """The indices of ``(row, column)``; a DataError naming the known names otherwise."""
        r = check_option(row, name=self.axes[0], func=func, options=self.rows)
        c = check_option(column, name=self.axes[1], func=func, options=self.columns)
        return self.rows.index(r), self.columns.index(c)

    def _interval(
        self, estimate: float, replicates: NDArray[np.float64], jackknife: NDArray[np.float64] | None
    ) -> BootstrapResult:
        return interval_result(
            estimate,
            replicates,
            jackknife,
            spec=self.spec,
            n=self.n,
            n_clusters=self.n_clusters,
            n_strata=self.n_strata,
        )

    def get(self, row: str, column: str) -> BootstrapResult:
        """The interval of one cell."""
        i, j = self.cell(row, column, func=f"{self.owner}.get")
        jk = None if self.jackknife is None else self.jackknife[i, j]
        return self._interval(float(self.estimates[i, j]), self.replicates[i, j], jk)

    def difference(self, at: tuple[str, str], minus: tuple[str, str]) -> BootstrapResult:
        """The interval of cell ``at`` minus cell ``minus``, from their paired replicates."""
        func = f"{self.owner}.difference"
        a, b = self.cell(*at, func=func), self.cell(*minus, func=func)
        jk = None if self.jackknife is None else self.jackknife[a] - self.jackknife[b]
        return self._interval(
            float(self.estimates[a] - self.estimates[b]), self.replicates[a] - self.replicates[b], jk
        )

    def to_dict(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """``intervals[row][column]``, and per row the differences ``"a - b"`` of the column ``pairs``."""
        return {
            "intervals": {r: {c: self.get(r, c).to_dict() for c in self.columns} for r in self.rows},
            "differences": {
                r: {f"{a} - {b}": self.difference((r, a), (r, b)).to_dict() for a, b in pairs}
                for r in self.rows
            },
        }


class TableView:
    """What a result holding a ``table`` (a :class:`ReplicateTable`) reads from it."""

    table: ReplicateTable

    @property
    def spec(self) -> BootstrapSpec:
        return self.table.spec

    @property
    def estimates(self) -> NDArray[np.float64]:
        """Shape (rows, columns). Read-only."""
        return self.table.estimates

    @property
    def replicates(self) -> NDArray[np.float64]:
        """Shape (rows, columns, B). Read-only."""
        return self.table.replicates

    @property
    def jackknife(self) -> NDArray[np.float64] | None:
        """Shape (rows, columns, J) for BCa's acceleration, else None. Read-only."""
        return self.table.jackknife


class MetricTable(TableView):
    """What a result whose table holds metrics by probability sets offers."""

    @property
    def metrics(self) -> tuple[str, ...]:
        return self.table.rows

    @property
    def prob_sets(self) -> tuple[str, ...]:
        return self.table.columns

    def get(self, metric: str, prob_set: str) -> BootstrapResult:
        """Interval of one metric on one probability set."""
        return self.table.get(metric, prob_set)

    def difference(self, metric: str, a: str = "after", b: str = "before") -> BootstrapResult:
        """Interval of ``metric(a) - metric(b)`` from the paired replicates."""
        return self.table.difference((metric, a), (metric, b))
