"""Sample-size planning: how many evaluation studies a group needs for an 80 % chance to pass a criterion.

``sitecal plan PROTOCOL`` answers, for each acceptance criterion, the planner's question of Riley et al.
(2021): with ``n`` evaluation studies in a group, how likely is the criterion to pass *if the model is as
calibrated as assumed*? The answer is simulated with the project's own engine: draw ``n`` studies from
the assumed model, compute the criterion's metric and its bootstrap interval exactly as a run does, and
judge it with the run's rule; repeat, and read the share of passes against ``n``.

The assumed model is perfectly calibrated by construction (each study's label is drawn from its own
predicted probabilities), so the plan answers "enough studies to show a good model is good". Two
sources:

- **before data collection** (:func:`assumed_model`): a prevalence per class and the expected accuracy.
  Probabilities are ``softmax(offset + sigma * noise)`` with Gaussian noise, ``sigma`` set so that the
  mean top probability (the accuracy of a calibrated model) equals the assumed accuracy and the class
  offsets so that the mean probability of each class (its prevalence under calibration) is the assumed
  one;
- **after a run** (:func:`fitted_model`): the evaluation studies' calibrated probabilities from the run
  folder, as the run evaluated them (out of fold under cross-fitting), resampled, each label drawn from its
  study's probabilities.

The temperature's own uncertainty is not simulated (the plan assumes it known), so a refit run's
intervals are somewhat wider than planned: treat the plan as a lower bound.

References: R. D. Riley et al. "Minimum sample size for external validation of a clinical prediction
model with a binary outcome." Stat Med 40, 2021.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from sitecal.errors import DataError
from sitecal.evaluation import (
    DEFAULT_SIZES,
    OVERALL,
    TARGET_POWER,
    StudyModel,
    applied_probabilities,
    applied_temperatures,
    labels_from,
    pass_rate,
    pool_model,
)
from sitecal.metrics import softmax
from sitecal.protocol import AcceptanceCriterion, Protocol
from sitecal.run._resolved import sealed_protocol
from sitecal.run._stored_run import RUN_FILES, RUN_REMEDY, StoredRun, read_run
from sitecal.run.sealed import open_run

__all__ = [
    "ALL_STUDIES",
    "DEFAULT_SIZES",
    "RUN_FILES",
    "TARGET_POWER",
    "CriterionPlan",
    "StoredRun",
    "StudyModel",
    "assumed_model",
    "evaluated_probabilities",
    "fitted_model",
    "parse_sizes",
    "plan_criteria",
    "plan_models",
    "plan_table",
    "read_run",
    "stored_protocol",
]

#: The model of a run's whole evaluation split (:func:`fitted_model`).
ALL_STUDIES = "all studies"


@dataclass(frozen=True)
class CriterionPlan:
    """The simulated chance that a criterion passes in a group of each size.

    Attributes
    ----------
    criterion : str
        The criterion's id.
    group : str
        The group the studies were drawn like (``"assumed model"`` before data collection).
    sizes : tuple of int
    pass_rate : tuple of float
        Share of simulations that passed, per size.
    needed : int or None
        The smallest simulated size whose pass rate reaches :data:`TARGET_POWER`; None if none does.
    n_simulations : int
    """

    criterion: str
    group: str
    sizes: tuple[int, ...]
    pass_rate: tuple[float, ...]
    needed: int | None
    n_simulations: int


def assumed_model(prevalence: Sequence[float], accuracy: float, *, seed: int = 0) -> StudyModel:
    """A calibrated model of the given class prevalence and accuracy (before any data).

    >>> model = assumed_model([0.6, 0.25, 0.15], 0.75)
    >>> probs, labels = model.draw(20_000, np.random.default_rng(1))
    >>> round(float(probs.max(axis=1).mean()), 2), round(float((probs.argmax(1) == labels).mean()), 2)
    (0.75, 0.75)
    """
    prev = np.asarray(prevalence, dtype=np.float64)
    if prev.ndim != 1 or prev.shape[0] < 2 or not np.all(prev > 0) or not math.isclose(prev.sum(), 1.0):
        raise DataError(
            f"--prevalence: give one share per class, each > 0, summing to 1. Got {prev.tolist()}."
        )
    floor = float(prev.max())
    if not floor < accuracy < 1.0:
        raise DataError(
            f"--accuracy {accuracy}: must lie between the largest prevalence ({floor:g}, what always "
            "predicting the commonest class achieves) and 1."
        )
    noise = np.random.default_rng(seed).normal(size=(20_000, prev.shape[0]))

    def centred(sigma: float) -> tuple[NDArray[np.float64], float]:
        """The class offsets whose mean probabilities are the prevalence, and the mean top probability."""
        base = np.log(prev)
        for _ in range(30):  # fixed point: mean probability of each class -> its prevalence
            mean = softmax(base + sigma * noise).mean(axis=0)
            base = base + np.log(prev / mean)
        return base, float(softmax(base + sigma * noise).max(axis=1).mean())

    low, high = 0.0, 30.0
    for _ in range(40):  # bisection: the mean top probability grows with sigma
        mid = (low + high) / 2
        low, high = (mid, high) if centred(mid)[1] < accuracy else (low, mid)
    sigma = (low + high) / 2
    base, _ = centred(sigma)

    def draw(n: int, rng: np.random.Generator) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        probs = softmax(base + sigma * rng.normal(size=(n, prev.shape[0])))
        return probs, labels_from(probs, rng)

    shares = ", ".join(f"{p:g}" for p in prev)
    return StudyModel(f"prevalence {shares}, accuracy {accuracy:g}, calibrated", draw)


def fitted_model(run_folder: Path) -> dict[str, StudyModel]:
    """One model per calibration group from a run folder's evaluation studies, calibrated probabilities.

    Returns ``{"all studies": model}`` plus one per group of the run's calibration attribute. Each
    evaluation study is calibrated as the run evaluated it: by the fit on the fit part (one split), or
    under cross-fitting by its fold's fit on the other folds (refitted here from ``cohort.csv`` and
    ``predictions.csv`` with the run's policy, as the run fitted them). Labels are drawn afresh from each
    study's calibrated probabilities, so the model is as calibrated as the run's fits make it *by
    assumption*.

    Raises
    ------
    DataError
        Naming the file (and line) of a folder that is not a finished run's or was edited.
    """
    run = read_run(run_folder)
    probs, groups = evaluated_probabilities(run)

    def model(rows_of: NDArray[np.int64], name: str) -> StudyModel:
        return pool_model(
            probs[rows_of],
            f"drawn from the run's {rows_of.shape[0]} evaluation studies of {name}, calibrated",
        )

    out = {ALL_STUDIES: model(np.arange(probs.shape[0]), ALL_STUDIES)}
    if run.per is not None:
        for g in sorted(set(groups.tolist())):
            out[g] = model(np.flatnonzero(groups == g), g)
    return out


def evaluated_probabilities(run: StoredRun) -> tuple[NDArray[np.float64], NDArray[np.str_]]:
    """The evaluation studies' calibrated probabilities, as the run evaluated them, and their groups.

    One split: each study calibrated by the fit on the fit part (what ``calibration.json`` holds).
    Cross-fitting: by its fold's fit on the other folds, so each probability comes from a fit that did not
    see the study (``calibration.json`` holds the fit on every study, which saw them all).
    """
    held = run.split.held
    if run.method == "temperature":
        policy = {"min_group_size": run.min_group_size, "fallback": run.fallback}
        t = applied_temperatures(run.split, run.logits, run.labels, run.groups, run.patients, policy)
        probs = softmax(run.logits[held], temperature=t[held]) if np.isfinite(t[held]).all() else None
    else:
        calibrated = applied_probabilities(
            run.split, run.logits, run.labels, run.groups, run.method, run.min_group_size
        )[held]
        probs = calibrated if np.isfinite(calibrated).all() else None
    if probs is None or probs.shape[0] == 0:
        raise DataError(
            f"{run.folder / 'cohort.csv'}: its split leaves evaluation studies without a fit (a part or a "
            f"fold with no studies to fit on). {RUN_REMEDY}"
        )
    return probs, run.groups[held]


def plan_criteria(
    protocol: Protocol,
    models: Mapping[str, StudyModel],
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    n_simulations: int = 200,
    n_resamples: int = 400,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> list[CriterionPlan]:
    """Simulate each criterion's chance to pass at each size, for each model.

    Each simulation draws ``n`` studies (one per patient), computes the criterion's metric with its
    percentile bootstrap interval at the protocol's level (``n_resamples`` resamples: fewer than a run's,
    which changes the interval's ends by little), and judges it with the run's rule.
    """
    ev = protocol.evaluation
    criteria = [c for c in protocol.acceptance]
    if not criteria:
        raise DataError("the protocol has no acceptance criteria: there is nothing to plan for.")
    total = sum(len(_models_for(c, models)) for c in criteria) * len(sizes)
    done = 0
    plans = []
    for criterion in criteria:
        for name, model in _models_for(criterion, models).items():
            rates = []
            for n in sizes:
                rates.append(
                    pass_rate(
                        criterion,
                        model,
                        n,
                        n_simulations=n_simulations,
                        n_resamples=n_resamples,
                        n_bins=ev.n_bins,
                        level=ev.bootstrap.level,
                        seed=seed,
                    )
                )
                done += 1
                if progress is not None:
                    progress(done, total)
            needed = next((n for n, r in zip(sizes, rates, strict=True) if r >= TARGET_POWER), None)
            plans.append(CriterionPlan(criterion.id, name, tuple(sizes), tuple(rates), needed, n_simulations))
    return plans


def _models_for(criterion: AcceptanceCriterion, models: Mapping[str, StudyModel]) -> Mapping[str, StudyModel]:
    """A criterion on all studies is planned on the whole cohort's model only; one per group on each."""
    if criterion.scope == OVERALL and ALL_STUDIES in models:
        return {ALL_STUDIES: models[ALL_STUDIES]}
    return models


