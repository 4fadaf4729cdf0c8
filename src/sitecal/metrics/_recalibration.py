r"""Top-label logistic recalibration: slope, intercept and observed/expected, with documented gaps.

The event is "the predicted class is correct", its probability the top-label confidence
:math:`c_i = \max_k p_{ik}`, the event the top-label ECE judges. With :math:`z_i = \mathrm{logit}(c_i)`
and :math:`y_i = 1[\text{argmax}_k p_{ik} = \text{label}_i]`:

- **calibration slope** :math:`\hat b` of the two-parameter fit :math:`\mathrm{logit}\,P(y=1) = a + b z`;
- **calibration intercept** (calibration-in-the-large) :math:`\hat\alpha` of the offset model
  :math:`\mathrm{logit}\,P(y=1) = \alpha + z` (slope fixed at 1, the usual convention: Van Calster et
  al. 2016; Steyerberg, *Clinical Prediction Models*, 2019, ch. 15);
- **observed/expected** :math:`O/E = \sum_i y_i / \sum_i c_i` = accuracy / mean confidence.

:func:`top_label_recalibration` returns one frozen result whose numbers are ``None`` (never NaN) with a
reason when they do not exist: no correct or no wrong prediction (no maximum-likelihood fit), confidence
that separates correct from wrong predictions, or a fit that does not converge.
:class:`RecalibrationStatistic` evaluates the slope or intercept under bootstrap weights, a whole chunk
of resamples at once (Newton steps vectorised over resamples), and :class:`TopLabelOEStatistic` the O/E
from weighted sums, for :func:`sitecal.stats.bootstrap_interval`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

from sitecal._validation import check_labels, check_option, check_probs
from sitecal.errors import DataError
from sitecal.metrics._calibration_error import top_label
from sitecal.metrics._clinical import _newton
from sitecal.metrics._logistic import full_sample_start, weighted_logistic_fit
from sitecal.metrics._logistic import logit as _logit

__all__ = [
    "RECALIBRATION_STATISTICS",
    "RecalibrationStatistic",
    "TopLabelOEStatistic",
    "TopLabelRecalibration",
    "top_label_recalibration",
]

RecalibrationName = Literal["slope", "intercept"]
#: Names accepted by :class:`RecalibrationStatistic`.
RECALIBRATION_STATISTICS = ("slope", "intercept")

# Why a value is None: codes, which the documents store and the report words
# (``sitecal.results.RecalibrationNote`` and ``SiteExclusionReason`` list the same codes).
#: No prediction is correct: the logistic fits have no maximum-likelihood estimate.
NO_CORRECT = "no_correct_prediction"
#: Every prediction is correct: the logistic fits have no maximum-likelihood estimate.
ALL_CORRECT = "every_prediction_correct"
#: The confidence separates correct from wrong predictions (or takes one value): no slope estimate.
SEPARATED = "confidence_separates"
#: The logistic fit did not converge in 100 Newton steps.
NOT_CONVERGED = "fit_not_converged"
#: No prediction is correct: log(O/E) is undefined.
NO_LOG = "log_oe_undefined"
#: Fewer than two clusters: no variance of log(O/E).
ONE_CLUSTER = "too_few_clusters"


@dataclass(frozen=True)
class TopLabelRecalibration:
    """Top-label calibration slope, intercept and O/E of one set of predictions.

    Attributes
    ----------
    slope, intercept : float or None
        See the module docstring; ``None`` when the estimate does not exist (``slope_note`` /
        ``intercept_note`` say why).
    slope_se, intercept_se : float or None
        Cluster-robust (sandwich) standard errors of the two, as ``statsmodels`` GLM with
        ``cov_type="cluster"`` computes them (small-sample factor ``G/(G-1) (N-1)/(N-p)``); ``None``
        with the estimate, or with fewer than two clusters.
    oe_ratio : float
        Observed / expected = accuracy / mean confidence (always defined: confidence >= 1/C > 0).
    log_oe_se : float or None
        Cluster-robust (delta-method) standard error of ``log(oe_ratio)``; ``None`` with ``oe_note``
        when no prediction is correct or there are fewer than two clusters.
    accuracy, mean_confidence : float
    n, n_correct, n_clusters : int
    slope_note, intercept_note, oe_note : str
        ``""`` or a code naming the reason a value is ``None``: ``"no_correct_prediction"``,
        ``"every_prediction_correct"``, ``"confidence_separates"``, ``"fit_not_converged"`` (slope and
        intercept); ``"log_oe_undefined"``, ``"too_few_clusters"`` (``log_oe_se``).
    """

    slope: float | None
    intercept: float | None
    slope_se: float | None
    intercept_se: float | None
    oe_ratio: float
    log_oe_se: float | None
    accuracy: float
    mean_confidence: float
    n: int
    n_correct: int
    n_clusters: int
    slope_note: str = ""
    intercept_note: str = ""
    oe_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of the attributes (no NaN: missing values are ``None``)."""
        return asdict(self)


