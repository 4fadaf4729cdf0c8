"""One entry of the metric registry: what a metric is, how people read it, where it may be used.

:mod:`sitecal.metrics.registry` lists the entries; this module defines what an entry holds and checks
that it is consistent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from numpy.typing import ArrayLike

from sitecal.metrics._statistics import SumForm, WeightedForm, WeightedStatistic

__all__ = ["Direction", "Metric", "MetricFunction"]

#: Which way is better: a smaller value, a larger one, or one nearer :attr:`Metric.target`.
Direction = Literal["lower", "higher", "target"]
#: ``function(probs, labels, n_bins) -> float``; metrics without bins ignore ``n_bins``.
MetricFunction = Callable[[ArrayLike, ArrayLike, int], float]


@dataclass(frozen=True)
class Metric:
    r"""One metric: its name, how people read it, how to compute it, and where it may be used.

    Attributes
    ----------
    name : str
        The name in protocols, ``evaluation.json`` and the statistics, e.g. ``"ece"``.
    label : str
        How the report prints it, e.g. ``"Brier score"``.
    function : callable
        ``function(probs, labels, n_bins) -> float`` on (N, C) probabilities and (N,) labels.
    direction : {"lower", "higher", "target"}
        Which way is better; ``"target"``: nearer :attr:`target`.
    description : str
        What it measures, in a few words; the report's Methods section prints ``"<label>: <description>"``.
    bounds : (float, float)
        The values it can take, ends included where reached (``math.inf`` for none).
    target : float or None
        The ideal value of a ``"target"`` metric (1 for a calibration slope); None otherwise.
    weighted : callable or None
        How the bootstrap engine evaluates it under resampling weights: ``weighted(name, n_bins)`` gives
        the statistic (a :class:`~sitecal.metrics.SumMetricStatistic` from a ``SumForm``, a
        :class:`~sitecal.metrics.MassECEStatistic` or a :class:`~sitecal.metrics.SmoothECEStatistic`);
        None when the engine cannot.
    reported : bool
        May be listed in a protocol's ``evaluation.metrics``: computed for every group before and after
        calibration, with intervals and refit intervals (so it needs a weighted form the refit bootstrap
        can evaluate under each resample's temperature: a sum form, or a statistic with
        ``evaluate_each``), and a direction of ``"lower"`` or ``"higher"`` for the report's wording.
        Gaps between groups (``evaluation.disparity_metrics``) need a sum form too (:attr:`summable`).
    default : bool
        In the protocol's default ``evaluation.metrics`` (when it lists none) and recomputed by the
        leave-one-site-out analysis (so it must be ``reported``).
    criterion : bool
        May be named in an acceptance criterion (so it must be ``reported``, or ``recalibration``): its
        interval covers the true value at the sizes sites have, so judging it against a margin is valid.
        Not the plug-in ECE nor the smooth ECE: biased upward on small groups, their intervals do not
        contain a calibrated group's true value at all (``benchmarks/coverage_ece.md``,
        ``coverage_smooth_ece.md``), so a criterion on them fails good groups.
    recalibration : bool
        Estimated for every group before and after calibration by the recalibration analysis (the
        logistic fit of the correct-prediction event: slope, intercept, O:E), with that analysis's
        intervals (cluster-robust Wald for slope and intercept, patient-cluster bootstrap for O:E); a
        criterion on it is judged on those.
    needs_every_class : bool
        Undefined (an error) unless every class occurs among the labels, as the AUROC.
    comparable : bool
        May be listed in a protocol's ``evaluation.disparity_metrics``: each group against the rest of the
        cohort, with paired intervals of the gap and size-matched permutation flags. Needs a sum form
        (:attr:`summable`: every group's value in every resample and permutation comes from per-patient
        sums) and no clamped square root (not :attr:`squared`: differences of clamped roots have no valid
        interval). Need not be ``reported``: a ``"target"`` metric (the signed calibration gap, O:E) is
        compared two-sided, a gap on either side of the rest's.
    squared : bool
        Its weighted form gives the *signed* estimate :math:`\widehat D` of a squared error (the debiased
        ECE's), which can be negative, and the metric is :math:`\sqrt{\max(\widehat D, 0)}`. The bootstrap
        engines resample :math:`\widehat D` unclamped with its standard error and studentise the
        replicates (the bootstrap-t: a resample's replicates centre on the plug-in squared error, above
        :math:`\widehat D` by the very noise term the estimate removes, and spread as for that larger
        error), and only then take the square root, clipped at 0 (:func:`sitecal.stats.on_metric_scale`).
        BCa is refused for it: a clamped estimate puts a point mass at 0 that collapses the BCa interval
        (``benchmarks/coverage_debiased.md``).
    """

    name: str
    label: str
    function: MetricFunction
    direction: Direction
    description: str
    bounds: tuple[float, float]
    target: float | None = None
    weighted: WeightedForm | None = None
    reported: bool = False
    default: bool = False
    criterion: bool = False
    recalibration: bool = False
    needs_every_class: bool = False
    squared: bool = False
    comparable: bool = False

    def __post_init__(self) -> None:
        problems = []
        if (self.direction == "target") != (self.target is not None):
            problems.append("a target exactly when the direction is 'target'")
        if self.reported and not self.refittable:
            problems.append(
                "a sum form (weighted=SumForm) or a statistic with evaluate_each when reported: the refit "
                "intervals evaluate it under each resample's temperature"
            )
        if self.default and not self.reported:
            problems.append("reported=True when default=True: a default metric is reported")
        if self.reported and self.direction == "target":
            problems.append("direction 'lower' or 'higher' when reported: the report says which is better")
        if self.criterion and not (self.reported or self.recalibration):
            problems.append(
                "reported=True or recalibration=True when criterion=True: a criterion's metric must be "
                "evaluated"
            )
        if self.squared and not self.summable:
            problems.append("a sum form when squared: the engines studentise the resampled sums' estimate")
        if self.comparable and (not self.summable or self.squared):
            problems.append(
                "a sum form (weighted=SumForm) and squared=False when comparable: the gaps between groups "
                "and their flags come from per-patient sums, and differences of clamped roots have no "
                "valid interval"
            )
        if not self.bounds[0] <= self.bounds[1]:
            problems.append("bounds (low, high) with low <= high")
        if problems:
            raise ValueError(f"Metric {self.name!r} needs " + "; ".join(problems) + ".")

    @property
    def bootstrappable(self) -> bool:
        """Whether :func:`metric_statistic` packages it for the paired bootstrap engine."""
        return self.weighted is not None

    @property
    def refittable(self) -> bool:
        """Whether the refit bootstrap evaluates it with each resample's own probabilities."""
        return self.summable or hasattr(self.weighted, "evaluate_each")

    @property
    def summable(self) -> bool:
        """Whether it is a function of per-row sums on fixed bins (what the group comparisons need)."""
        return isinstance(self.weighted, SumForm)

    def statistic(self, *, n_bins: int = 15) -> WeightedStatistic:
        """The weighted statistic the bootstrap engine evaluates (see :func:`metric_statistic`)."""
        if self.weighted is None:
            raise ValueError(f"Metric {self.name!r} has no weighted form for the bootstrap engine.")
        return self.weighted(self.name, n_bins)

    def __call__(self, probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 15) -> float:
        """The metric of ``probs`` (N, C) and ``labels`` (N,); ``n_bins`` for the binned ones."""
        return self.function(probs, labels, n_bins)
