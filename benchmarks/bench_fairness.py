"""False flags and power of the fairness comparison, before and after calibration, per disparity metric.

Simulates a three-class model (logits N(0, 1.6²), class 0 shifted by 0.8: accuracy about 0.70), two
studies per patient, labels drawn from the model's own probabilities (calibrated) except in a planted
group, whose labels are drawn from the probabilities at temperature 1.6 (the model is over-confident
there: the temperature that calibrates it is 1.6), or at 1 / 1.6 (under-confident).

**Part 1, group sizes** (before calibration): six groups of 40, 80, 150, 300, 500 and 800 studies; no
disparity, then the group of 300 planted at T = 1.6. Rules: sitecal's size-matched permutation test with
max-T control (``size_matched_flags``, the flags of ``evaluation.json``) on each offered disparity metric,
and the naive rule it replaces (the group's bootstrap interval of its gap to the rest excludes 0, no
multiplicity control) on the plug-in ECE. Printed: the false-flag rate per group size, and the share of
replications in which the planted group is flagged (power).

**Part 2, after calibration under one split**: four groups of 600 studies (300 patients), each split
by patient into 300 fit and 300 evaluated studies; no disparity, then one group planted at T = 1.6 or
1 / 1.6. Stages: before calibration; after one global temperature (fitted on every fit study); after
each group's own temperature (``calibration.per`` the attribute), flagged by the size-matched test with
the temperatures held fixed (what ``evaluation.json`` does), and by ``refit_size_matched_flags``, which
refits each group's temperature on permuted fit patients in every permutation; and, for comparison,
each group's own temperatures under 5-fold cross-fitting instead of one split (all 600 studies of a
group evaluated, each at the temperature of its group's other folds), with the temperatures held fixed.
Printed: the false-flag rate (share of replications in which any group is flagged: what max-T controls
at 5 %), with its Wilson 95 % interval, and the power on the planted group.

Run from the repository root::

    python benchmarks/bench_fairness.py            # 600 replications: 7 minutes on 2 cores
    python benchmarks/bench_fairness.py --quick   # 20 replications, 200 permutations: a smoke run
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from _wilson import wilson_text

from sitecal.calibration import fit_temperature
from sitecal.metrics import expected_calibration_error, softmax
from sitecal.metrics.registry import CALIBRATION_GAP, ECE, NLL, OE_RATIO, names
from sitecal.stats import BootstrapSpec, disparity_intervals, size_matched_flags_each
from sitecal.stats._disparity_refit_flags import refit_size_matched_flags

SIZES = (40, 80, 150, 300, 500, 800)
PLANTED = 300
PLANTED_T = 1.6
METRICS = names(comparable=True)  # every offered disparity metric
GROUPS = 4  # part 2: groups of PER_GROUP evaluated (and as many fit) studies
PER_GROUP = 300
FOLDS = 5
REFIT_METRICS = (ECE.name, CALIBRATION_GAP.name, OE_RATIO.name, NLL.name)


def _model(rng: np.random.Generator, n: int) -> np.ndarray:
    logits = rng.normal(0.0, 1.6, size=(n, 3))
    logits[:, 0] += 0.8
    return logits


def _labels(rng: np.random.Generator, logits: np.ndarray, planted: np.ndarray, t: float) -> np.ndarray:
    truth = softmax(logits)
    truth[planted] = softmax(logits[planted], temperature=t)
    return (rng.uniform(size=(logits.shape[0], 1)) > truth.cumsum(axis=1)).sum(axis=1)


def _sizes(args: tuple[int, bool, int, int]) -> dict[str, dict[str, bool]]:
    """Part 1: one replication's flags per rule and group."""
    seed, planted, n_permutations, n_resamples = args
    rng = np.random.default_rng(seed)
    groups = np.concatenate([np.full(n, f"n={n}") for n in SIZES])
    logits = _model(rng, groups.shape[0])
    labels = _labels(rng, logits, groups == f"n={PLANTED}", PLANTED_T if planted else 1.0)
    probs, patients = softmax(logits), np.arange(groups.shape[0]) // 2
    flags = size_matched_flags_each(
        [(probs, m) for m in METRICS],
        labels,
        groups,
        clusters=patients,
        n_permutations=n_permutations,
        seed=seed,
    )
    out = {f"size-matched, {f.metric}": dict(f.flagged) for f in flags}
    naive = disparity_intervals(
        probs, labels, groups, clusters=patients, metric=ECE.name, spec=BootstrapSpec(n_resamples=n_resamples)
    )
    out[f"naive interval, {ECE.name}"] = {
        g: bool(r.low > 0 or r.high < 0) for g, r in naive.versus_rest.items()
    }
    return out


