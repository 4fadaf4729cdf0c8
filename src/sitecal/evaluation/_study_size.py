"""How many evaluation studies a group needs for an 80 % chance to pass a criterion, by simulation.

The engine behind ``sitecal plan`` (:mod:`sitecal.run.planning`) and the report's study-size column. It
answers the planner's question of Riley et al. (2021): with ``n`` evaluation studies in a group, how
likely is the criterion to pass *if the model is as calibrated as assumed*? Draw ``n`` studies from a
calibrated model (each label drawn from its study's own probabilities), compute the criterion's metric and
interval as a run does, judge it with the run's rule; repeat, and read the share of passes.

The temperature's own uncertainty is not simulated (it is taken as known), so a refitted run's intervals
are somewhat wider than planned: read a planned size as a lower bound.

References: R. D. Riley et al. "Minimum sample size for external validation of a clinical prediction
model with a binary outcome." Stat Med 40, 2021.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtri

from sitecal._progress import progress_bar
from sitecal.evaluation._acceptance import INSUFFICIENT, PASS, group_verdict
from sitecal.evaluation._groups import OVERALL
from sitecal.metrics import TopLabelOEStatistic, top_label_recalibration
from sitecal.metrics.registry import INTERCEPT, OE_RATIO, SLOPE
from sitecal.protocol import DEFAULT_PLAN_SIZES, AcceptanceCriterion
from sitecal.protocol import PlanningSettings as PlanSettings
from sitecal.results import Criterion, PlanningSettings, StudySize
from sitecal.stats import BootstrapSpec, bootstrap_interval, bootstrap_metrics

__all__ = [
    "DEFAULT_SIZES",
    "TARGET_POWER",
    "SizeNeed",
    "StudyModel",
    "labels_from",
    "needed_size",
    "pass_rate",
    "plan_study_sizes",
    "pool_model",
]

#: The chance of passing a plan aims for.
TARGET_POWER = 0.8
#: Group sizes simulated by default.
DEFAULT_SIZES = DEFAULT_PLAN_SIZES
#: Probabilities are rounded to this many decimals before a pool is ordered and drawn from, so that the
#: last-bit noise of a sum taken in another row order cannot move a planned size.
_DECIMALS = 12


@dataclass(frozen=True)
class StudyModel:
    """A source of calibrated studies: ``draw(n, rng) -> (probs (n, C), labels (n,))``."""

    description: str
    draw: Callable[[int, np.random.Generator], tuple[NDArray[np.float64], NDArray[np.int64]]] = field(
        repr=False
    )


@dataclass(frozen=True)
class SizeNeed:
    """The smallest simulated size whose pass rate reaches the target, and the rate found there.

    ``needed`` is None when no simulated size reaches it; ``pass_rate`` is then the largest size's.
    ``rates`` holds every size simulated (a search simulates only some) as ``{size: rate}``.
    """

    needed: int | None
    pass_rate: float
    rates: dict[int, float]


def labels_from(probs: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.int64]:
    """Each label drawn from its own row's probabilities: a perfectly calibrated model."""
    cumulative = probs.cumsum(axis=1)
    labels = (rng.random((probs.shape[0], 1)) > cumulative).sum(axis=1).astype(np.int64)
    out: NDArray[np.int64] = np.minimum(labels, probs.shape[1] - 1)
    return out


def pool_model(probs: NDArray[np.float64], description: str) -> StudyModel:
    """Studies drawn with replacement from ``probs`` (rows of probabilities), each label drawn afresh.

    The pool is put in a canonical order (its rows sorted, after rounding to 12 decimals) so that the
    draws depend only on the set of probabilities, not on the order the rows came in.
    """
    pool: NDArray[np.float64] = np.asarray(probs, dtype=np.float64).round(_DECIMALS)
    pool = pool[np.lexsort(pool.T[::-1])] if pool.shape[0] else pool

    def draw(n: int, rng: np.random.Generator) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        p = pool[rng.integers(0, pool.shape[0], n)]
        return p, labels_from(p, rng)

    return StudyModel(description, draw)


