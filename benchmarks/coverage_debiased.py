"""Coverage, consumer risk and power of the debiased-ECE interval, through the engines a run uses.

What is measured: the interval sitecal reports for ``ece_debiased`` (percentile, patient-cluster
bootstrap; BCa is refused for it), before calibration (``sitecal.stats.bootstrap_metrics``) and after
calibration with the temperature refitted in every resample (``sitecal.stats.refit_bootstrap``, a fit
part as large as the evaluated part, as ``fit_fraction: 0.5``), and the acceptance rule "debiased ECE
below 0.10": PASS when the interval's upper end is below 0.10, FAIL when its lower end is above.

Source (3 classes): true logits ``z ~ N(0, 1.6^2)`` per class, class 0 shifted by +0.8; the label is
drawn from ``softmax(z)``. Patients hold one or two studies (every third patient two). The model's
logits are ``z`` (calibrated), ``T z`` (over-confident by a temperature T) or ``z + (d, 0, 0)`` (an
intercept shift, which no temperature removes). Cases:

- calibrated; T = 1.6; T = 2.55; shift d = 1 (coverage);
- at the margin: the T whose binned l2 error is 0.10 before calibration (false FAIL), and the shift d
  whose error after the best temperature is 0.10;
- beyond it: the T (before) and the d (after) whose error is 0.11 (consumer risk: a PASS is wrong).

Stages: ``before``; ``after`` (one split: a fit part of n further studies, T refitted in every
resample); ``crossfit`` (the n studies in 5 folds of patients, each fold calibrated by the temperature of
the other four, every fold refitted in every resample: ``sitecal.stats.crossfit_bootstrap``).

True values: the debiased estimator on 2 x 10^6 draws (its bias is zero; its standard error there is
below 1e-4 on the squared scale); after calibration, at the temperature that minimises the NLL on those
draws. Each rate has its Wilson 95 % interval. ``--bins`` compares numbers of bins (the estimand is
then each binning's own binned error; the cases keep the T and d found for 15 bins).

The reported interval is the studentised bootstrap (``sitecal.stats._scale``). ``--rule old`` adds,
before calibration and on the same resamples, the two earlier rules: the previous release's recentred
percentile interval (``D* - (mean D* - D)``) and the one before it (the percentile of the clamped
replicates). After calibration the previous release's rows are the earlier run of this script: the
seeds (``1000 n + r``), samples and resamples are the same.

Run:  python benchmarks/coverage_debiased.py                (R = 300, n = 50, 100, 300, 1000, B = 1000)
      python benchmarks/coverage_debiased.py --quick        (R = 30, n = 100, 300, B = 200)
      python benchmarks/coverage_debiased.py --bins 5 8 15 --cases calibrated beyond --stages before
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _wilson import wilson_text
from scipy.optimize import brentq

from sitecal.calibration import fit_temperature
from sitecal.metrics import metric_statistic, softmax
from sitecal.metrics._debiased import debiased_squared_from_sums
from sitecal.stats import BootstrapSpec, bootstrap_metrics, crossfit_bootstrap, refit_bootstrap

MARGIN = 0.10
C = 3


@dataclass(frozen=True)
class Case:
    name: str
    temperature: float = 1.0
    shift: float = 0.0


def true_logits(rng: np.random.Generator, n: int) -> np.ndarray:
    z = rng.normal(0.0, 1.6, size=(n, C))
    z[:, 0] += 0.8
    return z


def draw(rng: np.random.Generator, n: int, case: Case) -> tuple[np.ndarray, np.ndarray]:
    z = true_logits(rng, n)
    p = softmax(z)
    labels = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    model = case.temperature * z
    model[:, 0] += case.shift
    return model, labels


def squared_error(logits: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    p = softmax(logits)
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == labels).astype(float)
    index = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    sums = [
        np.bincount(index, w, minlength=n_bins)[None, :].astype(float)
        for w in (np.ones_like(conf), correct, conf)
    ]
    return float(debiased_squared_from_sums(*sums)[0])


def truth(case: Case, stage: str, n_bins: int, size: int) -> float:
    """The binned l2 error of the case's model (after the NLL-best temperature for stage 'after')."""
    logits, labels = draw(np.random.default_rng(12345), size, case)
    if stage != "before":
        logits = logits / fit_temperature(logits, labels).temperature
    return float(np.sqrt(max(squared_error(logits, labels, n_bins), 0.0)))


def solve(target: float, stage: str, size: int) -> Case:
    """The temperature (before) or intercept shift (after) whose 15-bin error is ``target``."""
    if stage == "before":
        t = brentq(lambda t: truth(Case("", temperature=t), stage, 15, size) - target, 1.0, 3.0, xtol=1e-3)
        return Case(f"l2 {target:.2f} (T {t:.3f})", temperature=float(t))
    d = brentq(lambda d: truth(Case("", shift=d), stage, 15, size) - target, 0.0, 3.0, xtol=1e-3)
    return Case(f"l2 {target:.2f} (shift {d:.3f})", shift=float(d))


