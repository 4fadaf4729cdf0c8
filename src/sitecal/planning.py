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

import csv
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

import numpy as np
from numpy.typing import NDArray

from sitecal._io import read_json
from sitecal.errors import DataError
from sitecal.evaluation import (
    DEFAULT_SIZES,
    OVERALL,
    TARGET_POWER,
    Split,
    StudyModel,
    applied_probabilities,
    applied_temperatures,
    labels_from,
    pass_rate,
    pool_model,
)
from sitecal.metrics import softmax
from sitecal.protocol import AcceptanceCriterion, CalibrationSettings, Protocol
from sitecal.sealed_run import open_run

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


#: What --from-run reads of a run folder, in the order it reads them.
RUN_FILES = ("calibration.json", "predictions.csv", "cohort.csv")
# The next step of every message about a run folder's file
_REMEDY = "Point --from-run at the unedited folder of a finished run."
# cohort.csv's split column: the one split's parts, or a fold of a cross-fitted run (fold 1 to fold K)
_FOLD = re.compile(r"fold ([1-9][0-9]{0,2})")
# the values the protocol allows (calibration.method, calibration.fallback): what a run can have written
_METHODS = get_args(CalibrationSettings.model_fields["method"].annotation)
_FALLBACKS = get_args(CalibrationSettings.model_fields["fallback"].annotation)


@dataclass(frozen=True)
class StoredRun:
    """What --from-run reads of a run folder: its analysed studies and how it calibrated them.

    Attributes
    ----------
    folder : Path
    logits : numpy.ndarray of float, shape (N, C)
        Each analysed study's logits (``predictions.csv``), in ``cohort.csv`` order.
    labels : numpy.ndarray of int, shape (N,)
    patients : numpy.ndarray of str, shape (N,)
        Patient pseudonyms: a patient's studies share a fold.
    groups : numpy.ndarray of str, shape (N,)
        Each study's calibration group (``"all"`` without ``per``).
    split : Split
        The run's split, from ``cohort.csv``'s split column.
    per : str or None
        The calibration attribute.
    method : str
        ``calibration.method``.
    min_group_size : int
    fallback : str
        The run's policy for small groups (temperature scaling).
    """

    folder: Path
    logits: NDArray[np.float64]
    labels: NDArray[np.int64]
    patients: NDArray[np.str_]
    groups: NDArray[np.str_]
    split: Split
    per: str | None
    method: str
    min_group_size: int
    fallback: str


def read_run(run_folder: Path) -> StoredRun:
    """Read what --from-run needs of a run folder; the only place planning reads one.

    :func:`plan_models` verifies the folder's seal before it calls this, so the files are the run's own.
    ``calibration.json`` is read by :func:`sitecal._io.read_json` (16 MiB, 64 levels); the two tables
    row by row (a cell at most the csv module's field limit, 128 kB), each problem named by its line.

    Raises
    ------
    DataError
        A missing file, or a file that is not what the run wrote (named, with its line).
    """
    folder = Path(run_folder)
    for name in RUN_FILES:
        if not (folder / name).is_file():
            raise DataError(
                f"{folder / name}: not found. --from-run needs a run folder written by `sitecal run`."
            )
    settings = _calibration_settings(folder / "calibration.json")
    class_names = settings["class_names"]
    logits = _logits(folder / "predictions.csv", class_names)
    rows = _cohort_rows(folder / "cohort.csv", settings["per"], class_names, logits)
    if not rows:
        raise DataError(f"{folder / 'cohort.csv'}: no analysed study to plan from. {_REMEDY}")
    lines, keys, patients, labels, groups, parts = (list(column) for column in zip(*rows, strict=True))
    return StoredRun(
        folder=folder,
        logits=np.array([logits[k] for k in keys], dtype=np.float64),
        labels=np.array(labels, dtype=np.int64),
        patients=np.array(patients, dtype=str),
        groups=np.array(groups, dtype=str),
        split=_split(folder / "cohort.csv", parts, lines),
        per=settings["per"],
        method=settings["method"],
        min_group_size=settings["min_group_size"],
        fallback=settings["fallback"],
    )


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
            f"fold with no studies to fit on). {_REMEDY}"
        )
    return probs, run.groups[held]


