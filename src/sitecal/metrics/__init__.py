"""Calibration metrics: pure functions of (probabilities, labels) returning floats or result objects.

Conventions shared by every function here: ``probs`` is (N, C) with C >= 2 and rows summing to 1
within 1e-6; ``labels`` is (N,) class indices in [0, C). ECE-family bins are ``(lo, hi]`` with a
value of 0 in the first bin; 15 equal-width bins by default. The clinical calibration measures
(slope, intercept, observed/expected) and the AUROC judge one binary event: the positive class for
two classes, "the predicted class is correct" (top-label) for more.

The metrics sitecal knows by name, with their labels, directions and uses, are listed once, in
:mod:`sitecal.metrics.registry`.
"""

from __future__ import annotations

from sitecal.metrics._binning import bin_edges
from sitecal.metrics._calibration_error import (
    ReliabilityCurve,
    expected_calibration_error,
    maximum_calibration_error,
    reliability_curve,
)
from sitecal.metrics._clinical import (
    CalibrationSlopeIntercept,
    calibration_slope_intercept,
    observed_expected_ratio,
)
from sitecal.metrics._debiased import debiased_expected_calibration_error
from sitecal.metrics._ranking import auroc
from sitecal.metrics._recalibration import (
    RECALIBRATION_STATISTICS,
    RecalibrationStatistic,
    TopLabelOEStatistic,
    TopLabelRecalibration,
    top_label_recalibration,
)
from sitecal.metrics._scores import NLL_CLIP, accuracy, brier_score, negative_log_likelihood
from sitecal.metrics._smooth import smooth_ece, smooth_ece_at
from sitecal.metrics._softmax import PROBABILITY_FLOOR, log_probabilities, softmax, softmax_class_major
from sitecal.metrics._statistics import MassECEStatistic, SmoothECEStatistic, SumMetricStatistic
from sitecal.metrics.registry import METRIC_NAMES, METRICS, Metric, metric_statistic

__all__ = [
    "METRICS",
    "METRIC_NAMES",
    "NLL_CLIP",
    "PROBABILITY_FLOOR",
    "RECALIBRATION_STATISTICS",
    "CalibrationSlopeIntercept",
    "MassECEStatistic",
    "Metric",
    "RecalibrationStatistic",
    "ReliabilityCurve",
    "SmoothECEStatistic",
    "SumMetricStatistic",
    "TopLabelOEStatistic",
    "TopLabelRecalibration",
    "accuracy",
    "auroc",
    "bin_edges",
    "brier_score",
    "calibration_slope_intercept",
    "debiased_expected_calibration_error",
    "expected_calibration_error",
    "log_probabilities",
    "maximum_calibration_error",
    "metric_statistic",
    "negative_log_likelihood",
    "observed_expected_ratio",
    "reliability_curve",
    "smooth_ece",
    "smooth_ece_at",
    "softmax",
    "softmax_class_major",
    "top_label_recalibration",
]
