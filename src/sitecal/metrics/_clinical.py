"""Calibration as clinical-prediction reviewers report it: slope, intercept and observed/expected.

The event whose probability is judged: for two classes, the positive class (column 1, label 1), as
in the clinical-prediction literature; for more classes, the top-label event "the predicted class is
correct" with the top-label confidence as its probability (the event the top-label ECE judges).
``event=`` chooses explicitly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_option, check_probs
from sitecal.errors import DataError
from sitecal.metrics._calibration_error import top_label

__all__ = [
    "EVENTS",
    "LOGIT_CLIP",
    "CalibrationSlopeIntercept",
    "Event",
    "calibration_slope_intercept",
    "event_outcome",
    "observed_expected_ratio",
]

Event = Literal["auto", "positive", "top-label"]
EVENTS = ("auto", "positive", "top-label")

#: Probabilities are clipped to ``[LOGIT_CLIP, 1 - LOGIT_CLIP]`` before the logit, so a probability of
#: exactly 0 or 1 has logit about -/+ 27.6 instead of an infinity.
LOGIT_CLIP = 1e-12

_TOLERANCE = 1e-10
_MAX_ITER = 100


def event_outcome(
    probs: NDArray[np.float64], labels: NDArray[np.int64], event: str, *, func: str
) -> tuple[NDArray[np.float64], NDArray[np.float64], str]:
    """Event probability, 0/1 outcome and the resolved event name ("positive" or "top-label")."""
    which = check_option(event, name="event", func=func, options=EVENTS)
    if which == "auto":
        which = "positive" if probs.shape[1] == 2 else "top-label"
    if which == "positive":
        if probs.shape[1] != 2:
            raise DataError(
                f"The 'event' parameter of {func} can be 'positive' only for two classes. "
                f"Got {probs.shape[1]} classes; use event='top-label' (or 'auto')."
            )
        return probs[:, 1].copy(), (labels == 1).astype(np.float64), which
    confidence, correct = top_label(probs, labels)
    return confidence, correct, which


@dataclass(frozen=True)
class CalibrationSlopeIntercept:
    r"""Logistic recalibration of the event on the logit of its predicted probability.

    Attributes
    ----------
    slope : float
        :math:`\beta` of :math:`\mathrm{logit}\,P(Y=1) = \alpha + \beta\,\mathrm{logit}(p)`. 1 is
        ideal; < 1 means predictions too extreme (over-confident), > 1 too moderate. NaN when the
        maximum-likelihood fit does not exist (no events, no non-events, perfect separation, or all
        probabilities equal).
    intercept : float
        Calibration-in-the-large :math:`\alpha` of :math:`\mathrm{logit}\,P(Y=1) = \alpha +
        \mathrm{logit}(p)` (slope fixed at 1, an offset). 0 is ideal; < 0 means risks
        over-estimated on average. NaN when there are no events or no non-events.
    converged : bool
        Both fits reached the tolerance (a returned number is then the maximum-likelihood estimate).
    n : int
        Samples.
    n_events : int
        Samples with the event.
    event : str
        ``"positive"`` (class 1 of two) or ``"top-label"`` (predicted class is correct).
    """

    slope: float
    intercept: float
    converged: bool
    n: int
    n_events: int
    event: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (NaN becomes None)."""

        def num(v: float) -> float | None:
            return None if math.isnan(v) else float(v)

        return {
            "slope": num(self.slope),
            "intercept": num(self.intercept),
            "converged": self.converged,
            "n": self.n,
            "n_events": self.n_events,
            "event": self.event,
        }


def _logit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    q = np.clip(p, LOGIT_CLIP, 1.0 - LOGIT_CLIP)
    out: NDArray[np.float64] = np.log(q) - np.log1p(-q)
    return out


def _log_likelihood(eta: NDArray[np.float64], y: NDArray[np.float64]) -> float:
    return float(np.sum(y * eta - np.logaddexp(0.0, eta)))


def _newton(
    design: NDArray[np.float64],
    y: NDArray[np.float64],
    offset: NDArray[np.float64],
    start: NDArray[np.float64],
) -> tuple[NDArray[np.float64], bool]:
    """Maximise the logistic likelihood by Newton (IRLS) steps with step halving.

    Stops when the largest step is below 1e-10 (relative to 1 + |coefficient|); the likelihood is
    concave, so with an existing maximum and a non-singular information matrix this is the MLE.
    """
    beta = start.astype(np.float64).copy()
    ll = _log_likelihood(offset + design @ beta, y)
    for _ in range(_MAX_ITER):  # a loop over Newton iterations, not samples
        eta = offset + design @ beta
        mu = 0.5 * (1.0 + np.tanh(0.5 * eta))  # expit without overflow warnings
        gradient = design.T @ (y - mu)
        information = (design * (mu * (1.0 - mu))[:, None]).T @ design
        try:
            step = np.linalg.solve(information, gradient)
        except np.linalg.LinAlgError:
            return beta, False
        if not np.all(np.isfinite(step)):
            return beta, False
        for _ in range(60):  # step halving keeps the likelihood from decreasing
            candidate = beta + step
            ll_new = _log_likelihood(offset + design @ candidate, y)
            if ll_new >= ll - 1e-12 * (1.0 + abs(ll)):
                break
            step = step / 2.0
        beta, ll = candidate, ll_new
        if np.max(np.abs(step) / (1.0 + np.abs(beta))) < _TOLERANCE:
            return beta, True
    return beta, False


