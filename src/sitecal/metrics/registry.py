"""The metric registry: the one list of the metrics sitecal knows, and what each one is.

Every part that names metrics reads it: the protocol (which names ``evaluation.metrics`` and an
acceptance criterion accept, and the default list), the statistics (which metrics the bootstrap engine
evaluates, and how), the evaluation, the report (labels, which way is better, the Methods wording) and
the tests (the invariants run over every entry, and each entry is checked against a reference). Adding
a metric is one entry in :data:`METRICS`.

>>> from sitecal.metrics.registry import metric, names
>>> names(reported=True)
('ece', 'ece_debiased', 'smooth_ece', 'nll', 'brier', 'accuracy')
>>> names(default=True)
('ece', 'ece_debiased', 'nll', 'brier', 'accuracy')
>>> names(comparable=True)
('ece', 'calibration_gap', 'oe_ratio', 'nll', 'brier', 'accuracy')
>>> m = metric("brier")
>>> m.label, m.direction, m.bootstrappable
('Brier score', 'lower', True)
>>> m([[0.75, 0.25], [0.5, 0.5]], [0, 0])
0.3125
"""

from __future__ import annotations

import math

from numpy.typing import ArrayLike

from sitecal._validation import check_int, check_option
from sitecal.metrics._calibration_error import expected_calibration_error, maximum_calibration_error
from sitecal.metrics._clinical import calibration_slope_intercept, observed_expected_ratio
from sitecal.metrics._debiased import debiased_expected_calibration_error
from sitecal.metrics._metric import Direction, Metric, MetricFunction
from sitecal.metrics._ranking import auroc
from sitecal.metrics._scores import accuracy, brier_score, negative_log_likelihood
from sitecal.metrics._signed_gap import signed_calibration_gap, signed_gap_sums
from sitecal.metrics._smooth import smooth_ece
from sitecal.metrics._statistics import (
    MassECEStatistic,
    SmoothECEStatistic,
    WeightedStatistic,
    accuracy_sums,
    brier_sums,
    classwise_ece_sums,
    debiased_ece_sums,
    ece_sums,
    mce_sums,
    nll_sums,
    oe_ratio_sums,
)

__all__ = [
    "ACCURACY",
    "AUROC",
    "BRIER",
    "CALIBRATION_GAP",
    "CLASSWISE_ECE",
    "ECE",
    "ECE_DEBIASED",
    "ECE_DEBIASED_MASS",
    "ECE_MASS",
    "INTERCEPT",
    "MCE",
    "METRICS",
    "METRIC_NAMES",
    "NLL",
    "OE_RATIO",
    "SLOPE",
    "SMOOTH_ECE",
    "Direction",
    "Metric",
    "MetricFunction",
    "metric",
    "metric_statistic",
    "names",
]


