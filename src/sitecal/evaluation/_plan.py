"""The evaluation's plan: everything its analyses share, prepared once.

:func:`plan_evaluation` takes the settings the analyses read (:class:`EvaluationPolicy`, from a protocol or
from :func:`sitecal.evaluate_arrays`' arguments) and the analysed studies (:class:`EvaluationData`), and
prepares what every analysis reads: the split or folds, the calibration groups and strata, the deployed
calibration and each evaluated study's probabilities before and after it, the bootstrap specification and
the list of groups. The analyses (per-group intervals, disparities, sensitivity, characteristics, method
comparison, acceptance, study size) are functions of the plan; none reads a protocol or fits again what
the plan holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from sitecal.calibration import GroupMethods, GroupTemperatures, fit_group_methods
from sitecal.evaluation._groups import OVERALL, ordered_groups, patient_codes, patient_strata
from sitecal.evaluation._split import (
    Split,
    applied_probabilities,
    applied_temperatures,
    deployed_temperatures,
    fold_fits,
    make_split,
)
from sitecal.metrics import softmax
from sitecal.stats import BootstrapSpec

if TYPE_CHECKING:
    from sitecal.protocol import (
        AcceptanceCriterion,
        CalibrationSettings,
        EvaluationSettings,
        Protocol,
        SubgroupSettings,
    )

__all__ = ["EvaluationData", "EvaluationPlan", "EvaluationPolicy", "FitRows", "plan_evaluation"]


@dataclass(frozen=True)
class EvaluationData:
    """Everything evaluation needs, as arrays with one row per analysed study (keys pseudonymised)."""

    logits: np.ndarray  # (N, C) float
    labels: np.ndarray  # (N,) int
    # (N,) str: each row's patient, as an identity the site key does not change (sitecal._split_key;
    # in memory only): the split and the resampling follow its sorted order
    patient_keys: np.ndarray
    attributes: Mapping[str, np.ndarray]  # subgroup name -> (N,) str
    class_names: Sequence[str]
    study_keys: np.ndarray | None = None  # (N,) str, pseudonymised: names the listed errors


@dataclass(frozen=True)
class EvaluationPolicy:
    """The settings the evaluation's analyses read, and nothing else of a protocol.

    Attributes
    ----------
    subgroups : mapping of str to SubgroupSettings
        Every subgroup attribute (its label, and the DICOM tag it is read from, which the
        characteristics use to find sex and age).
    reported : tuple of str
        The attributes evaluated and reported, in order.
    calibration, evaluation : CalibrationSettings, EvaluationSettings
        A protocol's ``calibration`` and ``evaluation`` sections, validated.
    acceptance : tuple of AcceptanceCriterion
        The criteria judged.
    """

    subgroups: Mapping[str, SubgroupSettings]
    reported: tuple[str, ...]
    calibration: CalibrationSettings
    evaluation: EvaluationSettings
    acceptance: tuple[AcceptanceCriterion, ...] = ()

    @classmethod
    def from_protocol(cls, protocol: Protocol) -> EvaluationPolicy:
        """The policy of a validated protocol."""
        return cls(
            subgroups=dict(protocol.subgroups),
            reported=tuple(protocol.reported_subgroups),
            calibration=protocol.calibration,
            evaluation=protocol.evaluation,
            acceptance=tuple(protocol.acceptance),
        )

    @property
    def stratify(self) -> str | None:
        """The attribute the split and the overall bootstrap stratify by (default: the calibration's)."""
        return self.calibration.split.stratify or self.calibration.per

    @property
    def spec(self) -> BootstrapSpec:
        """The evaluation's resampling."""
        boot = self.evaluation.bootstrap
        return BootstrapSpec(
            n_resamples=boot.n_resamples, level=boot.level, method=boot.method, seed=boot.seed
        )

    @property
    def temperature_policy(self) -> dict[str, Any]:
        """What a temperature fit of the calibration groups takes (``fit_group_temperatures``' options)."""
        return {"min_group_size": self.calibration.min_group_size, "fallback": self.calibration.fallback}


@dataclass(frozen=True)
class FitRows:
    """The rows the deployed calibration was fitted on (every row under cross-fitting)."""

    logits: np.ndarray
    labels: np.ndarray
    patients: np.ndarray
    groups: np.ndarray
    folds: np.ndarray


@dataclass(frozen=True)
class EvaluationPlan:
    """What every analysis of the evaluation reads, prepared once by :func:`plan_evaluation`.

    Rows are the analysed studies (``N``) unless said otherwise; "evaluated rows" are ``split.held`` (every
    row under cross-fitting).

    Attributes
    ----------
    policy : EvaluationPolicy
    data : EvaluationData
        The studies, patients as integer codes in their keys' order (the same plans and resamples, no
        text sorts).
    split : Split
        The fit and evaluated rows (one split, or the folds).
    calibration_groups : numpy.ndarray, shape (N,)
        Each row's calibration group (``"all"`` for one global temperature).
    split_strata : numpy.ndarray, shape (N,)
        Each row's value of the attribute the split stratifies by (``"all"`` when none).
    temperatures : GroupTemperatures
        The deployed temperatures, fitted on the fit rows (every row under cross-fitting).
    methods : GroupMethods or None
        The deployed calibration under another method than temperature scaling.
    fits : list or None
        The split's fits ``(fit rows, calibrated rows, temperatures)`` where the temperature's were made
        (one split: the deployed fit; cross-fitting: each fold's); the refit bootstraps start from them.
    applied : numpy.ndarray or None, shape (N,)
        Under cross-fitting, each row's temperature from the other folds.
    probabilities : mapping of str to numpy.ndarray, shape (M, C)
        ``"before"`` and ``"after"`` calibration, on the evaluated rows.
    """

    policy: EvaluationPolicy
    data: EvaluationData
    split: Split
    calibration_groups: np.ndarray
    split_strata: np.ndarray
    temperatures: GroupTemperatures
    methods: GroupMethods | None
    fits: list[tuple[np.ndarray, np.ndarray, GroupTemperatures]] | None
    applied: np.ndarray | None
    probabilities: Mapping[str, np.ndarray]

    @property
    def spec(self) -> BootstrapSpec:
        """The evaluation's resampling."""
        return self.policy.spec

    @property
    def held(self) -> np.ndarray:
        """The evaluated rows, shape (N,) bool."""
        return self.split.held

    @cached_property
    def logits(self) -> np.ndarray:
        """The evaluated rows' logits, shape (M, C)."""
        rows: np.ndarray = self.data.logits[self.held]
        return rows

    @cached_property
    def labels(self) -> np.ndarray:
        """The evaluated rows' labels, shape (M,)."""
        rows: np.ndarray = self.data.labels[self.held]
        return rows

    @cached_property
    def patients(self) -> np.ndarray:
        """The evaluated rows' patient codes, shape (M,)."""
        rows: np.ndarray = self.data.patient_keys[self.held]
        return rows

    @cached_property
    def strata(self) -> np.ndarray:
        """The evaluated rows' strata for the overall bootstrap (each patient in their first row's)."""
        return patient_strata(self.patients, self.split_strata[self.held])

    @cached_property
    def fit_rows(self) -> FitRows:
        """The rows the deployed calibration was fitted on."""
        fit = self.split.fit
        data = self.data
        return FitRows(
            data.logits[fit],
            data.labels[fit],
            data.patient_keys[fit],
            self.calibration_groups[fit],
            self.split.fold[fit],
        )

    def attribute(self, name: str) -> np.ndarray:
        """The evaluated rows' values of a subgroup attribute, shape (M,)."""
        rows: np.ndarray = self.data.attributes[name][self.held]
        return rows

    @cached_property
    def groups(self) -> tuple[tuple[str, str, np.ndarray], ...]:
        """``(attribute, group, mask of the evaluated rows)``: the whole cohort, then each reported group."""
        groups = [(OVERALL, "All studies", np.ones(len(self.labels), dtype=bool))]
        for name in self.policy.reported:
            values = self.attribute(name)
            groups += [(name, value, values == value) for value in ordered_groups(values)]
        return tuple(groups)


def plan_evaluation(policy: EvaluationPolicy, data: EvaluationData) -> EvaluationPlan:
    """Split the patients, fit the deployed calibration and calibrate the evaluated rows.

    Parameters
    ----------
    policy : EvaluationPolicy
        The calibration, evaluation and acceptance settings.
    data : EvaluationData
        Every analysed study; its attributes hold every attribute the policy names.

    Returns
    -------
    EvaluationPlan
    """
    cal = policy.calibration
    n = len(data.labels)
    per, stratify = cal.per, policy.stratify
    cal_groups = data.attributes[per] if per else np.full(n, "all", dtype=object)
    strata_all = data.attributes[stratify] if stratify else np.full(n, "all", dtype=object)
    split = make_split(cal, data.patient_keys, strata_all)
    data = dataclasses.replace(data, patient_keys=patient_codes(data.patient_keys))
    rule = policy.temperature_policy
    temperatures = deployed_temperatures(split, data.logits, data.labels, cal_groups, data.patient_keys, rule)
    fit, held = split.fit, split.held
    methods: GroupMethods | None = None
    fits: list[tuple[np.ndarray, np.ndarray, GroupTemperatures]] | None = None
    applied: np.ndarray | None = None
    if cal.method != "temperature":  # deployed: fitted on the fit part (every row under cross-fitting)
        methods = fit_group_methods(
            cal.method, data.logits[fit], data.labels[fit], cal_groups[fit], min_group_size=cal.min_group_size
        )
        after = applied_probabilities(
            split, data.logits, data.labels, cal_groups, cal.method, cal.min_group_size
        )[held]
    elif split.method == "patient":  # the deployed temperatures are the ones evaluated
        after = softmax(data.logits[held], temperature=temperatures.temperatures_for(cal_groups[held]))
        fits = [(fit, held, temperatures)] if fit.any() and held.any() else []  # as fold_fits gives it
    else:
        fits = fold_fits(split, data.logits, data.labels, cal_groups, data.patient_keys, rule)
        applied = applied_temperatures(
            split, data.logits, data.labels, cal_groups, data.patient_keys, rule, fits=fits
        )
        after = softmax(data.logits[held], temperature=applied[held])
    return EvaluationPlan(
        policy=policy,
        data=data,
        split=split,
        calibration_groups=cal_groups,
        split_strata=strata_all,
        temperatures=temperatures,
        methods=methods,
        fits=fits,
        applied=applied,
        probabilities={"before": softmax(data.logits[held]), "after": after},
    )
