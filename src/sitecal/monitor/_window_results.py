"""One window of one group: its counts, what needs no label, and, with labels, its metrics and evidence.

The result is a JSON object, as the history stores it: computed once per window and group, and again only
when the window's rows change (labels that came late). Everything in it is a function of the rows, the
baseline and the seed, so a window computed again gives the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats as scipy_stats

from sitecal.metrics.registry import ACCURACY, CALIBRATION_GAP, ECE
from sitecal.monitor._tests import increments, softmax
from sitecal.results import MonitorTest
from sitecal.stats import BootstrapSpec, bootstrap_metrics, bootstrap_temperature

__all__ = ["MIN_LABELLED", "WINDOW_METRICS", "GroupWindow", "window_result"]

#: The metrics reported per window with a fixed-level interval of that window alone (not alarms): the
#: signed gap the gap tests watch, the top-label ECE (15 equal-width bins) and the accuracy.
WINDOW_METRICS = (CALIBRATION_GAP.name, ECE.name, ACCURACY.name)
#: Fewest labelled studies for a window's metrics and fitted temperature (its evidence needs none).
MIN_LABELLED = 20


@dataclass(frozen=True)
class GroupWindow:
    """The rows of one window of one group, after the deployed calibration.

    Attributes
    ----------
    window, attribute, group : str
        Where the rows belong.
    keys : numpy.ndarray, shape (N,)
        Pseudonymised study keys.
    logits : numpy.ndarray, shape (N, C)
        Scores divided by the deployed temperature.
    labels : numpy.ndarray of int, shape (N,)
        The label, or -1 while it has not come.
    patients : numpy.ndarray, shape (N,)
        Pseudonymised patient keys (clusters of the bootstrap).
    fallback : bool
        The group had no temperature of its own in the baseline (the global one was applied).
    """

    window: str
    attribute: str
    group: str
    keys: NDArray[np.str_]
    logits: NDArray[np.float64]
    labels: NDArray[np.int64]
    patients: NDArray[np.str_]
    fallback: bool


def _interval(estimate: float, low: float, high: float) -> dict[str, float] | None:
    """An interval as the history stores it; None when an end is undefined (too little data)."""
    if not all(math.isfinite(v) for v in (estimate, low, high)):
        return None
    return {"estimate": estimate, "low": low, "high": high}


def _labelled_part(rows: GroupWindow, spec: BootstrapSpec) -> dict[str, Any]:
    """The metrics and the fitted temperature of the labelled rows, each with its bootstrap interval."""
    known = rows.labels >= 0
    z, y, patients = rows.logits[known], rows.labels[known], rows.patients[known]
    if y.size < MIN_LABELLED or np.unique(y).size < 2:
        return {}
    found = bootstrap_metrics({"after": softmax(z)}, y, clusters=patients, metrics=WINDOW_METRICS, spec=spec)
    metrics = {}
    for name in WINDOW_METRICS:
        cell = found.get(name, "after")
        if (interval := _interval(cell.estimate, cell.low, cell.high)) is not None:
            metrics[name] = interval
    out: dict[str, Any] = {"metrics": metrics} if metrics else {}
    fitted = bootstrap_temperature(z, y, clusters=patients, spec=spec).temperature
    if (temperature := _interval(fitted.estimate, fitted.low, fitted.high)) is not None:
        out["temperature"] = temperature
    return out


def _score_shift(confidences: NDArray[np.float64], reference: NDArray[np.float64]) -> dict[str, float] | None:
    """The two-sample Kolmogorov-Smirnov test of the window's confidences against the baseline's."""
    if confidences.size == 0 or reference.size == 0:
        return None
    found = scipy_stats.ks_2samp(confidences, reference, method="asymp")
    return {"statistic": float(found.statistic), "p_value": float(found.pvalue)}


def window_result(
    rows: GroupWindow,
    tests: Sequence[MonitorTest],
    *,
    reference: NDArray[np.float64],
    spec: BootstrapSpec,
) -> dict[str, Any]:
    """The window's result as the history stores it.

    Parameters
    ----------
    rows : GroupWindow
        The window's rows of the group.
    tests : sequence of MonitorTest
        The tests of this group; each gets its increments (zeros without labelled rows).
    reference : numpy.ndarray
        The baseline's confidences of this group (its evaluation studies after calibration), for the
        label-free score-shift check; empty when the baseline had none.
    spec : BootstrapSpec
        The bootstrap of the window's intervals (the baseline's resamples, level and seed).
    """
    probs = softmax(rows.logits)
    confidences = probs.max(axis=1)
    result: dict[str, Any] = {
        "n_studies": int(rows.labels.size),
        "n_patients": int(np.unique(rows.patients).size),
        "n_labelled": int((rows.labels >= 0).sum()),
        "mean_confidence": float(confidences.mean()),
        "fallback": rows.fallback,
        "increments": {test.id: increments(test, rows.logits, rows.labels) for test in tests},
    }
    if (shift := _score_shift(confidences, reference)) is not None:
        result["score_shift"] = shift
    result |= _labelled_part(rows, spec)
    return result