def plan_models(
    protocol: Protocol,
    *,
    from_run: Path | None,
    prevalence: str | None,
    accuracy: float | None,
    key_file: Path | None = None,
) -> dict[str, StudyModel]:
    """The models ``sitecal plan`` simulates: a run folder's, or the assumed one (the command's options).

    A run folder is verified against its seal first (:func:`sitecal.run.sealed.open_run`; ``key_file``:
    the site key, when it is not where the run's protocol says), so the plan is drawn from what the run
    wrote; :func:`fitted_model` reads a folder so verified.
    """
    classes = protocol.model.class_names
    if from_run is not None:
        if prevalence is not None or accuracy is not None:
            raise DataError("give either --from-run or --prevalence with --accuracy, not both")
        open_run(from_run, key_file=key_file)
        return fitted_model(from_run)
    if prevalence is None or accuracy is None:
        raise DataError(
            f"before data collection give --prevalence (one share per class: {', '.join(classes)}) and "
            "--accuracy; after a run, --from-run RUN_DIR"
        )
    try:
        shares = [float(x) for x in prevalence.split(",")]
    except ValueError:
        raise DataError(f"--prevalence {prevalence!r}: give numbers separated by commas") from None
    if len(shares) != len(classes):
        raise DataError(
            f"--prevalence: {len(shares)} shares for {len(classes)} classes ({', '.join(classes)})"
        )
    return {"assumed model": assumed_model(shares, accuracy)}