def _ece(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return expected_calibration_error(probs, labels, n_bins=n_bins)


def _ece_mass(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return expected_calibration_error(probs, labels, n_bins=n_bins, binning="mass")


def _classwise_ece(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return expected_calibration_error(probs, labels, n_bins=n_bins, kind="classwise")


def _mce(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return maximum_calibration_error(probs, labels, n_bins=n_bins)


def _ece_debiased(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return debiased_expected_calibration_error(probs, labels, n_bins=n_bins)


def _ece_debiased_mass(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return debiased_expected_calibration_error(probs, labels, n_bins=n_bins, binning="mass")


def _smooth_ece(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return smooth_ece(probs, labels)


def _calibration_gap(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return signed_calibration_gap(probs, labels)


def _oe_ratio(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return observed_expected_ratio(probs, labels)


def _slope(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return calibration_slope_intercept(probs, labels).slope


def _intercept(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return calibration_slope_intercept(probs, labels).intercept


def _auroc(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return auroc(probs, labels)


def _nll(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return negative_log_likelihood(probs, labels)


def _brier(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return brier_score(probs, labels)


def _accuracy(probs: ArrayLike, labels: ArrayLike, n_bins: int) -> float:
    return accuracy(probs, labels)


_UNIT = (0.0, 1.0)

ECE = Metric(
    name="ece",
    label="ECE",
    function=_ece,
    direction="lower",
    description="top-label expected calibration error, equal-width bins",
    bounds=_UNIT,
    weighted=ece_sums,
    reported=True,
    default=True,
    comparable=True,
)
ECE_MASS = Metric(
    name="ece_mass",
    label="ECE (equal-mass bins)",
    function=_ece_mass,
    direction="lower",
    description="top-label expected calibration error, equal-mass (adaptive) bins",
    bounds=_UNIT,
    weighted=MassECEStatistic,
)
CLASSWISE_ECE = Metric(
    name="classwise_ece",
    label="Class-wise ECE",
    function=_classwise_ece,
    direction="lower",
    description="expected calibration error of every class's probability, averaged over classes",
    bounds=_UNIT,
    weighted=classwise_ece_sums,
)
MCE = Metric(
    name="mce",
    label="MCE",
    function=_mce,
    direction="lower",
    description="maximum calibration error: the largest gap between accuracy and confidence in a bin",
    bounds=_UNIT,
    weighted=mce_sums,
)
ECE_DEBIASED = Metric(
    name="ece_debiased",
    label="Debiased ECE",
    function=_ece_debiased,
    direction="lower",
    description=(
        "debiased top-label calibration error (Kumar et al., 2019), equal-width bins: the square root of "
        "an unbiased estimate of the squared (l2) error, clamped at 0 for display (a clamped 0 means the "
        "observed gaps are smaller than sampling noise, not that the error is 0). On the scale of ECE: "
        "the l2 error bounds the l1 error from above, but the plug-in ECE estimate is biased upward on "
        "small groups, so this estimate can be the smaller of the two. Its interval resamples the "
        "unclamped squared estimate"
    ),
    bounds=_UNIT,
    weighted=debiased_ece_sums,
    squared=True,
    reported=True,
    default=True,
    criterion=True,
)
ECE_DEBIASED_MASS = Metric(
    name="ece_debiased_mass",
    label="Debiased ECE (equal-mass bins)",
    function=_ece_debiased_mass,
    direction="lower",
    description="debiased top-label l2 calibration error (Kumar et al., 2019), equal-mass bins",
    bounds=_UNIT,
)
SMOOTH_ECE = Metric(
    name="smooth_ece",
    label="Smooth ECE",
    function=_smooth_ece,
    direction="lower",
    description=(
        "top-label smooth calibration error without bins (Błasiok & Nakkiran, 2023), a consistent "
        "calibration measure: residuals smoothed by a reflected Gaussian kernel whose width is chosen as the "
        "fixed point where it equals the error it measures; still a plug-in estimate of a non-negative "
        "quantity, so biased upward in small groups"
    ),
    bounds=_UNIT,
    weighted=SmoothECEStatistic,
    reported=True,
)
CALIBRATION_GAP = Metric(
    name="calibration_gap",
    label="Calibration gap (confidence − accuracy)",
    function=_calibration_gap,
    direction="target",
    target=0.0,
    description=(
        "signed top-label calibration gap: mean confidence minus accuracy (positive: over-confident, "
        "negative: under-confident); a mean of per-study terms, so not biased by group size, but blind to "
        "errors that cancel across confidence levels"
    ),
    bounds=(-1.0, 1.0),
    weighted=signed_gap_sums,
    comparable=True,
)
OE_RATIO = Metric(
    name="oe_ratio",
    label="O:E",
    function=_oe_ratio,
    direction="target",
    target=1.0,
    description="observed over expected events (the positive class, or the top-label event)",
    bounds=(0.0, math.inf),
    weighted=oe_ratio_sums,
    criterion=True,
    recalibration=True,
    comparable=True,
)
SLOPE = Metric(
    name="slope",
    label="Calibration slope",
    function=_slope,
    direction="target",
    target=1.0,
    description="slope of the logistic recalibration of the event on the logit of its probability",
    bounds=(-math.inf, math.inf),
    criterion=True,
    recalibration=True,
)
INTERCEPT = Metric(
    name="intercept",
    label="Calibration intercept",
    function=_intercept,
    direction="target",
    target=0.0,
    description="calibration-in-the-large: the logistic recalibration's intercept with the slope fixed at 1",
    bounds=(-math.inf, math.inf),
    criterion=True,
    recalibration=True,
)
AUROC = Metric(
    name="auroc",
    label="AUROC",
    function=_auroc,
    direction="higher",
    description="area under the ROC curve (one-vs-rest, macro-averaged for more than two classes)",
    bounds=_UNIT,
    needs_every_class=True,
)
NLL = Metric(
    name="nll",
    label="NLL",
    function=_nll,
    direction="lower",
    description="mean negative log-likelihood of the true class (nats)",
    bounds=(0.0, math.inf),
    weighted=nll_sums,
    reported=True,
    default=True,
    criterion=True,
    comparable=True,
)
BRIER = Metric(
    name="brier",
    label="Brier score",
    function=_brier,
    direction="lower",
    description="mean squared error of the predicted probability vector",
    bounds=(0.0, 2.0),
    weighted=brier_sums,
    reported=True,
    default=True,
    criterion=True,
    comparable=True,
)
ACCURACY = Metric(
    name="accuracy",
    label="Accuracy",
    function=_accuracy,
    direction="higher",
    description="share of studies whose most probable class is the true one",
    bounds=_UNIT,
    weighted=accuracy_sums,
    reported=True,
    default=True,
    criterion=True,
    comparable=True,
)

#: Every metric, in registry order (the order of every list derived from it).
METRICS: tuple[Metric, ...] = (
    ECE,
    ECE_MASS,
    CLASSWISE_ECE,
    MCE,
    ECE_DEBIASED,
    ECE_DEBIASED_MASS,
    SMOOTH_ECE,
    CALIBRATION_GAP,
    OE_RATIO,
    SLOPE,
    INTERCEPT,
    AUROC,
    NLL,
    BRIER,
    ACCURACY,
)
_BY_NAME = {m.name: m for m in METRICS}
if len(_BY_NAME) != len(METRICS):  # pragma: no cover - a registry edit that repeats a name
    raise ValueError("Every metric in METRICS needs its own name.")


def names(
    *,
    reported: bool | None = None,
    criterion: bool | None = None,
    recalibration: bool | None = None,
    bootstrappable: bool | None = None,
    summable: bool | None = None,
    default: bool | None = None,
    comparable: bool | None = None,
) -> tuple[str, ...]:
    """Names of the metrics with the given properties (None: either), in registry order.

    >>> names(criterion=True)
    ('ece_debiased', 'oe_ratio', 'slope', 'intercept', 'nll', 'brier', 'accuracy')
    """
    wanted = {
        "reported": reported,
        "criterion": criterion,
        "recalibration": recalibration,
        "bootstrappable": bootstrappable,
        "summable": summable,
        "default": default,
        "comparable": comparable,
    }
    return tuple(m.name for m in METRICS if all(v is None or getattr(m, k) is v for k, v in wanted.items()))


def metric(name: str) -> Metric:
    """The registry entry of ``name`` (matched case-insensitively); DataError with a guess otherwise."""
    return _BY_NAME[check_option(name, name="name", func="metric", options=tuple(_BY_NAME))]


#: Names accepted by :func:`metric_statistic` (and by ``sitecal.stats.bootstrap_metrics``).
METRIC_NAMES = names(bootstrappable=True)


def metric_statistic(name: str, *, n_bins: int = 15) -> WeightedStatistic:
    """Package a metric for :func:`sitecal.stats.bootstrap_interval`, with ``data=(probs, labels)``.

    Parameters
    ----------
    name : str
        One of :data:`METRIC_NAMES` (the registry's bootstrappable metrics):
        ``"ece"`` is top-label ECE with equal-width bins, ``"ece_mass"`` with equal-mass bins,
        ``"classwise_ece"`` class-wise with equal-width bins, ``"mce"`` top-label MCE with
        equal-width bins, ``"ece_debiased"`` the debiased top-label l2 error
        (:func:`~sitecal.metrics.debiased_expected_calibration_error`) with equal-width bins from
        per-bin counts, correct and confidence sums, ``"calibration_gap"`` the signed top-label gap
        (mean confidence minus accuracy) from the per-bin sums of correctness minus confidence, ``"oe_ratio"``
        (:func:`~sitecal.metrics.observed_expected_ratio`, ``event="auto"``) a ratio of two sums,
        ``"smooth_ece"`` the top-label smooth ECE with its bandwidth refitted under every weighting
        (binned on the exact function's grid and smoothed by FFT: within 1e-5 of
        :func:`~sitecal.metrics.smooth_ece` on the repeated rows when it is at least 0.005); the
        scores are those of :mod:`sitecal.metrics`. Calibration slope/intercept and AUROC are not
        sums of per-row terms and have no entry here.
    n_bins : int, default 15

    Returns
    -------
    SumMetricStatistic, MassECEStatistic or SmoothECEStatistic
        All are callables ``stat(probs, labels, weights=W)`` with ``W`` of shape (B, N), returning
        (B,); with ``W = ones((1, N))`` the value equals the metric function's (the smooth ECE's to
        the accuracy above).

    Examples
    --------
    >>> import numpy as np
    >>> stat = metric_statistic("accuracy")
    >>> stat([[0.9, 0.1], [0.2, 0.8]], [0, 0], weights=np.array([[1.0, 1.0], [2.0, 0.0]])).tolist()
    [0.5, 1.0]
    """
    func = "metric_statistic"
    which = check_option(name, name="name", func=func, options=METRIC_NAMES)
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    return _BY_NAME[which].statistic(n_bins=bins)