def log_oe_standard_error(
    correct: NDArray[np.float64], confidence: NDArray[np.float64], cluster_codes: NDArray[np.int64]
) -> float | None:
    r"""Cluster-robust delta-method standard error of :math:`\log(O/E)`; None if O = 0 or < 2 clusters.

    :math:`\log(O/E) = \log O - \log E` with :math:`O = \sum_c Y_c`, :math:`E = \sum_c C_c` (per-cluster
    sums of correctness and confidence). Linearising, each cluster contributes
    :math:`d_c = Y_c / O - C_c / E` (these sum to 0) and
    :math:`\widehat{\mathrm{Var}} = \frac{K}{K - 1} \sum_c d_c^2` over the :math:`K` clusters (the ratio
    estimator's linearisation variance with the usual small-sample factor).
    """
    observed, expected = float(correct.sum()), float(confidence.sum())
    k = int(cluster_codes.max()) + 1 if cluster_codes.size else 0
    if observed == 0.0 or k < 2:
        return None
    y_c = np.bincount(cluster_codes, weights=correct, minlength=k)
    c_c = np.bincount(cluster_codes, weights=confidence, minlength=k)
    d = y_c / observed - c_c / expected
    return math.sqrt(k / (k - 1) * float(np.sum(d * d)))


#: Spread of logit(confidence) below which the calibration slope is not estimated.
_FLAT_LOGIT = 1e-6


def _cluster_se(
    design: NDArray[np.float64],
    y: NDArray[np.float64],
    offset: NDArray[np.float64],
    coef: NDArray[np.float64],
    codes: NDArray[np.int64],
) -> NDArray[np.float64] | None:
    r"""Cluster-robust standard errors of a logistic fit: :math:`\sqrt{\mathrm{diag}(c\,A^{-1} M A^{-1})}`.

    :math:`A = X^\top \mathrm{diag}(\mu(1-\mu)) X`, :math:`M = \sum_g U_g U_g^\top` with
    :math:`U_g = \sum_{i \in g} x_i (y_i - \mu_i)`, :math:`c = \frac{G}{G-1}\frac{N-1}{N-p}`.
    """
    n, k = design.shape
    g = int(codes.max()) + 1
    if g < 2 or n <= k:
        return None
    mu = expit(offset + design @ coef)
    try:
        bread = np.linalg.inv((design * (mu * (1.0 - mu))[:, None]).T @ design)
    except np.linalg.LinAlgError:  # no information on a coefficient: no standard error
        return None
    scores = design * (y - mu)[:, None]
    per_cluster = np.stack([np.bincount(codes, weights=scores[:, j], minlength=g) for j in range(k)], axis=1)
    meat = per_cluster.T @ per_cluster
    factor = g / (g - 1) * (n - 1) / (n - k)
    variance = np.diag(factor * bread @ meat @ bread)
    return np.sqrt(np.maximum(variance, 0.0))


def _cluster_codes(clusters: ArrayLike | None, n: int, *, func: str) -> NDArray[np.int64]:
    """Each row's cluster as a code in ``[0, K)`` (None: each row its own cluster)."""
    if clusters is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(clusters)
    if ids.shape != (n,):
        raise DataError(
            f"The 'clusters' parameter of {func} must have shape ({n},), one id per row. Got {ids.shape}."
        )
    return np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64)


@dataclass(frozen=True)
class _Fitted:
    """One recalibration coefficient: its estimate and cluster-robust standard error, or why they are None."""

    value: float | None
    standard_error: float | None
    note: str  # "" or the code of the reason ``value`` is None


def _intercept_fit(z: NDArray[np.float64], correct: NDArray[np.float64], codes: NDArray[np.int64]) -> _Fitted:
    """Calibration-in-the-large: ``alpha`` of ``logit P(y=1) = alpha + z`` (``z`` an offset: slope 1)."""
    ones = np.ones((z.shape[0], 1))
    alpha, ok = _newton(ones, correct, z, np.zeros(1))
    if not ok:
        return _Fitted(None, None, NOT_CONVERGED)
    se = _cluster_se(ones, correct, z, alpha, codes)
    return _Fitted(float(alpha[0]), None if se is None else float(se[0]), "")


