"""The family of anytime-valid tests a monitor runs, from the validation's acceptance criteria.

Each criterion judged after calibration gives one test per group and direction, on the margin the
validation used (:mod:`sitecal.stats._sequential` has the tests and why each is valid):

- a top-label ECE below ``m`` (``ece``, ``ece_mass``, ``ece_debiased``, ``ece_debiased_mass``, ``mce``):
  the signed gap, mean confidence minus accuracy, which every one of them bounds, outside ``[-m, m]``;
- an accuracy above ``m``: the accuracy below ``m``;
- a calibration slope within ``[a, b]``: the temperature the data would fit on top of the deployed one
  above ``1/a`` (over-confident: slope below ``a``) or below ``1/b`` (slope above ``b``).

Other criteria (NLL, Brier, O:E, the intercept, the smooth and classwise ECE) have no test here: their
per-window intervals are reported, not alarmed on. The family is the baseline's groups of the
groups each criterion judged (its scope; the temperature tests: every study and each calibration
group), fixed before any window is seen, and shares ``alpha`` equally
(Bonferroni); a group the baseline never saw is an alert of its own, outside the family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from sitecal.metrics.registry import ACCURACY, ECE, ECE_DEBIASED, ECE_DEBIASED_MASS, ECE_MASS, MCE, SLOPE
from sitecal.results import Criterion, MonitorTest
from sitecal.stats import (
    alarm_threshold,
    bounded_mean_increments,
    changepoint_evalues,
    temperature_increments,
)

__all__ = ["GAP_METRICS", "OVERALL", "increments", "log_evidence", "softmax", "test_family"]

#: Top-label ECEs that bound the signed gap |mean confidence - accuracy|.
GAP_METRICS = frozenset(m.name for m in (ECE, ECE_MASS, ECE_DEBIASED, ECE_DEBIASED_MASS, MCE))
#: The group of every study.
OVERALL = ("overall", "All studies")


def _tests_of(criterion: Criterion) -> list[tuple[str, str, float]]:
    """(kind, side, margin) of each test a criterion gives; none for a criterion without one."""
    if criterion.stage != "after":
        return []  # monitoring applies the deployed calibration: a criterion on raw scores is not watched
    if criterion.metric in GAP_METRICS and criterion.rule == "below" and criterion.upper_margin is not None:
        m = criterion.upper_margin
        return [("gap", "above", m), ("gap", "below", -m)]
    if criterion.metric == ACCURACY.name and criterion.rule == "above" and criterion.lower_margin is not None:
        return [("accuracy", "below", criterion.lower_margin)]
    if criterion.metric == SLOPE.name and criterion.rule == "within":
        low, high = criterion.lower_margin, criterion.upper_margin
        if low is not None and high is not None and 0 < low < high:
            return [("temperature", "above", 1.0 / low), ("temperature", "below", 1.0 / high)]
    return []


def test_family(
    criteria: Sequence[Criterion],
    groups: Mapping[str, Sequence[str]],
    *,
    alpha: float,
    calibrated_by: str | None = None,
) -> tuple[MonitorTest, ...]:
    """Every test of the monitor, in (criterion, group, kind, side) order, with the shared threshold.

    Parameters
    ----------
    criteria : sequence of Criterion
        The baseline's acceptance criteria (``evaluation.json``).
    groups : mapping of attribute to group names
        The baseline's groups of each attribute. A gap or accuracy test is run where the validation
        judged its criterion: one of scope ``overall`` on every study, one of scope ``scanner`` on each
        scanner group (an attribute missing here gives no test).
    alpha : float
        The family-wise false-alarm probability over the horizon.
    calibrated_by : str, optional
        The calibration attribute. The temperature tests watch the deployed temperatures, one per group
        of it: they run on every study and on each of its groups, whatever the slope criterion's scope
        (a slope judged overall at validation, where a group was too small to judge it, still bounds
        how far each group's temperature may drift).
    """
    planned: list[tuple[Criterion, str, str, str, str, float]] = []
    for criterion in criteria:
        for kind, side, margin in _tests_of(criterion):
            scope = calibrated_by if kind == "temperature" else criterion.scope
            targets = [OVERALL] if kind == "temperature" or scope == OVERALL[0] else []
            targets += [(scope, g) for g in groups.get(scope, ())] if scope and scope != OVERALL[0] else []
            planned += [(criterion, attribute, group, kind, side, margin) for attribute, group in targets]
    if not planned:
        return ()
    threshold = alarm_threshold(alpha, len(planned))
    return tuple(
        MonitorTest(
            id=f"{criterion.id}/{attribute}/{group}/{kind}/{side}",
            kind=kind,  # type: ignore[arg-type]
            criterion=criterion.id,
            side=side,  # type: ignore[arg-type]
            margin=margin,
            attribute=attribute,
            group=group,
            threshold=threshold,
        )
        for criterion, attribute, group, kind, side, margin in planned
    )


def increments(test: MonitorTest, logits: NDArray[np.float64], labels: NDArray[np.int64]) -> list[float]:
    """One window's log e-value increments of ``test``, one per alternative (labelled studies only).

    ``logits`` are the window's scores after the deployed calibration; ``labels`` hold -1 where a label
    has not come yet (those studies add nothing until it does).
    """
    known = labels >= 0
    z, y = logits[known], labels[known]
    if test.kind == "temperature":
        # the test's own margin on tau; the other side's margin is computed alongside and not used
        if test.side == "above":
            sides = temperature_increments(z, y, margin_low=test.margin / 2, margin_high=test.margin)
            return [float(v) for v in sides.over]
        sides = temperature_increments(z, y, margin_low=test.margin, margin_high=test.margin * 2)
        return [float(v) for v in sides.under]
    probs = softmax(z)
    correct = (probs.argmax(axis=1) == y).astype(np.float64)
    if test.kind == "gap":
        x, lower, upper = probs.max(axis=1) - correct, -1.0, 1.0
    else:
        x, lower, upper = correct, 0.0, 1.0
    side = "greater" if test.side == "above" else "less"
    return [
        float(v) for v in bounded_mean_increments(x, margin=test.margin, side=side, lower=lower, upper=upper)
    ]


def log_evidence(window_increments: Sequence[Sequence[float]], *, horizon: int) -> NDArray[np.float64]:
    """The test's log e-value at the end of each window, from every window's increments in order."""
    return changepoint_evalues(np.asarray(window_increments, dtype=np.float64), horizon=horizon)


def softmax(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row-wise softmax of logits (float64)."""
    shifted = z - z.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    out: NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out