def criterion_interval(
    name: str, probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int, spec: BootstrapSpec
) -> tuple[float, float, float]:
    """The metric's estimate and interval as a run computes them (one study per patient)."""
    if name == OE_RATIO.name:  # the recalibration analysis: O:E by the cluster bootstrap
        oe = bootstrap_interval(
            TopLabelOEStatistic(),
            (probs, labels),
            n_resamples=spec.n_resamples,
            level=spec.level,
            seed=spec.seed,
        )
        return oe.estimate, oe.low, oe.high
    if name in (SLOPE.name, INTERCEPT.name):  # slope and intercept: cluster-robust Wald
        fit = top_label_recalibration(probs, labels)
        estimate, se = (fit.slope, fit.slope_se) if name == SLOPE.name else (fit.intercept, fit.intercept_se)
        if estimate is None or se is None:
            return math.nan, math.nan, math.nan
        z = float(ndtri((1.0 + spec.level) / 2.0))
        return estimate, estimate - z * se, estimate + z * se
    res = bootstrap_metrics(
        {"after": probs}, labels, clusters=None, metrics=(name,), n_bins=n_bins, spec=spec
    ).get(name, "after")
    return res.estimate, res.low, res.high


class _Simulations:
    """The simulated groups of one size, run in order from one seeded stream.

    They can stop early (once the target is reached or out of reach) and go on later with the same draws.
    """

    def __init__(
        self,
        criterion: AcceptanceCriterion,
        model: StudyModel,
        n: int,
        *,
        n_simulations: int,
        n_resamples: int,
        n_bins: int,
        level: float,
        seed: int,
    ) -> None:
        self.criterion, self.model, self.n = criterion, model, n
        self.n_simulations, self.n_resamples, self.n_bins, self.level, self.seed = (
            n_simulations,
            n_resamples,
            n_bins,
            level,
            seed,
        )
        self.rng = np.random.default_rng([seed, n])
        self.done = 0
        self.passes = 0

    def _one(self) -> None:
        probs, labels = self.model.draw(self.n, self.rng)
        spec = BootstrapSpec(
            n_resamples=self.n_resamples, level=self.level, seed=self.seed + self.done, workers=1
        )
        estimate, low, high = criterion_interval(self.criterion.metric, probs, labels, self.n_bins, spec)
        self.passes += group_verdict(self.criterion, estimate, low, high) == PASS
        self.done += 1

    def reaches(self, target: float) -> bool:
        """Whether the pass rate over all ``n_simulations`` reaches ``target``; stops once that is settled."""
        needed = math.ceil(target * self.n_simulations - 1e-9)
        while self.done < self.n_simulations:
            if self.passes >= needed:
                return True
            if self.passes + (self.n_simulations - self.done) < needed:
                return False
            self._one()
        return self.passes >= needed

    def rate(self) -> float:
        """The pass rate over all ``n_simulations`` (runs those not yet run)."""
        while self.done < self.n_simulations:
            self._one()
        return self.passes / self.n_simulations


def pass_rate(
    criterion: AcceptanceCriterion,
    model: StudyModel,
    n: int,
    *,
    n_simulations: int,
    n_resamples: int,
    n_bins: int,
    level: float,
    seed: int,
) -> float:
    """The share of ``n_simulations`` simulated groups of ``n`` studies that pass ``criterion``."""
    return _Simulations(
        criterion,
        model,
        n,
        n_simulations=n_simulations,
        n_resamples=n_resamples,
        n_bins=n_bins,
        level=level,
        seed=seed,
    ).rate()


