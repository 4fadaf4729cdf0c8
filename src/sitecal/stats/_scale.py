r"""From the engines' resampled values to a metric's own scale: the debiased ECE's squared estimate.

Every bootstrap engine evaluates a metric's weighted statistic on the original data (the estimate) and on
each resample (the replicates). For most metrics that value *is* the metric. For a metric whose registry
entry is ``squared`` (the debiased ECE) it is the signed estimate :math:`\widehat D` of a squared error,
which can be negative, and two facts decide how its interval is taken:

1. **Clamping belongs after resampling.** :math:`\sqrt{\max(\widehat D, 0)}` puts a point mass at 0;
   resampled that way, a BCa interval collapses to [0, 0] on groups that are in truth beyond a margin.
   The replicates stay signed until the interval's ends are known; BCa is refused for these metrics.
2. **The resamples are centred, and spread, as for another value.** :math:`\widehat D` subtracts each
   bin's sampling variance, :math:`\bar y_b (1 - \bar y_b) / (n_b - 1)`, so it is unbiased for the
   population's squared error. In the bootstrap world the population is the sample, whose squared error
   is the *plug-in* value :math:`D_{\text{plug}}`, larger than :math:`\widehat D` by that very noise
   term (and a resample's duplicated patients add more within a bin). So the replicates centre above
   :math:`\widehat D`, and spread as they would around a group with the larger error: a percentile
   interval of them covered a calibrated model's truth 80 % of the time before calibration, every miss
   on the high side, and recentring them on the estimate (the previous release) covered 94-100 %, so
   conservative that a calibrated group of 300 passed a 0.10 margin only 45 % of the time
   (``benchmarks/coverage_debiased.md``).

   The interval is therefore the **studentised bootstrap** (bootstrap-t; Efron & Tibshirani 1993,
   ch. 12; Davison & Hinkley 1997, section 5.2.1): each resample also gives the standard error
   :math:`\widehat{se}^*_b` of its estimate and, once, the sample gives :math:`\widehat{se}` and
   :math:`D_{\text{plug}}` (:func:`sitecal.metrics._debiased.debiased_squared_se_from_sums`; the
   statistic's ``companions()``). The pivot :math:`t^*_b = (D^*_b - D_{\text{plug}}) /
   \widehat{se}^*_b` is centred on the bootstrap world's true value and scaled by each resample's own
   spread, and the reported replicates are :math:`\widehat D - t^*_b\, \widehat{se}`, whose
   percentile interval is the bootstrap-t interval :math:`[\widehat D - t^*_{(1+L)/2} \widehat{se},
   \widehat D - t^*_{(1-L)/2} \widehat{se}]`. The standard error assumes independent studies; the
   pivot's quantiles come from resampled patients, so clustering enters through them. Where the sample
   or a resample has no positive standard error (every usable bin all right or all wrong) the cell
   falls back to the recentred replicates :math:`D^*_b - (\overline{D^*} - \widehat D)`. Only then is
   every value mapped to :math:`\sqrt{\max(\cdot, 0)}`; the percentile interval commutes with that
   monotone map.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sitecal.errors import DataError
from sitecal.metrics import SumMetricStatistic
from sitecal.metrics.registry import METRICS

__all__ = [
    "SQUARED_METRICS",
    "EngineRows",
    "Studentised",
    "check_method_for_metrics",
    "engine_rows",
    "on_metric_scale",
    "resampled",
]

#: Metrics whose engine values are a signed squared estimate (``Metric.squared``).
SQUARED_METRICS: frozenset[str] = frozenset(m.name for m in METRICS if m.squared)


def resampled(statistic: Any) -> Any:
    """The form of a metric's statistic that the engines resample (signed where the metric clamps)."""
    return statistic.resampled() if isinstance(statistic, SumMetricStatistic) else statistic


@dataclass(frozen=True)
class Studentised:
    """The estimate's standard error, its replicates' and the plug-in value, for one table cell."""

    se: float
    se_replicates: NDArray[np.float64]
    plug: float


def on_metric_scale(
    metric: str,
    estimate: float,
    replicates: NDArray[np.float64],
    studentised: Studentised | None = None,
) -> tuple[float, NDArray[np.float64]]:
    """The estimate and replicates of ``metric`` on its own scale, from the engine's values.

    For a ``squared`` metric: the replicates replaced by the studentised ones ``D - se (D* - plug) / se*``
    when ``studentised`` is given and every standard error is positive, else recentred on the estimate
    (``D* - (mean(D*) - D)``, over the finite replicates); then both mapped to ``sqrt(max(x, 0))``. A
    non-finite replicate stays so and makes the interval undefined. Any other metric is returned as it is.

    >>> import numpy as np
    >>> est, reps = on_metric_scale("ece_debiased", -0.0004, np.array([0.0010, 0.0030, 0.0050]))
    >>> est, reps.round(4).tolist()  # recentred by mean 0.003 - (-0.0004) = 0.0034, then sqrt(max(., 0))
    (0.0, [0.0, 0.0, 0.04])
    >>> t = Studentised(se=0.002, se_replicates=np.array([0.001, 0.002, 0.004]), plug=0.003)
    >>> est, reps = on_metric_scale("ece_debiased", 0.0016, np.array([0.0010, 0.0030, 0.0050]), t)
    >>> reps.round(4).tolist()  # pivots -2, 0, 0.5 -> 0.0016 + 0.004, 0.0016, 0.0016 - 0.001, then the root
    [0.0748, 0.04, 0.0245]
    """
    if metric not in SQUARED_METRICS:
        return estimate, replicates
    reps = np.asarray(replicates, dtype=np.float64)
    finite = np.isfinite(reps)
    with np.errstate(invalid="ignore", divide="ignore"):
        usable = _usable(studentised, finite)
        if usable is not None:
            signed = estimate - usable.se * (reps - usable.plug) / usable.se_replicates
        else:
            shift = float(reps[finite].mean()) - estimate if finite.any() and np.isfinite(estimate) else 0.0
            signed = reps - shift
        out = np.sqrt(np.maximum(signed, 0.0))
    out[~finite] = np.nan
    value = float(np.sqrt(max(estimate, 0.0))) if np.isfinite(estimate) else float("nan")
    return value, out


