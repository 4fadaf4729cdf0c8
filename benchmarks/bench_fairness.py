"""False flags and power of the fairness comparison, against the plain group-vs-rest bootstrap interval.

Simulates a three-class model on six groups of 40, 80, 150, 300, 500 and 800 studies (two studies per
patient):

- **no disparity**: the model is calibrated in every group (labels drawn from its own probabilities);
- **planted**: the same, except that the group of 300 is overconfident (its labels are drawn from the
  probabilities at temperature 1.6, a top-label ECE of about 0.1 there).

For each replication it records which groups are flagged

- by sitecal's size-matched permutation test with max-T control (``size_matched_flags``, the flags of
  ``evaluation.json``), on the plug-in ECE and on the debiased ECE, and
- by the naive rule the flags replace: the group's own bootstrap interval of its gap to the rest excludes
  0 (``disparity_intervals(...).versus_rest``, no multiplicity control), on the plug-in ECE.

It prints the false-flag rate per group size (no disparity; target: at most 5 % at every size) and the
share of replications in which the planted group is flagged (power; target: at least 80 %), with binomial
standard errors. Run from the repository root::

    python benchmarks/bench_fairness.py            # 200 replications, about 10 minutes on 2 cores
    python benchmarks/bench_fairness.py --reps 40  # a quick look
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from sitecal.metrics import expected_calibration_error, softmax
from sitecal.stats import BootstrapSpec, disparity_intervals, size_matched_flags

SIZES = (40, 80, 150, 300, 500, 800)
PLANTED = 300
PLANTED_T = 1.6


def _cohort(seed: int, planted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    groups = np.concatenate([np.full(n, f"n={n}") for n in SIZES])
    logits = rng.normal(0.0, 1.6, size=(groups.shape[0], 3))
    logits[:, 0] += 0.8
    probs = softmax(logits)
    truth = probs.copy()
    if planted:
        rows = groups == f"n={PLANTED}"
        truth[rows] = softmax(logits[rows], temperature=PLANTED_T)
    labels = (rng.uniform(size=(groups.shape[0], 1)) > truth.cumsum(axis=1)).sum(axis=1)
    patients = np.arange(groups.shape[0]) // 2  # two studies a patient, within one group
    return probs, labels, groups, patients


def _one(args: tuple[int, bool, int, int]) -> dict[str, dict[str, bool]]:
    seed, planted, n_permutations, n_resamples = args
    probs, labels, groups, patients = _cohort(seed, planted)
    out = {}
    for metric in ("ece", "ece_debiased", "nll", "brier"):
        flags = size_matched_flags(
            probs, labels, groups, clusters=patients, metric=metric, n_permutations=n_permutations, seed=seed
        )
        out[f"sitecal flags, {metric}"] = dict(flags.flagged)
    naive = disparity_intervals(
        probs, labels, groups, clusters=patients, metric="ece", spec=BootstrapSpec(n_resamples=n_resamples)
    )
    out["naive interval, ece"] = {g: bool(r.low > 0 or r.high < 0) for g, r in naive.versus_rest.items()}
    return out


def _planted_ece() -> float:
    rng = np.random.default_rng(1)
    logits = rng.normal(0.0, 1.6, size=(200_000, 3))
    logits[:, 0] += 0.8
    p = softmax(logits)
    truth = softmax(logits, temperature=PLANTED_T)
    y = (rng.uniform(size=(p.shape[0], 1)) > truth.cumsum(axis=1)).sum(axis=1)
    return expected_calibration_error(p, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--permutations", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"planted group: n = {PLANTED}, top-label ECE about {_planted_ece():.3f} (200,000 studies)")
    with ProcessPoolExecutor(args.workers) as pool:
        null = list(pool.map(_one, [(s, False, args.permutations, args.resamples) for s in range(args.reps)]))
        alt = list(pool.map(_one, [(s, True, args.permutations, args.resamples) for s in range(args.reps)]))
    rules = list(null[0])
    print(f"\n{args.reps} replications; false-flag rate per group size (no disparity), then power:\n")
    print("| rule | " + " | ".join(f"n = {n}" for n in SIZES) + f" | power (n = {PLANTED} planted) |")
    print("| --- | " + " | ".join("---" for _ in SIZES) + " | --- |")
    for rule in rules:
        cells = []
        for n in SIZES:
            rate = np.mean([r[rule][f"n={n}"] for r in null])
            cells.append(f"{rate * 100:.1f} %")
        power = np.mean([r[rule][f"n={PLANTED}"] for r in alt])
        se = math.sqrt(max(power * (1 - power), 1e-12) / args.reps)
        cells.append(f"{power * 100:.0f} % (± {se * 100:.0f})")
        print(f"| {rule} | " + " | ".join(cells) + " |")
    worst = max(math.sqrt(0.05 * 0.95 / args.reps), 0.0)
    print(
        f"\n(a rate of 5 % measured on {args.reps} replications has a standard error of {worst * 100:.1f} %)"
    )
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