def calibration_slope_intercept(
    probs: ArrayLike, labels: ArrayLike, *, event: Event = "auto"
) -> CalibrationSlopeIntercept:
    r"""Calibration slope and calibration-in-the-large intercept (logistic recalibration).

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
        Predicted class probabilities; rows sum to 1 within 1e-6.
    labels : array_like, shape (N,)
        True class indices in ``[0, C)``.
    event : {"auto", "positive", "top-label"}, default "auto"
        ``"positive"``: the event is label 1, its probability ``probs[:, 1]`` (two classes only).
        ``"top-label"``: the event is "the argmax class (ties: lowest index) is correct", its
        probability the top-label confidence ``max_k p_k``. ``"auto"``: positive for two classes,
        top-label otherwise.

    Returns
    -------
    CalibrationSlopeIntercept

    Notes
    -----
    With :math:`z_i = \mathrm{logit}(p_i)` (``p`` clipped to ``[1e-12, 1 - 1e-12]``) and the 0/1
    event :math:`y_i`, two logistic regressions are fitted by maximum likelihood:

    - slope: :math:`\mathrm{logit}\,P(y_i = 1) = a + b\,z_i`; the **calibration slope** is
      :math:`\hat b` (its own intercept :math:`\hat a` is not reported: it is not interpretable
      alone);
    - intercept: :math:`\mathrm{logit}\,P(y_i = 1) = \alpha + z_i` (slope fixed at 1, :math:`z_i` an
      offset); the **calibration intercept** (calibration-in-the-large) is :math:`\hat\alpha`.

    These are the "weak calibration" measures of Van Calster et al. (2016, 2019). Both fits use Newton
    steps (IRLS) with step halving from :math:`(a, b) = (0, 1)` and :math:`\alpha = 0` until the
    largest step is below 1e-10 relative, at most 100 iterations. The maximum-likelihood estimate does
    not exist when all or none of the events occur, or (slope only) when :math:`z` separates the
    events perfectly or takes a single value; those are checked first and give NaN with
    ``converged=False``, never a large finite number from a diverging fit.

    For more than two classes the top-label event mixes classes: a slope below 1 then says the
    model's confidence in its own predictions is too extreme, not which class is miscalibrated.

    References
    ----------
    D. R. Cox. "Two further applications of a model for binary regression." Biometrika 45, 1958.
    B. Van Calster et al. "A calibration hierarchy for risk models was defined: from utopia to
    empirical data." J Clin Epidemiol 74, 2016. B. Van Calster, D. J. McLernon, M. van Smeden,
    L. Wynants, E. W. Steyerberg. "Calibration: the Achilles heel of predictive analytics."
    BMC Medicine 17, 230 (2019).

    Examples
    --------
    >>> p1 = [0.2, 0.3, 0.6, 0.9, 0.5, 0.8, 0.3, 0.7]
    >>> res = calibration_slope_intercept([[1 - p, p] for p in p1], [0, 1, 0, 1, 1, 0, 0, 1])
    >>> round(res.slope, 4), round(res.intercept, 4), res.converged, res.event  # too extreme, too high
    (0.5257, -0.1959, True, 'positive')
    """
    func = "calibration_slope_intercept"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    prob, outcome, which = event_outcome(p, y, event, func=func)
    n, n_events = int(p.shape[0]), int(outcome.sum())
    z = _logit(prob)
    slope = intercept = math.nan
    converged = False
    if 0 < n_events < n:
        alpha, ok_intercept = _newton(np.ones((n, 1)), outcome, z, np.zeros(1))
        intercept = float(alpha[0]) if ok_intercept else math.nan
        z_events, z_others = z[outcome == 1.0], z[outcome == 0.0]
        separated = z_events.min() >= z_others.max() or z_events.max() <= z_others.min()
        ok_slope = False
        if not separated:  # overlap also rules out all z equal
            coef, ok_slope = _newton(
                np.stack([np.ones(n), z], axis=1), outcome, np.zeros(n), np.array([0.0, 1.0])
            )
            slope = float(coef[1]) if ok_slope else math.nan
        converged = ok_intercept and ok_slope
    return CalibrationSlopeIntercept(
        slope=slope, intercept=intercept, converged=converged, n=n, n_events=n_events, event=which
    )


def observed_expected_ratio(probs: ArrayLike, labels: ArrayLike, *, event: Event = "auto") -> float:
    r"""Observed over expected events, :math:`O/E = \sum_i y_i / \sum_i p_i`.

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
    labels : array_like, shape (N,)
    event : {"auto", "positive", "top-label"}, default "auto"
        As in :func:`calibration_slope_intercept`: the positive class for two classes, the top-label
        event "predicted class is correct" (probability: top-label confidence) otherwise.

    Returns
    -------
    float
        >= 0; 1 is calibrated in the large, < 1 means the model expects more events than occur
        (for the top-label event: over-confident on average, accuracy below mean confidence).
        ``inf`` when no event is expected (all probabilities 0) but some occur; NaN when neither.

    Notes
    -----
    A ratio of sums, so over resamples it is exact from per-cluster sums (bootstrap name
    ``"oe_ratio"``). For the top-label event, :math:`O/E = \mathrm{accuracy} / \mathrm{mean\ confidence}`.

    References
    ----------
    G. S. Collins et al. "TRIPOD+AI statement." BMJ 385, 2024. B. Van Calster et al. BMC Medicine
    17, 230 (2019) (mean calibration).

    Examples
    --------
    >>> observed_expected_ratio([[0.8, 0.2], [0.6, 0.4], [0.5, 0.5], [0.1, 0.9]], [0, 1, 1, 1])
    1.5
    """
    func = "observed_expected_ratio"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    prob, outcome, _ = event_outcome(p, y, event, func=func)
    observed, expected = float(outcome.sum()), float(prob.sum())
    if expected == 0.0:
        return math.inf if observed > 0 else math.nan
    return observed / expected
