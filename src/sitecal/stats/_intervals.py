"""Percentile and BCa intervals from bootstrap replicates (and jackknife values for BCa)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr, ndtri

from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = ["INTERVAL_REASONS", "Interval", "compute_interval", "interval_result"]

# Why an interval is degenerate or undefined: the codes of ``BootstrapResult.reason``, which the documents
# store (``sitecal.results.IntervalNote`` lists the same codes; ``note`` says it in words for a caller).
NOT_FINITE = "replicates_not_finite"
EQUAL_ONE_CLUSTER = "replicates_equal_one_cluster"
EQUAL_NO_VARIATION = "replicates_equal_no_variation"
BCA_BELOW = "bca_estimate_below_replicates"
BCA_ABOVE = "bca_estimate_above_replicates"
BCA_ACCELERATION = "bca_acceleration_too_large"
#: Every code of ``BootstrapResult.reason`` (besides ``""``: a regular interval).
INTERVAL_REASONS = (NOT_FINITE, EQUAL_ONE_CLUSTER, EQUAL_NO_VARIATION, BCA_BELOW, BCA_ABOVE, BCA_ACCELERATION)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    standard_error: float
    bias: float
    note: str
    reason: str = ""  # "" or one of INTERVAL_REASONS


def compute_interval(
    estimate: float,
    replicates: NDArray[np.float64],
    jackknife: NDArray[np.float64] | None,
    *,
    level: float,
    method: str,
    n_clusters: int,
) -> Interval:
    """Interval of ``level`` from the replicates; documented outcomes instead of errors when degenerate.

    - Any non-finite replicate: ``low = high = NaN`` (the note counts them).
    - All replicates equal (e.g. one cluster, or no variation between clusters): ``low = high =`` that
      value, for both methods; the note says the width carries no information.
    - BCa with the estimate below or above every replicate (infinite bias correction), or a
      non-finite acceleration: ``low = high = NaN``, with a note suggesting ``method="percentile"``.
    """
    b = replicates.shape[0]
    finite = np.isfinite(replicates)
    if not finite.all():
        return Interval(
            math.nan,
            math.nan,
            math.nan,
            math.nan,
            f"{int(b - finite.sum())} of {b} bootstrap replicates are not finite (the statistic is "
            "undefined on some resamples); no interval.",
            NOT_FINITE,
        )
    se = float(np.std(replicates, ddof=1))
    bias = float(np.mean(replicates) - estimate)
    alpha = (1.0 - level) / 2.0
    lo_rep, hi_rep = float(replicates.min()), float(replicates.max())
    if lo_rep == hi_rep:
        why = "one cluster" if n_clusters < 2 else "no variation between the resampled clusters"
        return Interval(
            lo_rep,
            hi_rep,
            0.0,
            bias,
            f"All {b} bootstrap replicates are equal ({why}): the interval has zero width and does "
            "not measure sampling uncertainty.",
            EQUAL_ONE_CLUSTER if n_clusters < 2 else EQUAL_NO_VARIATION,
        )
    if method == "percentile":
        low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
        return Interval(float(low), float(high), se, bias, "")
    return _bca_interval(estimate, replicates, jackknife, level=level, se=se, bias=bias)


def _bca_interval(
    estimate: float,
    replicates: NDArray[np.float64],
    jackknife: NDArray[np.float64] | None,
    *,
    level: float,
    se: float,
    bias: float,
) -> Interval:
    """The BCa interval of replicates that vary (see :func:`compute_interval`); NaN ends where undefined.

    Efron 1987; Efron & Tibshirani 1993, 14.3: bias correction z0 from the mid-rank share of replicates
    below the estimate (as scipy.stats.bootstrap), acceleration from the jackknife.
    """
    b = replicates.shape[0]
    alpha = (1.0 - level) / 2.0
    share = (np.count_nonzero(replicates < estimate) + np.count_nonzero(replicates <= estimate)) / (2.0 * b)
    z0 = float(ndtri(share))
    if not math.isfinite(z0):
        return Interval(
            math.nan,
            math.nan,
            se,
            bias,
            "BCa undefined: the estimate lies "
            + ("below" if share == 0.0 else "above")
            + " every bootstrap replicate (infinite bias correction); use method='percentile'.",
            BCA_BELOW if share == 0.0 else BCA_ABOVE,
        )
    if jackknife is None:  # pragma: no cover - callers always pass it for BCa
        raise ValueError("BCa needs jackknife values")
    centred = jackknife.mean() - jackknife
    denominator = float(np.sum(centred**2))
    a_hat = 0.0 if denominator == 0.0 else float(np.sum(centred**3) / (6.0 * denominator**1.5))
    levels = []
    for z_alpha in (float(ndtri(alpha)), float(ndtri(1.0 - alpha))):
        num = z0 + z_alpha
        shrink = 1.0 - a_hat * num
        if not (math.isfinite(a_hat) and shrink > 0.0):
            return Interval(
                math.nan,
                math.nan,
                se,
                bias,
                f"BCa undefined: acceleration {a_hat!r} is too large for level {level}; "
                "use method='percentile'.",
                BCA_ACCELERATION,
            )
        levels.append(float(ndtr(z0 + num / shrink)))
    low, high = np.quantile(replicates, levels)
    return Interval(float(low), float(high), se, bias, "")


def interval_result(
    estimate: float,
    replicates: NDArray[np.float64],
    jackknife: NDArray[np.float64] | None,
    *,
    spec: BootstrapSpec,
    n: int,
    n_clusters: int,
    n_strata: int,
    note: str = "",
) -> BootstrapResult:
    """The interval of ``spec``'s method from the replicates, as a :class:`BootstrapResult`."""
    interval = compute_interval(
        estimate, replicates, jackknife, level=spec.level, method=spec.method, n_clusters=n_clusters
    )
    return BootstrapResult(
        estimate=estimate,
        low=interval.low,
        high=interval.high,
        level=spec.level,
        method=spec.method,
        n_resamples=spec.n_resamples,
        seed=spec.seed,
        n=n,
        n_clusters=n_clusters,
        n_strata=n_strata,
        standard_error=interval.standard_error,
        bias=interval.bias,
        note=" ".join(x for x in (interval.note, note) if x),
        reason=interval.reason,
    )