def _usable(studentised: Studentised | None, finite: NDArray[np.bool_]) -> Studentised | None:
    """``studentised`` where its standard errors are all positive (those of the finite replicates)."""
    if studentised is None or not (np.isfinite(studentised.plug) and studentised.se > 0.0):
        return None
    se_star = studentised.se_replicates[finite]
    return studentised if bool(np.all(np.isfinite(se_star) & (se_star > 0.0))) else None


@dataclass(frozen=True)
class EngineRows:
    """An engine's metrics and the statistics it evaluates: theirs, then each squared metric's companions.

    The engines evaluate :attr:`statistics` (one table row each) and hand the tables to
    :meth:`on_metric_scale`, which returns the rows of :attr:`names` alone, each on its metric's scale:
    the companions' rows (the standard errors and plug-in values of the studentised interval) are used
    there and dropped.
    """

    names: tuple[str, ...]
    statistics: tuple[Any, ...]
    companions: dict[str, tuple[int, int]]  # metric -> rows of its standard error and plug-in value

    def on_metric_scale(
        self, estimates: NDArray[np.float64], replicates: NDArray[np.float64], *, axis: int = 0
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The tables (``axis`` indexes :attr:`statistics`) with the rows of :attr:`names`, each on its scale.

        ``estimates`` has any shape, ``replicates`` the same plus a last axis of resamples; new arrays
        are returned (the inputs are left as they are). Each (metric, probability set, ...) cell is
        studentised by its own standard errors.
        """
        k = len(self.names)
        est_all, reps_all = np.moveaxis(estimates, axis, 0), np.moveaxis(replicates, axis, 0)  # views
        est = np.array(est_all[:k], dtype=np.float64, copy=True)
        reps = np.array(reps_all[:k], dtype=np.float64, copy=True)
        for i, name in enumerate(self.names):  # a loop over metrics
            if name not in SQUARED_METRICS:
                continue
            rows = self.companions.get(name)
            for cell in np.ndindex(est.shape[1:]):  # a loop over the metric's cells
                studentised = None
                if rows is not None:
                    se, plug = rows
                    studentised = Studentised(
                        se=float(est_all[(se, *cell)]),
                        se_replicates=np.asarray(reps_all[(se, *cell)], dtype=np.float64),
                        plug=float(est_all[(plug, *cell)]),
                    )
                value, values = on_metric_scale(name, float(est[(i, *cell)]), reps[(i, *cell)], studentised)
                est[(i, *cell)] = value
                reps[(i, *cell)] = values
        return np.moveaxis(est, 0, axis), np.moveaxis(reps, 0, axis)


def engine_rows(names: Sequence[str], statistics: Sequence[Any]) -> EngineRows:
    """``names`` and their (resampled) ``statistics``, with each squared metric's companions appended."""
    all_stats = list(statistics)
    companions: dict[str, tuple[int, int]] = {}
    for name, statistic in zip(names, statistics, strict=True):  # a loop over metrics
        parts = statistic.companions() if isinstance(statistic, SumMetricStatistic) else ()
        if name in SQUARED_METRICS and parts:
            companions[name] = (len(all_stats), len(all_stats) + 1)
            all_stats.extend(parts)
    return EngineRows(names=tuple(names), statistics=tuple(all_stats), companions=companions)


def check_method_for_metrics(method: str, metrics: Iterable[str], *, func: str) -> None:
    """Refuse BCa for a ``squared`` metric (DataError naming it and what to do instead)."""
    refused = [m for m in metrics if m in SQUARED_METRICS]
    if method == "bca" and refused:
        raise DataError(
            f"The BCa interval is not valid for {', '.join(refused)} (in {func}): the debiased ECE is the "
            "square root of an estimate clamped at 0, and when it is clamped the BCa interval collapses "
            "to [0, 0] even for groups beyond the margin (in simulation a group at 0.11 against a 0.10 "
            "margin passed 40 % of the time at 50 studies). Use method='percentile', whose studentised "
            "interval covers (benchmarks/coverage_debiased.md), or leave the debiased ECE out."
        )