def _slope_fit(z: NDArray[np.float64], correct: NDArray[np.float64], codes: NDArray[np.int64]) -> _Fitted:
    """Calibration slope: ``b`` of ``logit P(y=1) = a + b z``; none where ``z`` separates the outcomes."""
    n = z.shape[0]
    z1, z0 = z[correct == 1.0], z[correct == 0.0]
    # a confidence that hardly varies has no slope to estimate either: the fit would "converge" on a
    # huge slope with a singular information matrix
    flat = float(np.ptp(z)) <= _FLAT_LOGIT
    if flat or z1.min() >= z0.max() or z1.max() <= z0.min():
        return _Fitted(None, None, SEPARATED)
    design = np.hstack([np.ones((n, 1)), z[:, None]])
    coef, ok = _newton(design, correct, np.zeros(n), np.array([0.0, 1.0]))
    if not ok:
        return _Fitted(None, None, NOT_CONVERGED)
    se = _cluster_se(design, correct, np.zeros(n), coef, codes)
    return _Fitted(float(coef[1]), None if se is None else float(se[1]), "")


def top_label_recalibration(
    probs: ArrayLike, labels: ArrayLike, *, clusters: ArrayLike | None = None
) -> TopLabelRecalibration:
    r"""Top-label calibration slope, calibration-in-the-large intercept and observed/expected ratio.

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
        Predicted class probabilities; rows sum to 1 within 1e-6.
    labels : array_like, shape (N,)
        True class indices in ``[0, C)``.
    clusters : array_like, shape (N,), optional
        Cluster (patient) id per row, for the standard error of ``log(O/E)``. Default: each row its own.

    Returns
    -------
    TopLabelRecalibration

    Notes
    -----
    Slope: maximum-likelihood :math:`\hat b` of :math:`\mathrm{logit}\,P(y=1) = a + b\,\mathrm{logit}(c)`;
    intercept: :math:`\hat\alpha` of :math:`\mathrm{logit}\,P(y=1) = \alpha + \mathrm{logit}(c)` (slope
    fixed at 1, an offset: calibration-in-the-large), with :math:`c` the top-label confidence clipped to
    ``[1e-12, 1 - 1e-12]`` and :math:`y` whether the argmax (ties: lowest index) is the label; both fits
    as :func:`~sitecal.metrics.calibration_slope_intercept` with ``event="top-label"``. Ideal: slope 1,
    intercept 0, O/E 1; slope < 1 means confidences too extreme, intercept < 0 and O/E < 1
    over-confident on average. When all or no predictions are correct both fits are undefined; when the
    confidence separates the two the slope is: those values are ``None`` with the reason's code in the note.

    References
    ----------
    B. Van Calster et al. "A calibration hierarchy for risk models was defined: from utopia to empirical
    data." J Clin Epidemiol 74, 2016. D. R. Cox. Biometrika 45, 1958.

    Examples
    --------
    >>> probs = [[0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.1, 0.9], [0.55, 0.45], [0.2, 0.8]]
    >>> res = top_label_recalibration(probs, [0, 1, 1, 1, 0, 0])
    >>> round(res.oe_ratio, 4), res.n_correct  # 4 correct / (0.8+0.7+0.6+0.9+0.55+0.8)
    (0.9195, 4)
    """
    func = "top_label_recalibration"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    n = int(p.shape[0])
    codes = _cluster_codes(clusters, n, func=func)
    confidence, correct = top_label(p, y)
    n_correct = int(correct.sum())
    z = _logit(confidence)
    if n_correct == 0 or n_correct == n:
        note = NO_CORRECT if n_correct == 0 else ALL_CORRECT
        intercept, slope = _Fitted(None, None, note), _Fitted(None, None, note)
    else:
        intercept = _intercept_fit(z, correct, codes)
        slope = _slope_fit(z, correct, codes)
    log_se = log_oe_standard_error(correct, confidence, codes)
    oe_note = "" if log_se is not None else (NO_LOG if n_correct == 0 else ONE_CLUSTER)
    return TopLabelRecalibration(
        slope=slope.value,
        intercept=intercept.value,
        slope_se=slope.standard_error,
        intercept_se=intercept.standard_error,
        oe_ratio=float(correct.sum() / confidence.sum()),
        log_oe_se=log_se,
        accuracy=float(correct.mean()),
        mean_confidence=float(confidence.mean()),
        n=n,
        n_correct=n_correct,
        n_clusters=int(codes.max()) + 1,
        slope_note=slope.note,
        intercept_note=intercept.note,
        oe_note=oe_note,
    )