def patients(n: int) -> np.ndarray:
    # every third patient has two studies: patient ids 0, 0, 1, 2, 2, 3, ...
    out = np.empty(n, dtype=np.int64)
    pid, i = 0, 0
    while i < n:
        take = 2 if pid % 3 == 0 else 1
        out[i : i + take] = pid
        i += take
        pid += 1
    return out


def one(
    case: Case, stage: str, n: int, n_bins: int, b: int, seed: int, old: bool
) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    spec = BootstrapSpec(n_resamples=b, seed=seed, workers=1)
    logits, labels = draw(rng, n, case)
    cl = patients(n)
    if stage == "before":
        extra = {"signed": metric_statistic("ece_debiased", n_bins=n_bins).resampled()} if old else None
        res = bootstrap_metrics(
            {"p": softmax(logits)},
            labels,
            clusters=cl,
            metrics=("ece_debiased",),
            n_bins=n_bins,
            spec=spec,
            extra=extra,
        )
        got = res.get("ece_debiased", "p")
        out = [(got.low, got.high)]
        if old:  # the previous release (recentred) and the one before it (clamped, not recentred)
            signed, d = res.replicates[1, 0], float(res.estimates[1, 0])
            for values in (signed - (signed.mean() - d), signed):  # a loop over the two earlier rules
                lo, hi = np.quantile(np.sqrt(np.maximum(values, 0.0)), [0.025, 0.975])
                out.append((float(lo), float(hi)))
        return out
    if stage == "crossfit":  # the n studies both fit (on the other folds) and evaluated, 5 folds
        folds = patients(n) % 5  # patients nest in folds
        res_cf = crossfit_bootstrap(
            logits,
            labels,
            logits,
            labels,
            fit_clusters=cl,
            eval_clusters=cl,
            fit_folds=folds,
            eval_folds=folds,
            folds=5,
            metrics=("ece_debiased",),
            n_bins=n_bins,
            spec=spec,
        )
        got = res_cf.get("ece_debiased", "after")
        return [(got.low, got.high)]
    fit_logits, fit_labels = draw(rng, n, case)
    res = refit_bootstrap(
        fit_logits,
        fit_labels,
        logits,
        labels,
        fit_clusters=cl,
        eval_clusters=cl,
        metrics=("ece_debiased",),
        n_bins=n_bins,
        spec=spec,
    )
    got = res.get("ece_debiased", "after")
    return [(got.low, got.high)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--resamples", type=int, default=None)
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--bins", type=int, nargs="+", default=[15])
    ap.add_argument(
        "--stages",
        nargs="+",
        default=["before", "after", "crossfit"],
        choices=["before", "after", "crossfit"],
    )
    ap.add_argument(
        "--cases", nargs="+", default=["calibrated", "T1.6", "T2.55", "shift", "margin", "beyond"]
    )
    ap.add_argument("--rule", choices=["new", "old"], default="new")
    args = ap.parse_args()
    reps = args.reps or (30 if args.quick else 300)
    b = args.resamples or (200 if args.quick else 1000)
    sizes = args.sizes or ([100, 300] if args.quick else [50, 100, 300, 1000])
    big = 200_000 if args.quick else 2_000_000
    print(f"R = {reps} replications a cell, B = {b} resamples, truths on {big:,} draws, margin {MARGIN}\n")
    for stage in args.stages:
        fixed = {
            "calibrated": Case("calibrated"),
            "T1.6": Case("T = 1.6", temperature=1.6),
            "T2.55": Case("T = 2.55", temperature=2.55),
            "shift": Case("shift 1.0", shift=1.0),
        }
        cases = [fixed[c] for c in args.cases if c in fixed]
        if "margin" in args.cases:
            cases.append(solve(MARGIN, stage, big))
        if "beyond" in args.cases:
            cases.append(solve(0.11, stage, big))
        title = {"before": "before calibration", "after": "after calibration, one split (refit)"}
        print(f"## {title.get(stage, 'after calibration, 5-fold cross-fitting (refit)')}\n")
        earlier = ["recentred (previous release)", "clamped (release before)"]
        rules = ["studentised (reported)"] + (earlier if args.rule == "old" and stage == "before" else [])
        print("| bins | case | true l2 | n | rule | coverage | truth above interval | PASS | FAIL |")
        print("|---:|---|---:|---:|---|---|---|---|---|")
        for n_bins in args.bins:
            for case in cases:
                t = truth(case, stage, n_bins, big)
                for n in sizes:
                    start = time.perf_counter()
                    rows = [
                        one(case, stage, n, n_bins, b, 1000 * n + r, args.rule == "old") for r in range(reps)
                    ]
                    for k, rule in enumerate(rules):
                        lo = np.array([row[k][0] for row in rows])
                        hi = np.array([row[k][1] for row in rows])
                        cover = int(np.sum((lo <= t) & (t <= hi)))
                        above = int(np.sum(hi < t))
                        passed = int(np.sum(hi < MARGIN))
                        failed = int(np.sum(lo > MARGIN))
                        rates = " | ".join(wilson_text(k, reps) for k in (cover, above, passed, failed))
                        print(f"| {n_bins} | {case.name} | {t:.4f} | {n} | {rule} | {rates} |", flush=True)
                    _ = time.perf_counter() - start
        print()


if __name__ == "__main__":
    main()
