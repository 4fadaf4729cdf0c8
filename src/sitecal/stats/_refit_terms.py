"""What the after-calibration comparisons with refitted temperatures share: metrics at any temperatures.

:func:`~sitecal.stats.refit_disparity_stages` (bootstrap intervals) and
:func:`~sitecal.stats.refit_size_matched_flags` (permutation flags) both check the metrics once on the
probabilities at the fitted temperatures, then compute every group's metric and its complement's from
the sums of per-row terms under other temperatures (each resample's or permutation's refits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.errors import DataError
from sitecal.metrics import SumMetricStatistic
from sitecal.stats._disparity import Grouped, _apply, checked_groups
from sitecal.stats._term_sums import term_sums_at_temperatures

__all__ = ["RefitTerms", "checked_metrics"]


def checked_metrics(
    probs: NDArray[np.float64],
    labels: ArrayLike,
    groups: ArrayLike,
    metrics: Sequence[str],
    n_bins: int,
    min_group_size: int,
    *,
    func: str,
) -> tuple[NDArray[np.int64], Grouped, list[SumMetricStatistic]]:
    """The labels and groups checked once with each metric, and every metric's sum form (at least one)."""
    checked = [checked_groups(probs, labels, groups, m, n_bins, min_group_size, func=func) for m in metrics]
    if not checked:
        raise DataError(f"{func}: give at least one metric.")
    _, y, _, grouped = checked[0]
    return y, grouped, [c[2] for c in checked]


@dataclass(frozen=True)
class RefitTerms:
    """The evaluated rows and the metrics' sum forms: every group's metric at any temperatures.

    Attributes
    ----------
    statistics : list of SumMetricStatistic
    widths : list of int
        Each statistic's number of terms per row.
    logits_t : numpy.ndarray, shape (C, N)
        The evaluated rows' logits, class-major.
    labels : numpy.ndarray, shape (N,)
    """

    statistics: list[SumMetricStatistic]
    widths: list[int]
    logits_t: NDArray[np.float64]
    labels: NDArray[np.int64]

    @classmethod
    def of(
        cls,
        statistics: list[SumMetricStatistic],
        logits: NDArray[np.float64],
        probs: NDArray[np.float64],
        labels: NDArray[np.int64],
    ) -> RefitTerms:
        """The terms of ``logits`` (N, C), whose probabilities ``probs`` give each statistic's width."""
        widths = [st.row_terms(probs[:1], labels[:1]).shape[1] for st in statistics]
        return cls(statistics, widths, np.ascontiguousarray(logits.T), labels)

    def group_and_rest(
        self,
        s: NDArray[np.float64],
        row_weights: NDArray[np.float64],
        groups: NDArray[np.int64],
        n_groups: int,
        *,
        row_temperature: NDArray[np.int64],
        row_cluster: NDArray[np.int64] | None = None,
        workers: int = 1,
    ) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        """Per metric: every group's value and its complement's, (R, G) each.

        ``s``: each of R resamples' log temperatures (R, S), row ``i`` taking ``s[b, row_temperature[i]]``;
        ``row_weights``, ``row_cluster``, ``groups``, ``n_groups`` and ``workers`` as for
        :func:`~sitecal.stats._term_sums.term_sums_at_temperatures`.
        """
        sums = term_sums_at_temperatures(
            self.statistics,
            self.widths,
            self.logits_t,
            self.labels,
            s,
            row_weights,
            groups,
            n_groups,
            workers=workers,
            row_temperature=row_temperature,
            row_cluster=row_cluster,
        )
        return [
            (_apply(statistic, total), _apply(statistic, total.sum(axis=1, keepdims=True) - total))
            for statistic, total in zip(self.statistics, sums, strict=True)
        ]
