"""The checks that span the analysis sections (subgroups, calibration, evaluation, acceptance).

One place for them: :class:`~sitecal.protocol.Protocol` runs them on a protocol file, and
:func:`sitecal.evaluate_arrays` on its arguments (the settings an evaluation reads, without a protocol).
Each failure raises ``_ReferenceError`` with the dotted location of the field at fault.
"""

from __future__ import annotations

from collections.abc import Sequence

from sitecal.metrics.registry import metric
from sitecal.protocol._analysis import AcceptanceCriterion, CalibrationSettings, EvaluationSettings
from sitecal.protocol._base import _check_reference, _ReferenceError

__all__ = ["check_analysis"]


def check_analysis(
    subgroups: Sequence[str],
    calibration: CalibrationSettings,
    evaluation: EvaluationSettings,
    acceptance: Sequence[AcceptanceCriterion],
    *,
    n_classes: int,
) -> None:
    """Refuse analysis settings that name a missing subgroup or metric, or that no method supports.

    Parameters
    ----------
    subgroups : sequence of str
        The subgroup attributes defined.
    calibration, evaluation, acceptance
        The validated sections.
    n_classes : int
        The model's classes (beta calibration is for two).
    """
    names = list(subgroups)
    _check_reference(calibration.per, names, "calibration", "per")
    _check_reference(calibration.split.stratify, names, "calibration", "split", "stratify")
    _check_resampling(calibration, evaluation)
    _check_method(calibration, evaluation, n_classes)
    _check_compare(calibration, n_classes)
    for i, name in enumerate(evaluation.subgroups or []):
        _check_reference(name, names, "evaluation", "subgroups", i)
    for i, criterion in enumerate(acceptance):
        if criterion.scope != "overall":
            _check_reference(criterion.scope, [*names, "overall"], "acceptance", i, "scope")
        # slope, intercept and O:E come from the recalibration analysis, computed for every group
        if criterion.metric not in evaluation.metrics and not metric(criterion.metric).recalibration:
            raise _ReferenceError(
                ("acceptance", i, "metric"),
                f"'{criterion.metric}' is not among evaluation.metrics {evaluation.metrics}",
            )
    ids = [c.id for c in acceptance]
    if len(set(ids)) != len(ids):
        raise _ReferenceError(("acceptance",), "acceptance ids must be distinct")


def _check_resampling(calibration: CalibrationSettings, evaluation: EvaluationSettings) -> None:
    """The bootstrap's method and refit against the split and the metrics."""
    boot = evaluation.bootstrap
    if calibration.split.by == "crossfit" and boot.refit and calibration.fallback == "empirical_bayes":
        raise _ReferenceError(
            ("evaluation", "bootstrap", "refit"),
            "refit under calibration.split.by: crossfit does not yet repeat the empirical-Bayes "
            "shrinkage in each fold; use refit: false (the temperature intervals still repeat it), "
            "split.by: patient, or another calibration.fallback",
        )
    if calibration.split.by == "crossfit" and boot.refit and boot.method == "bca":
        raise _ReferenceError(
            ("evaluation", "bootstrap", "method"),
            "method bca with refit under calibration.split.by: crossfit is not available (its "
            "acceleration would refit every fold without each patient); use method: percentile, or "
            "refit: false",
        )
    squared = [m for m in evaluation.metrics if metric(m).squared]
    if boot.method == "bca" and squared:
        raise _ReferenceError(
            ("evaluation", "bootstrap", "method"),
            f"method bca is not valid for {', '.join(squared)}: the debiased ECE is the square root "
            "of an estimate clamped at 0, and when it is clamped the BCa interval collapses to [0, 0] "
            "even on groups beyond the margin (a group at 0.11 against a 0.10 margin passed 40 % of "
            "the time at 50 studies). Use method: percentile (its studentised interval covers: "
            "benchmarks/coverage_debiased.md), or leave ece_debiased out of evaluation.metrics",
        )


def _check_method(calibration: CalibrationSettings, evaluation: EvaluationSettings, n_classes: int) -> None:
    """A deployed method other than temperature scaling: the global fallback, percentile intervals."""
    cal, boot = calibration, evaluation.bootstrap
    if cal.method == "temperature":
        return
    if cal.method == "beta" and n_classes != 2:
        raise _ReferenceError(
            ("calibration", "method"),
            f"beta calibration is for two classes and model.class_names lists {n_classes}; use dirichlet "
            "(its multiclass generalisation) or another method",
        )
    if cal.fallback != "global":
        raise _ReferenceError(
            ("calibration", "fallback"),
            f"fallback {cal.fallback} pulls a temperature toward the global one; with method {cal.method} a "
            "group below min_group_size takes the global fit. Use fallback: global, or method: temperature",
        )
    if boot.refit and boot.method == "bca":
        raise _ReferenceError(
            ("evaluation", "bootstrap", "method"),
            "method bca with refit: true needs every fit repeated without each patient, which is available "
            f"for method: temperature only; use method: percentile with method {cal.method}, or refit: false",
        )


def _check_compare(calibration: CalibrationSettings, n_classes: int) -> None:
    """``calibration.compare`` with beta calibration needs a binary model."""
    compare = calibration.compare
    if "beta" in compare and n_classes != 2:
        raise _ReferenceError(
            ("calibration", "compare", compare.index("beta")),
            f"beta calibration is for two classes and model.class_names lists {n_classes}; compare "
            "dirichlet (its multiclass generalisation), vector, matrix, histogram or isotonic instead",
        )
