"""Coverage of the intervals the report prints for calibration slope, intercept and O:E.

The intervals are those of the recalibration analysis (and of criteria on ``slope``, ``intercept`` and
``oe_ratio``): slope and intercept with cluster-robust Wald intervals (``top_label_recalibration``'s
standard errors, ``estimate ± z se``), O:E with the patient-cluster percentile bootstrap
(``TopLabelOEStatistic``). Two studies per patient, correlated within the patient.

Source (3 classes, as ``coverage_ece.py``): top-label confidence ``c = 1/3 + (2/3) X``, ``X ~ Beta(5, 2)``;
the prediction is correct with probability ``f(c)``:

- calibrated: ``f(c) = c``: slope 1, intercept 0, O:E 1 exactly;
- over-confident: ``f(c) = 1/3 + 0.85 (c - 1/3)``: the true values are the large-sample fits on
  2,000,000 studies (printed).

For each case and n (studies per group) R replications draw a group and record whether each nominal
95 % interval contains the true value. Run from the repository root::

    python benchmarks/coverage_recalibration.py           # n = 300, 1000; R = 1000; B = 400 (~3 min)
    python benchmarks/coverage_recalibration.py --quick   # n = 300; R = 60
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.special import ndtri

from sitecal.metrics import TopLabelOEStatistic, top_label_recalibration
from sitecal.stats import bootstrap_interval

CASES = {"calibrated": 1.0, "over-confident": 0.85}


def _draw(n: int, shrink: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    patients = np.arange(n) // 2
    # the two studies of a patient share part of their difficulty: correlated within the cluster
    shared = rng.beta(5, 2, size=patients.max() + 1)[patients]
    x = np.clip(0.5 * shared + 0.5 * rng.beta(5, 2, size=n), 0, 1)
    c = 1 / 3 + (2 / 3) * x
    truth = 1 / 3 + shrink * (c - 1 / 3)
    correct = rng.random(n) < truth
    predicted = rng.integers(0, 3, n)
    other = (predicted + rng.integers(1, 3, n)) % 3
    labels = np.where(correct, predicted, other)
    probs = np.repeat(((1 - c) / 2)[:, None], 3, axis=1)
    probs[np.arange(n), predicted] = c
    return probs, labels, patients


def _truth(shrink: float) -> dict[str, float]:
    if shrink == 1.0:
        return {"slope": 1.0, "intercept": 0.0, "oe_ratio": 1.0}
    probs, labels, _ = _draw(2_000_000, shrink, np.random.default_rng(123))
    res = top_label_recalibration(probs, labels)
    return {"slope": float(res.slope), "intercept": float(res.intercept), "oe_ratio": float(res.oe_ratio)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes, reps, b = ((300,), 60, 200) if args.quick else ((300, 1000), 1000, 400)
    z = float(ndtri(0.975))
    started = time.perf_counter()
    print(f"R = {reps} replications per cell, B = {b} bootstrap resamples for O:E; nominal 95 %\n")
    print("| case | n | slope (Wald) | intercept (Wald) | O:E (bootstrap) |")
    print("| --- | --- | --- | --- | --- |")
    for case, shrink in CASES.items():
        truth = _truth(shrink)
        for n in sizes:
            rng = np.random.default_rng([n, int(shrink * 100)])
            hits = {"slope": 0, "intercept": 0, "oe_ratio": 0}
            for r in range(reps):  # a loop over replications
                probs, labels, patients = _draw(n, shrink, rng)
                res = top_label_recalibration(probs, labels, clusters=patients)
                for name, est, se in (
                    ("slope", res.slope, res.slope_se),
                    ("intercept", res.intercept, res.intercept_se),
                ):
                    hits[name] += est is not None and se is not None and abs(est - truth[name]) <= z * se
                oe = bootstrap_interval(
                    TopLabelOEStatistic(),
                    (probs, labels),
                    clusters=patients,
                    n_resamples=b,
                    seed=r,
                )
                hits["oe_ratio"] += oe.low <= truth["oe_ratio"] <= oe.high
            cells = []
            for name in ("slope", "intercept", "oe_ratio"):
                p = hits[name] / reps
                cells.append(f"{p * 100:.1f} % (± {math.sqrt(p * (1 - p) / reps) * 100:.1f})")
            print(f"| {case} | {n} | " + " | ".join(cells) + " |")
        true = " | ".join(f"{truth[k]:.4f}" for k in ("slope", "intercept", "oe_ratio"))
        print(f"|  | true values | {true} |")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