@dataclass(frozen=True)
class _Prepared:
    z: NDArray[np.float64]  # logit of the top-label confidence, (N,)
    y: NDArray[np.float64]  # correctness, (N,)
    confidence: NDArray[np.float64]  # (N,)
    start: tuple[float, float]  # full-sample (a, b) or (alpha, 1): where every resample's fit starts


@dataclass(frozen=True)
class RecalibrationStatistic:
    """Top-label calibration slope or intercept under bootstrap weights (a prepared statistic).

    For :func:`sitecal.stats.bootstrap_interval` with ``data=(probs, labels)``: ``prepare`` validates
    once and fits the full sample; ``evaluate(prepared, W)`` with row weights ``W`` of shape (B, N)
    returns (B,), the maximum-likelihood value on each weighted (resampled) data set, NaN where it does
    not exist (no correct or no wrong prediction drawn; for the slope also separation), so an interval
    over such resamples is reported as undefined. Cost O(B N) per Newton step (about 3 to 5 steps from
    the full-sample estimate); no loop over resamples.

    Attributes
    ----------
    name : {"slope", "intercept"}

    Examples
    --------
    >>> probs = [[0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.1, 0.9], [0.55, 0.45], [0.2, 0.8]]
    >>> stat = RecalibrationStatistic("intercept")
    >>> round(float(stat(probs, [0, 1, 1, 1, 0, 0], weights=np.ones((1, 6)))[0]), 4)
    -0.3
    """

    name: RecalibrationName

    def __post_init__(self) -> None:
        check_option(self.name, name="name", func="RecalibrationStatistic", options=RECALIBRATION_STATISTICS)

    def prepare(self, probs: ArrayLike, labels: ArrayLike) -> _Prepared:
        """Validate once; top-label confidence, its logit and correctness."""
        func = f"RecalibrationStatistic({self.name!r}).prepare"
        p = check_probs(probs, func=func)
        y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
        confidence, correct = top_label(p, y)
        z = _logit(confidence)
        start = full_sample_start(z, correct, slope=self.name == "slope")
        return _Prepared(z, correct, confidence, start)

    def evaluate(self, prepared: _Prepared, weights: NDArray[np.float64]) -> NDArray[np.float64]:
        """Statistic under row weights of shape (B, N); returns (B,) with NaN where undefined."""
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        return weighted_logistic_fit(
            w, prepared.y, prepared.z, slope=self.name == "slope", start=prepared.start
        )

    def __call__(
        self, probs: ArrayLike, labels: ArrayLike, *, weights: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Evaluate under per-row weights of shape (B, N); returns (B,)."""
        return self.evaluate(self.prepare(probs, labels), weights)


@dataclass(frozen=True)
class TopLabelOEStatistic:
    """Top-label observed/expected, accuracy / mean confidence, as a statistic of weighted sums.

    For :func:`sitecal.stats.bootstrap_interval` with ``data=(probs, labels)`` (the fast path: per-row
    terms ``[1, correct, confidence]``, so a resample costs O(clusters)). Unlike
    ``metric_statistic("oe_ratio")``, whose event is the positive class for two classes, the event is
    always top-label correctness.

    Examples
    --------
    >>> probs = [[0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.1, 0.9], [0.55, 0.45], [0.2, 0.8]]
    >>> stat = TopLabelOEStatistic()
    >>> stat.from_sums(stat.row_terms(probs, [0, 1, 1, 1, 0, 0]).sum(axis=0)[None, :]).round(4).tolist()
    [0.9195]
    """

    name: str = "top_label_oe_ratio"

    def row_terms(self, probs: ArrayLike, labels: ArrayLike) -> NDArray[np.float64]:
        """Per-row terms ``[1, correct, confidence]``, shape (N, 3)."""
        func = "TopLabelOEStatistic.row_terms"
        p = check_probs(probs, func=func)
        y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
        confidence, correct = top_label(p, y)
        return np.stack([np.ones(p.shape[0]), correct, confidence], axis=1)

    def from_sums(self, sums: NDArray[np.float64]) -> NDArray[np.float64]:
        """O/E from weighted sums, (B, 3) -> (B,) (confidence >= 1/C, so the denominator is > 0)."""
        out: NDArray[np.float64] = sums[:, 1] / sums[:, 2]
        return out
