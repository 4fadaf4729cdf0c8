"""Protocol schema, the analysis sections: split, calibration, evaluation (with its bootstrap), acceptance."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sitecal.metrics.registry import ECE, metric
from sitecal.metrics.registry import names as metric_names
from sitecal.protocol._base import (
    _NAME_PATTERN,
    CriterionMetricName,
    DisparityMetricName,
    MetricName,
    _at_most,
    _Strict,
)
from sitecal.protocol._planning import PlanningSettings

__all__ = [
    "MAX_FOLDS",
    "MAX_MIN_GROUP_SIZE",
    "MAX_N_BINS",
    "MAX_N_RESAMPLES",
    "AcceptanceCriterion",
    "BootstrapSettings",
    "CalibrationSettings",
    "ComparedMethod",
    "EvaluationSettings",
    "SplitSettings",
]

_DEFAULT_METRICS: tuple[MetricName, ...] = metric_names(default=True)
_ECE_ONLY: tuple[MetricName, ...] = (ECE.name,)

# Upper bounds checked at validation, so that a typo such as 10**9 is refused in `sitecal check` instead of
# ending a run in MemoryError or hours of work after inference. Each is far above any useful value.
#: Reliability bins: every group's curve keeps every bin; 10 to 20 is usual.
MAX_N_BINS = 1000
#: Bootstrap resamples: the replicates of every metric, group and stage are kept (8 bytes each), and
#: 10,000 already fix a 95% interval's bounds well below the reported precision.
MAX_N_RESAMPLES = 100_000
#: Minimum group sizes (calibration and evaluation): a minimum above any site's cohort only makes every
#: group fall back or go unjudged.
MAX_MIN_GROUP_SIZE = 100_000


def _seed(value: int) -> int:
    """A seed of ``numpy.random.default_rng``, which refuses negative integers (at evaluation, too late)."""
    if value < 0:
        raise ValueError(f"must be an integer >= 0 (a seed of numpy's random generator). Got {value}")
    return value


#: Most cross-fitting folds: each fold refits every temperature (and, with ``bootstrap.refit``, does so in
#: every resample); 5 to 10 is usual.
MAX_FOLDS = 20


class SplitSettings(_Strict):
    """The seeded, patient-level split: a fit part and an evaluation part, or K cross-fitted folds.

    ``fit_fraction`` belongs to ``by: patient`` (default 0.5) and ``folds`` to ``by: crossfit``
    (default 5); the other method's setting is None, and giving it is an error.
    """

    by: Literal["patient", "crossfit"] = "patient"
    fit_fraction: float | None = Field(default=None, gt=0.0, lt=1.0, description="with by: patient")
    folds: int | None = Field(
        default=None,
        ge=2,
        le=MAX_FOLDS,
        description="with by: crossfit, the number of folds (each fold's temperatures fitted on the others)",
    )
    seed: int = Field(description="seed of numpy.random.default_rng, an integer >= 0")
    stratify: str | None = Field(default=None, description="subgroup name; default: calibration.per")

    _seed_range = field_validator("seed")(_seed)

    @model_validator(mode="before")
    @classmethod
    def _one_method(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("by", "patient") == "crossfit":
            if data.get("fit_fraction") is not None:
                raise ValueError(
                    "fit_fraction applies to by: patient (one fit part); by: crossfit fits each fold's "
                    "temperatures on the other folds. Remove fit_fraction, or set by: patient"
                )
            return data if data.get("folds") is not None else {**data, "folds": 5}
        if data.get("folds") is not None:
            raise ValueError(
                "folds applies to by: crossfit; by: patient splits once into a fit and an evaluation part. "
                "Remove folds, or set by: crossfit"
            )
        return data if data.get("fit_fraction") is not None else {**data, "fit_fraction": 0.5}


#: Recalibration methods ``calibration.compare`` may list (temperature scaling is always the reference).
ComparedMethod = Literal["vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"]


class CalibrationSettings(_Strict):
    """Temperature scaling, one temperature per group of ``per``."""

    method: Literal["temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"] = Field(
        default="temperature",
        description="the calibration deployed (calibration.json): temperature scaling, or vector, matrix, "
        "dirichlet, histogram, isotonic or beta (binary models) fitted per group of per",
    )
    per: str | None = None
    min_group_size: int = Field(default=50, ge=1)
    fallback: Literal["global", "shrink", "empirical_bayes"] = Field(
        default="global",
        description="temperature of a group below min_group_size: 'global' (the global T), 'shrink' "
        "(penalised toward it); 'empirical_bayes' shrinks every group, whatever its size, toward the REML "
        "mean log T of all groups (min_group_size not used)",
    )
    split: SplitSettings
    compare: list[ComparedMethod] = Field(
        default_factory=list,
        description="recalibration methods to compare with temperature scaling per group in the report: "
        "vector, matrix, dirichlet, histogram, isotonic, beta (binary models); each is fitted on the fit "
        "split, measured on the evaluation split, and refitted in every bootstrap resample",
    )

    @field_validator("min_group_size")
    @classmethod
    def _min_group_size_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_MIN_GROUP_SIZE,
            "a minimum above any cohort's size gives no group its own temperature (every group falls back)",
        )

    @field_validator("compare")
    @classmethod
    def _compare_once(cls, value: list[ComparedMethod]) -> list[ComparedMethod]:
        if len(set(value)) != len(value):
            raise ValueError(f"list each method once; got {value}")
        return value


class BootstrapSettings(_Strict):
    """Patient-level bootstrap of every metric."""

    n_resamples: int = Field(default=1000, ge=50)
    level: float = Field(default=0.95, gt=0.5, lt=1.0)
    method: Literal["percentile", "bca"] = "percentile"
    seed: int = Field(default=0, description="seed of numpy.random.default_rng, an integer >= 0")
    refit: bool = Field(
        default=False,
        description="refit the temperature in every resample, so that intervals after calibration of the "
        "calibration groups include the temperature's uncertainty",
    )

    _seed_range = field_validator("seed")(_seed)

    @field_validator("n_resamples")
    @classmethod
    def _n_resamples_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_N_RESAMPLES,
            "every metric of every group is recomputed in each resample, and 10000 already fix a 95% "
            "interval's bounds; 1000 to 10000 is usual",
        )


class EvaluationSettings(_Strict):
    """What is measured on the evaluation split."""

    metrics: list[MetricName] = Field(default_factory=lambda: list(_DEFAULT_METRICS), min_length=1)
    n_bins: int = Field(default=15, ge=1)
    min_group_size: int = Field(default=30, ge=1)
    subgroups: list[str] | None = Field(default=None, description="subgroups to report; default: all")
    disparity_metrics: list[DisparityMetricName] = Field(
        default_factory=lambda: list(_ECE_ONLY), description="metrics whose gaps between groups get intervals"
    )
    bootstrap: BootstrapSettings = Field(default_factory=BootstrapSettings)
    planning: PlanningSettings = Field(default_factory=PlanningSettings)

    @field_validator("disparity_metrics")
    @classmethod
    def _comparable(cls, value: list[DisparityMetricName]) -> list[DisparityMetricName]:
        # the gaps between groups and the size-matched flags are evaluated from per-patient sums of each
        # group (thousands of permutations per group); a metric the registry does not mark comparable is
        # refused here, so that `sitecal check` refuses what `sitecal run` would
        allowed = ", ".join(metric_names(comparable=True))
        for name in value:
            if metric(name).squared:
                raise ValueError(
                    f"'{name}' cannot be compared between groups: its gaps would be differences of square "
                    "roots of estimates clamped at 0, which have no valid interval. Keep it in "
                    f"'evaluation.metrics' and compare groups on one of {allowed}"
                )
            if not metric(name).comparable:
                raise ValueError(
                    f"'{name}' cannot be compared between groups: the gaps between groups and their flags "
                    f"are computed from per-patient sums of each group's terms, and {metric(name).label} is "
                    "not a sum of per-study terms (its kernel bandwidth is refitted in every resample). Keep "
                    f"it in 'evaluation.metrics' and compare groups on one of {allowed}"
                )
        return value

    @field_validator("n_bins")
    @classmethod
    def _n_bins_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_N_BINS,
            "every group's reliability curve keeps every bin, and with more bins than studies most are "
            "empty; 10 to 20 is usual",
        )

    @field_validator("min_group_size")
    @classmethod
    def _min_group_size_bound(cls, value: int) -> int:
        return _at_most(
            value,
            MAX_MIN_GROUP_SIZE,
            "a minimum above any cohort's size leaves every group unjudged",
        )


class AcceptanceCriterion(_Strict):
    """One go-live criterion, judged on each group's whole interval, e.g. ECE after calibration below 0.05.

    Exactly one of ``below``, ``above`` or ``within: [low, high]`` (an equivalence margin, e.g. a
    calibration slope within [0.8, 1.25]). A group passes when its whole interval clears the margin,
    fails when it lies wholly beyond it, and is inconclusive when it straddles it.
    """

    id: str = Field(pattern=_NAME_PATTERN)
    description: str | None = None
    metric: CriterionMetricName
    stage: Literal["before", "after"] = "after"
    below: float | None = Field(default=None, allow_inf_nan=False)
    above: float | None = Field(default=None, allow_inf_nan=False)
    within: tuple[float, float] | None = None
    scope: str = "overall"

    @field_validator("metric", mode="before")
    @classmethod
    def _judgeable(cls, name: Any) -> Any:
        if isinstance(name, str) and name in metric_names(reported=True) and not metric(name).criterion:
            raise ValueError(
                f"'{name}' cannot be judged against a margin: the {metric(name).label} is a plug-in "
                "estimate, biased upward on small groups, and its interval does not contain the true "
                "value (for a calibrated group, never), so a criterion on it fails good groups. Judge "
                "calibration on "
                "'ece_debiased', whose interval covers (benchmarks/coverage_debiased.md), and keep "
                f"'{name}' in evaluation.metrics to report it"
            )
        return name

    @model_validator(mode="before")
    @classmethod
    def _no_statistic(cls, data: Any) -> Any:
        if isinstance(data, dict) and "statistic" in data:
            raise ValueError(
                "'statistic' is no longer a criterion field: a criterion is now judged on the whole "
                "interval (pass when it clears the margin, fail when it lies beyond, inconclusive when it "
                f"straddles it). Remove 'statistic: {data['statistic']}' and keep 'below', 'above' or "
                "'within: [low, high]'"
            )
        return data

    @model_validator(mode="after")
    def _one_margin(self) -> AcceptanceCriterion:
        given = [k for k in ("below", "above", "within") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'below', 'above' or 'within: [low, high]'"
                + (f" (got {' and '.join(given)})" if given else "")
            )
        if self.within is not None:
            low, high = self.within
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(
                    "'within' must be two finite numbers [low, high] with low < high; "
                    f"got {list(self.within)}"
                )
        return self

    @property
    def rule(self) -> Literal["below", "above", "within"]:
        """Which margin the criterion sets."""
        return "below" if self.below is not None else "above" if self.above is not None else "within"

    @property
    def margin(self) -> tuple[float | None, float | None]:
        """``(lower, upper)``: the margin's ends, None for the side the rule leaves open."""
        if self.within is not None:
            return self.within
        return (None, self.below) if self.below is not None else (self.above, None)