def stored_protocol(run_folder: Path, *, key_file: Path | None = None) -> Protocol:
    """The protocol a run folder was run with: what ``sitecal plan --from-run`` plans with by default.

    The folder is verified against its seal (``key_file``: the site key, when it is not where the run's
    protocol says), and its ``protocol.yaml`` must be the sealed one; none of its paths is used.
    """
    return sealed_protocol(Path(run_folder), open_run(run_folder, key_file=key_file)).protocol


def parse_sizes(text: str | None) -> tuple[int, ...]:
    """``--sizes``: whole numbers separated by commas, sorted; the default sizes when not given."""
    if text is None:
        return DEFAULT_SIZES
    try:
        sizes = tuple(sorted({int(x) for x in text.split(",")}))
    except ValueError:
        raise DataError(
            f"--sizes {text!r}: give whole numbers separated by commas, e.g. 100,200,400"
        ) from None
    if not sizes or sizes[0] < 10 or sizes[-1] > 100_000:
        raise DataError(f"--sizes {text!r}: each size must lie between 10 and 100,000 studies")
    return sizes


def plan_table(protocol: Protocol, models: Mapping[str, StudyModel], plans: Sequence[CriterionPlan]) -> str:
    """The plan as the command prints it: the models, then one table per criterion."""
    n_sim = plans[0].n_simulations if plans else 0
    lines = [
        f"Chance to pass each criterion if the model is calibrated ({n_sim} simulated groups per size; "
        f"{protocol.evaluation.bootstrap.level * 100:g}% intervals as a run computes them; the "
        "temperature's own uncertainty not included, so read the sizes as lower bounds):",
        *(f"  {name}: {model.description}" for name, model in models.items()),
    ]
    for criterion in protocol.acceptance:
        rows = [p for p in plans if p.criterion == criterion.id]
        sizes = rows[0].sizes
        width = max(len(p.group) for p in rows)
        lines += [
            "",
            f"{criterion.id} ({criterion.metric} {criterion.stage} calibration, {criterion.rule}):",
            "  "
            + "group".ljust(width)
            + "".join(f"{n:>7}" for n in sizes)
            + f"   needed for {TARGET_POWER:.0%}",
        ]
        for p in rows:
            needed = f">{sizes[-1]}" if p.needed is None else str(p.needed)
            cells = "".join(f"{r * 100:>6.0f}%" for r in p.pass_rate)
            lines.append("  " + p.group.ljust(width) + cells + f"   {needed}")
    return "\n".join(lines)