def needed_size(
    criterion: AcceptanceCriterion,
    model: StudyModel,
    sizes: Sequence[int],
    *,
    n_simulations: int,
    n_resamples: int,
    n_bins: int,
    level: float,
    seed: int,
) -> SizeNeed:
    """The smallest of ``sizes`` whose pass rate reaches :data:`TARGET_POWER`, by bisection.

    The pass rate grows with the size (a larger group gives a narrower interval), so a bisection over the
    sorted sizes finds the smallest that reaches the target with about log2(len(sizes)) + 1 simulated
    sizes instead of all, and each size's simulations stop once it is settled whether the target is
    reached (the same draws decide as a full run would). Only the returned size's pass rate is simulated
    in full. Simulation noise can make the rate dip below the target between two sizes that reach it;
    the search then returns one of the sizes that reach it, never one that does not.
    """
    grid = sorted(set(sizes))
    simulations = functools.partial(
        _Simulations,
        criterion,
        model,
        n_simulations=n_simulations,
        n_resamples=n_resamples,
        n_bins=n_bins,
        level=level,
        seed=seed,
    )
    runs = {n: simulations(n) for n in grid}
    low, high = -1, len(grid)  # invariant: grid[high] reaches the target (or high = len); grid[low] does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if runs[grid[mid]].reaches(TARGET_POWER) else (mid, high)
    if high == len(grid):
        largest = runs[grid[-1]]
        return SizeNeed(
            None, largest.rate(), {n: r.rate() for n, r in runs.items() if r.done == n_simulations}
        )
    rate = runs[grid[high]].rate()
    return SizeNeed(grid[high], rate, {n: r.rate() for n, r in runs.items() if r.done == n_simulations})


def plan_study_sizes(
    acceptance: Sequence[Criterion],
    rules: Sequence[AcceptanceCriterion],
    prob_sets: Mapping[str, NDArray[np.float64]],
    attributes: Mapping[str, NDArray[Any]],
    *,
    settings: PlanSettings,
    n_bins: int,
    seed: int,
    progress: bool = False,
) -> tuple[tuple[Criterion, ...], PlanningSettings | None]:
    """Each judged group's planned study size, added to its criterion row; and how they were planned.

    Parameters
    ----------
    acceptance : sequence of Criterion
        The judged criteria.
    rules : sequence of AcceptanceCriterion
        The protocol's criteria (matched to ``acceptance`` by id).
    prob_sets : mapping
        ``{"before": (N, C), "after": (N, C)}``: the evaluation studies' probabilities.
    attributes : mapping
        Subgroup name -> (N,) values of the evaluation studies.
    settings : sitecal.protocol.PlanningSettings
        The protocol's ``evaluation.planning`` (``simulations: 0`` plans nothing).
    n_bins, seed : int
        The evaluation's bins and bootstrap seed.
    progress : bool
        Show a progress bar over the planned groups.

    Returns
    -------
    (criteria, settings)
        The criteria with ``study_size`` on every judged row, and the planning settings (None, and the
        criteria unchanged, when planning is off).
    """
    if settings.simulations == 0:
        return tuple(acceptance), None
    by_id = {c.id: c for c in rules}
    judged = sum(r.verdict != INSUFFICIENT for c in acceptance for r in c.results)
    bar = progress_bar(total=judged, desc="Study size", unit="group", disable=not progress)
    planned = []
    for criterion in acceptance:
        rows = []
        probs = prob_sets[criterion.stage]
        for row in criterion.results:
            if row.verdict != INSUFFICIENT:
                mask = (
                    np.ones(probs.shape[0], dtype=bool)
                    if criterion.scope == OVERALL
                    else attributes[criterion.scope] == row.group
                )
                need = needed_size(
                    by_id[criterion.id],
                    pool_model(probs[mask], f"{row.group}, {criterion.stage} calibration"),
                    settings.sizes,
                    n_simulations=settings.simulations,
                    n_resamples=settings.resamples,
                    n_bins=n_bins,
                    level=criterion.level,
                    seed=seed,
                )
                row = dataclasses.replace(
                    row, study_size=StudySize(needed=need.needed, pass_rate=need.pass_rate)
                )
                bar.update()
            rows.append(row)
        planned.append(dataclasses.replace(criterion, results=tuple(rows)))
    bar.close()
    return tuple(planned), PlanningSettings(
        target_power=TARGET_POWER,
        n_simulations=settings.simulations,
        n_resamples=settings.resamples,
        sizes=tuple(settings.sizes),
        seed=seed,
    )
