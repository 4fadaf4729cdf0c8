r"""Calibration slope and intercept under bootstrap weights, for the event of ``calibration_slope_intercept``.

:class:`CalibrationSlopeStatistic` and :class:`CalibrationInterceptStatistic` evaluate
:func:`~sitecal.metrics.calibration_slope_intercept`'s two numbers under resampling weights: the
positive class for two classes and the top-label event for more (``event="auto"``), or the event
chosen. (:class:`~sitecal.metrics.RecalibrationStatistic` is the top-label-only form used by the
sensitivity analyses; both share :mod:`sitecal.metrics._logistic`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_option, check_probs
from sitecal.metrics._batched import check_batched
from sitecal.metrics._clinical import EVENTS, Event, event_outcome
from sitecal.metrics._logistic import full_sample_start, logit, weighted_logistic_fit

__all__ = ["CalibrationInterceptStatistic", "CalibrationSlopeStatistic"]


@dataclass(frozen=True)
class _EventPrepared:
    z: NDArray[np.float64]  # logit of the event's probability, (N,)
    y: NDArray[np.float64]  # the 0/1 event, (N,)
    start: tuple[float, float]  # full-sample (a, b) or (alpha, 1): where every resample's fit starts
    event: str  # "positive" or "top-label"


@dataclass(frozen=True)
class _LogisticCalibrationStatistic:
    name: str
    event: Event = "auto"

    _slope: ClassVar[bool]

    def __post_init__(self) -> None:
        check_option(self.event, name="event", func=type(self).__name__, options=EVENTS)

    def _func(self, method: str) -> str:
        return f"{type(self).__name__}.{method}"

    def prepare(self, probs: ArrayLike, labels: ArrayLike) -> _EventPrepared:
        """Validate once; the event, the logit of its probability and the full-sample fit (a start)."""
        func = self._func("prepare")
        p = check_probs(probs, func=func)
        y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
        prob, outcome, which = event_outcome(p, y, self.event, func=func)
        z = logit(prob)
        return _EventPrepared(z, outcome, full_sample_start(z, outcome, slope=self._slope), which)

    def evaluate(self, prepared: _EventPrepared, weights: NDArray[np.float64]) -> NDArray[np.float64]:
        """The statistic under row weights of shape (B, N); returns (B,), NaN where undefined."""
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        return weighted_logistic_fit(w, prepared.y, prepared.z, slope=self._slope, start=prepared.start)

    def batched(self, probs: ArrayLike, labels: ArrayLike, weights: ArrayLike) -> NDArray[np.float64]:
        """Every resample ``r`` with its own probabilities, in one solve.

        ``probs`` (R, N, C), ``labels`` (N,), ``weights`` (R, N).

        Returns (R,): the value of ``evaluate(prepare(probs[r], labels), weights[r:r+1])`` for every
        ``r``, with all R fits in one vectorised Newton solve (each starts from the calibrated values,
        slope 1 and intercept 0, as :func:`~sitecal.metrics.calibration_slope_intercept` does).
        """
        func = self._func("batched")
        p, y, w = check_batched(probs, labels, weights, func=func)
        r, n, c = p.shape
        prob, outcome, _ = event_outcome(p.reshape(r * n, c), np.tile(y, r), self.event, func=func)
        z = logit(prob).reshape(r, n)
        return weighted_logistic_fit(w, outcome.reshape(r, n), z, slope=self._slope, start=(0.0, 1.0))

    def __call__(self, probs: ArrayLike, labels: ArrayLike, *, weights: Any) -> NDArray[np.float64]:
        """Evaluate under per-row weights of shape (B, N); returns (B,)."""
        return self.evaluate(self.prepare(probs, labels), weights)


@dataclass(frozen=True)
class CalibrationSlopeStatistic(_LogisticCalibrationStatistic):
    r"""Calibration slope under bootstrap weights (a prepared statistic for the bootstrap engine).

    ``evaluate(prepare(probs, labels), W)`` with integer row weights ``W`` of shape (B, N) returns (B,):
    for each row of ``W`` the slope :math:`\hat b` of :math:`\mathrm{logit}\,P(y=1) = a + b\,
    \mathrm{logit}(p)` that :func:`~sitecal.metrics.calibration_slope_intercept` (same ``event``) gives
    on the rows repeated by their weights (to its tolerance, 1e-10 relative), NaN where that is NaN (no
    event or no non-event drawn, separation, no convergence). All B fits run as one Newton iteration
    vectorised over resamples, each from the full-sample estimate; about 3 to 6 steps of O(B N).
    ``batched(probs, labels, weights)`` does the same for the refit bootstrap, where resample ``r`` has
    its own probabilities ``probs[r]``.

    Attributes
    ----------
    name : str, default "slope"
        The name the engine reports it under.
    event : {"auto", "positive", "top-label"}, default "auto"
        As in :func:`~sitecal.metrics.calibration_slope_intercept`.

    Examples
    --------
    >>> p1 = [0.2, 0.3, 0.6, 0.9, 0.5, 0.8, 0.3, 0.7]
    >>> probs, labels = [[1 - p, p] for p in p1], [0, 1, 0, 1, 1, 0, 0, 1]
    >>> stat = CalibrationSlopeStatistic()
    >>> stat.evaluate(stat.prepare(probs, labels), np.ones((1, 8))).round(4).tolist()
    [0.5257]
    """

    name: str = "slope"
    _slope: ClassVar[bool] = True


@dataclass(frozen=True)
class CalibrationInterceptStatistic(_LogisticCalibrationStatistic):
    r"""Calibration intercept (calibration-in-the-large) under bootstrap weights.

    As :class:`CalibrationSlopeStatistic`, for :math:`\hat\alpha` of :math:`\mathrm{logit}\,P(y=1) =
    \alpha + \mathrm{logit}(p)` (slope fixed at 1, an offset); NaN where no event or no non-event is
    drawn, or the fit does not converge.

    Attributes
    ----------
    name : str, default "intercept"
    event : {"auto", "positive", "top-label"}, default "auto"

    Examples
    --------
    >>> p1 = [0.2, 0.3, 0.6, 0.9, 0.5, 0.8, 0.3, 0.7]
    >>> probs, labels = [[1 - p, p] for p in p1], [0, 1, 0, 1, 1, 0, 0, 1]
    >>> stat = CalibrationInterceptStatistic()
    >>> stat.evaluate(stat.prepare(probs, labels), np.ones((1, 8))).round(4).tolist()
    [-0.1959]
    """

    name: str = "intercept"
    _slope: ClassVar[bool] = False