def _calibration_settings(path: Path) -> dict[str, Any]:
    """The run's calibration method, attribute, classes and small-group policy, from calibration.json."""
    cal = read_json(path, remedy=_REMEDY)
    if not isinstance(cal, dict):
        raise DataError(f"{path}: not a JSON object. {_REMEDY}")
    method, per, names = cal.get("method"), cal.get("per"), cal.get("class_names")
    # another method's min_group_size is its fits' (GroupMethods.to_dict)
    fits = cal if method == "temperature" else cal.get("fits")
    size = fits.get("min_group_size") if isinstance(fits, dict) else None
    fallback = cal.get("fallback") if method == "temperature" else "global"
    checks = [
        ("method", method in _METHODS, f"one of {', '.join(_METHODS)}"),
        ("per", per is None or (isinstance(per, str) and per != ""), "a subgroup name or null"),
        (
            "class_names",
            isinstance(names, list) and len(names) >= 2 and all(isinstance(c, str) and c for c in names),
            "two or more class names",
        ),
        (
            "min_group_size",
            isinstance(size, int) and not isinstance(size, bool) and size >= 1,
            "a whole number >= 1",
        ),
        ("fallback", fallback in _FALLBACKS, f"one of {', '.join(_FALLBACKS)}"),
    ]
    for field, ok, expected in checks:  # the value is not quoted: it is the file's text
        if not ok:
            raise DataError(f"{path}: {field}: expected {expected}. {_REMEDY}")
    return {
        "method": method,
        "per": per,
        "class_names": tuple(cast(list[str], names)),
        "min_group_size": size,
        "fallback": fallback,
    }


def _csv_rows(path: Path, needed: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, the ``needed`` cells) of each row of one of the run's tables; a missing column is named."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            missing = [c for c in needed if c not in header]
            if missing:
                raise DataError(f"{path}: no column {missing[0]}. {_REMEDY}")
            at = {c: header.index(c) for c in needed}
            for cells in reader:
                if len(cells) != len(header):
                    raise DataError(
                        f"{path}: line {reader.line_num}: {len(cells)} cells, not {len(header)}. {_REMEDY}"
                    )
                yield reader.line_num, {c: cells[i] for c, i in at.items()}
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        # the csv module's messages name the line and the limit, never the cell's text
        raise DataError(f"{path}: cannot read it ({type(exc).__name__}: {exc}). {_REMEDY}") from None


def _logits(path: Path, class_names: Sequence[str]) -> dict[str, NDArray[np.float64]]:
    """Each study's logits from predictions.csv (finite numbers, one column per class)."""
    columns = [f"logit:{c}" for c in class_names]
    out: dict[str, NDArray[np.float64]] = {}
    for line, cells in _csv_rows(path, ["study_key", *columns]):
        try:
            row = np.array([float(cells[c]) for c in columns])
        except ValueError:
            row = np.array([math.nan])
        if not np.isfinite(row).all():
            raise DataError(f"{path}: line {line}: a logit is not a finite number. {_REMEDY}")
        if cells["study_key"] in out:
            raise DataError(f"{path}: line {line}: a study given twice. {_REMEDY}")
        out[cells["study_key"]] = row
    return out


def _cohort_rows(
    path: Path, per: str | None, class_names: Sequence[str], logits: Mapping[str, NDArray[np.float64]]
) -> list[tuple[int, str, str, int, str, str]]:
    """(line, study, patient, label index, calibration group, part of the split) of each cohort.csv row."""
    index = {c: i for i, c in enumerate(class_names)}
    needed = ["study_key", "patient_key", "label", "split", *([per] if per else [])]
    rows = []
    for line, cells in _csv_rows(path, needed):
        if cells["label"] not in index:
            raise DataError(
                f"{path}: line {line}: the label is none of calibration.json's classes. {_REMEDY}"
            )
        if cells["study_key"] not in logits:
            raise DataError(f"{path}: line {line}: the study has no row in predictions.csv. {_REMEDY}")
        group = cells[per] if per else "all"
        rows.append(
            (line, cells["study_key"], cells["patient_key"], index[cells["label"]], group, cells["split"])
        )
    return rows


def _split(path: Path, parts: Sequence[str], lines: Sequence[int]) -> Split:
    """The run's split from cohort.csv's split column: fit / evaluation, or fold 1 to fold K."""
    folds = [_FOLD.fullmatch(p) for p in parts]
    if all(folds):
        fold = np.array([int(m.group(1)) - 1 for m in folds if m is not None], dtype=np.int64)
        return Split("crossfit", fold, int(fold.max()) + 1)
    if all(p in ("fit", "evaluation") for p in parts):
        return Split.from_fit_mask(np.array([p == "fit" for p in parts], dtype=bool))
    # the first row that is no part of a split, or whose kind (parts or folds) is not the first row's
    crossfit = folds[0] is not None
    line = next(
        n
        for n, p, f in zip(lines, parts, folds, strict=True)
        if (f is not None) != crossfit or (f is None and p not in ("fit", "evaluation"))
    )
    raise DataError(
        f"{path}: line {line}: split is none of fit, evaluation or fold 1 to K, or the column mixes a one "
        f"split's parts with folds. {_REMEDY}"
    )


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

    A run folder is verified against its seal first (:func:`sitecal.sealed_run.open_run`; ``key_file``:
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
