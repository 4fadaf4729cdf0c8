r"""From the engines' resampled values to a metric's own scale: the debiased ECE's squared estimate.

Every bootstrap engine evaluates a metric's weighted statistic on the original data (the estimate) and on
each resample (the replicates). For most metrics that value *is* the metric. For a metric whose registry
entry is ``squared`` (the debiased ECE) it is the signed estimate :math:`\widehat D` of a squared error,
which can be negative, and two facts decide how its interval is taken:

1. **Clamping belongs after resampling.** :math:`\sqrt{\max(\widehat D, 0)}` puts a point mass at 0;
   resampled that way, a BCa interval collapses to [0, 0] on groups that are in truth beyond a margin.
   The replicates stay signed until the interval's ends are known; BCa is refused for these metrics.
2. **The resamples are centred on the wrong value.** :math:`\widehat D` subtracts each bin's sampling
   variance, :math:`\bar y_b (1 - \bar y_b) / (n_b - 1)`, so it is unbiased for the population's squared
   error. In the bootstrap world the population is the sample, whose squared error is the *plug-in*
   value, larger than :math:`\widehat D` by that very noise term (and a resample's duplicated patients
   add more within a bin). So the replicates centre above :math:`\widehat D`, and a percentile interval
   of them sat too high: before calibration it covered a calibrated model's truth 80 % of the time at
   every size, every miss on the high side (``benchmarks/coverage_debiased.md``). The replicates are
   therefore recentred on the estimate, :math:`D^*_b - (\overline{D^*} - \widehat D)`: the bootstrap
   bias correction of Efron & Tibshirani (1993, section 10.6) applied to the replicates, which keeps
   their spread and shape. Only then is every value mapped to :math:`\sqrt{\max(\cdot, 0)}`; the
   percentile interval commutes with that monotone map.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sitecal.errors import DataError
from sitecal.metrics import SumMetricStatistic
from sitecal.metrics.registry import METRICS

__all__ = [
    "SQUARED_METRICS",
    "check_method_for_metrics",
    "on_metric_scale",
    "resampled",
    "tables_on_metric_scale",
]

#: Metrics whose engine values are a signed squared estimate (``Metric.squared``).
SQUARED_METRICS: frozenset[str] = frozenset(m.name for m in METRICS if m.squared)


def resampled(statistic: Any) -> Any:
    """The form of a metric's statistic that the engines resample (signed where the metric clamps)."""
    return statistic.resampled() if isinstance(statistic, SumMetricStatistic) else statistic


def on_metric_scale(
    metric: str, estimate: float, replicates: NDArray[np.float64]
) -> tuple[float, NDArray[np.float64]]:
    """The estimate and replicates of ``metric`` on its own scale, from the engine's values.

    For a ``squared`` metric: replicates recentred on the estimate (``D* - (mean(D*) - D)``, computed
    over the finite replicates; a non-finite replicate stays so and makes the interval undefined), then
    both mapped to ``sqrt(max(x, 0))``. Any other metric is returned as it is.

    >>> import numpy as np
    >>> est, reps = on_metric_scale("ece_debiased", -0.0004, np.array([0.0010, 0.0030, 0.0050]))
    >>> est, reps.round(4).tolist()  # recentred by mean 0.003 - (-0.0004) = 0.0034, then sqrt(max(., 0))
    (0.0, [0.0, 0.0, 0.04])
    """
    if metric not in SQUARED_METRICS:
        return estimate, replicates
    reps = np.asarray(replicates, dtype=np.float64)
    finite = np.isfinite(reps)
    shift = float(reps[finite].mean()) - estimate if finite.any() and np.isfinite(estimate) else 0.0
    with np.errstate(invalid="ignore"):
        out = np.sqrt(np.maximum(reps - shift, 0.0))
    out[~finite] = np.nan
    value = float(np.sqrt(max(estimate, 0.0))) if np.isfinite(estimate) else float("nan")
    return value, out


def tables_on_metric_scale(
    metrics: Sequence[str], estimates: NDArray[np.float64], replicates: NDArray[np.float64], *, axis: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`on_metric_scale` over an engine's tables, whose ``axis`` indexes ``metrics``.

    ``estimates`` has any shape, ``replicates`` the same plus a last axis of resamples; both are returned
    as new arrays (the inputs are left as they are). Each (metric, probability set, ...) cell is
    recentred on its own estimate.
    """
    est = np.array(estimates, dtype=np.float64, copy=True)
    reps = np.array(replicates, dtype=np.float64, copy=True)
    est_by_metric, reps_by_metric = np.moveaxis(est, axis, 0), np.moveaxis(reps, axis, 0)  # views
    for i, name in enumerate(metrics):  # a loop over metrics
        if name not in SQUARED_METRICS:
            continue
        for cell in np.ndindex(est_by_metric.shape[1:]):  # a loop over the metric's cells
            value, values = on_metric_scale(
                name, float(est_by_metric[(i, *cell)]), reps_by_metric[(i, *cell)]
            )
            est_by_metric[(i, *cell)] = value
            reps_by_metric[(i, *cell)] = values
    return est, reps


def check_method_for_metrics(method: str, metrics: Iterable[str], *, func: str) -> None:
    """Refuse BCa for a ``squared`` metric (DataError naming it and what to do instead)."""
    refused = [m for m in metrics if m in SQUARED_METRICS]
    if method == "bca" and refused:
        raise DataError(
            f"The BCa interval is not valid for {', '.join(refused)} (in {func}): the debiased ECE is the "
            "square root of an estimate clamped at 0, and when it is clamped the BCa interval collapses "
            "to [0, 0] even for groups beyond the margin (in simulation a group at 0.11 against a 0.10 "
            "margin passed 40 % of the time at 50 studies). Use method='percentile', whose recentred "
            "interval covers (benchmarks/coverage_debiased.md), or leave the debiased ECE out."
        )