def _after(args: tuple[int, float, int, bool]) -> dict[str, tuple[bool, bool]]:
    """Part 2: per (stage, metric), whether any group is flagged and whether the planted group is."""
    seed, t, n_permutations, refit = args
    rng = np.random.default_rng(10_000 + seed)
    groups = np.repeat([f"g{i}" for i in range(GROUPS)], 2 * PER_GROUP)
    logits = _model(rng, groups.shape[0])
    labels = _labels(rng, logits, groups == "g0", t)
    patients = np.arange(groups.shape[0]) // 2
    fit = patients % 2 == 0  # one split by patient: half of each group's patients fit the temperatures
    held = ~fit
    overall = fit_temperature(logits[fit], labels[fit]).temperature
    own = np.empty((int(held.sum()), 3))
    for g in np.unique(groups).tolist():
        t_g = fit_temperature(logits[fit & (groups == g)], labels[fit & (groups == g)]).temperature
        own[groups[held] == g] = softmax(logits[held & (groups == g)], temperature=t_g)
    stages = {
        "before": softmax(logits[held]),
        "after, one temperature": softmax(logits[held], temperature=overall),
        "after, own temperatures, T fixed": own,
    }
    cases = [(probs, m) for probs in stages.values() for m in METRICS]
    flags = size_matched_flags_each(
        cases, labels[held], groups[held], clusters=patients[held], n_permutations=n_permutations, seed=seed
    )
    keys = [f"{stage} | {m}" for stage in stages for m in METRICS]
    if refit:
        keys += [f"after, own temperatures, refitted | {m}" for m in REFIT_METRICS]
        flags += refit_size_matched_flags(
            logits[held],
            labels[held],
            groups[held],
            clusters=patients[held],
            fit_logits=logits[fit],
            fit_labels=labels[fit],
            fit_groups=groups[fit],
            fit_clusters=patients[fit],
            metrics=REFIT_METRICS,
            n_permutations=n_permutations,
            seed=seed,
        )
    if refit:  # cross-fitting instead of one split: every study evaluated, at its group's other folds' T
        fold = rng.permutation(patients.max() + 1)[patients] % FOLDS
        crossfit = np.empty((groups.shape[0], 3))
        for g in np.unique(groups).tolist():
            for k in range(FOLDS):
                train, test = (groups == g) & (fold != k), (groups == g) & (fold == k)
                t_k = fit_temperature(logits[train], labels[train]).temperature
                crossfit[test] = softmax(logits[test], temperature=t_k)
        keys += [f"after, own temperatures, {FOLDS}-fold cross-fitting, T fixed | {m}" for m in METRICS]
        flags += size_matched_flags_each(
            [(crossfit, m) for m in METRICS],
            labels,
            groups,
            clusters=patients,
            n_permutations=n_permutations,
            seed=seed,
        )
    return {k: (any(f.flagged.values()), f.flagged["g0"]) for k, f in zip(keys, flags, strict=True)}


def _rate(hits: list[bool]) -> str:
    return wilson_text(int(sum(hits)), len(hits))


def _planted_ece() -> float:
    rng = np.random.default_rng(1)
    logits = _model(rng, 200_000)
    labels = _labels(rng, logits, np.ones(200_000, dtype=bool), PLANTED_T)
    return expected_calibration_error(softmax(logits), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=600)
    parser.add_argument("--permutations", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--quick", action="store_true", help="20 replications, 200 permutations and resamples"
    )
    args = parser.parse_args()
    if args.quick:
        args.reps, args.permutations, args.resamples = 20, 200, 200
    started = time.perf_counter()
    reps, perms = args.reps, args.permutations
    print(f"planted group: top-label ECE about {_planted_ece():.3f} at T = {PLANTED_T} (200,000 studies)")
    with ProcessPoolExecutor(args.workers) as pool:
        null = list(pool.map(_sizes, [(s, False, perms, args.resamples) for s in range(reps)], chunksize=4))
        alt = list(pool.map(_sizes, [(s, True, perms, args.resamples) for s in range(reps)], chunksize=4))
        after = {
            t: list(pool.map(_after, [(s, t, perms, t == 1.0) for s in range(reps)], chunksize=4))
            for t in (1.0, PLANTED_T, 1 / PLANTED_T)
        }
    print(f"\n## Part 1: group sizes, before calibration ({reps} replications, {perms} permutations)\n")
    print(
        "| rule | " + " | ".join(f"n = {n}" for n in SIZES) + f" | power (n = {PLANTED}, T = {PLANTED_T}) |"
    )
    print("| --- | " + " | ".join("---" for _ in SIZES) + " | --- |")
    for rule in null[0]:
        cells = [f"{np.mean([r[rule][f'n={n}'] for r in null]) * 100:.1f} %" for n in SIZES]
        cells.append(_rate([r[rule][f"n={PLANTED}"] for r in alt]))
        print(f"| {rule} | " + " | ".join(cells) + " |")
    print(
        f"\n## Part 2: {GROUPS} groups of {PER_GROUP} evaluated studies, one split ({reps} replications)\n\n"
        "False flags: replications in which any group is flagged (no disparity). Power: the planted group "
        "is flagged. Rates with Wilson 95 % intervals.\n"
    )
    print(f"| stage | metric | false flags | power, T = {PLANTED_T} | power, T = 1/{PLANTED_T} |")
    print("| --- | --- | --- | --- | --- |")
    for key in after[1.0][0]:
        stage, metric = key.split(" | ")
        power = [
            "n/a (recalibrated)" if "own" in stage else _rate([r[key][1] for r in after[t]])
            for t in (PLANTED_T, 1 / PLANTED_T)
        ]
        print(
            f"| {stage} | {metric} | {_rate([r[key][0] for r in after[1.0]])} | " + " | ".join(power) + " |"
        )
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
