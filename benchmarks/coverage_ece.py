"""Coverage of bootstrap intervals for plug-in and debiased top-label ECE, on sources of known ECE.

Source (3 classes): the top-label confidence is ``c = 1/3 + (2/3) X`` with ``X ~ Beta(5, 2)``
(mean c = 0.81); the predicted class is uniform, the other two classes get ``(1 - c) / 2`` each; the
prediction is correct with probability ``f(c)``, otherwise the label is one of the other two.

- calibrated: ``f(c) = c``. Every binned gap ``E[c - f(c) | bin]`` is 0, so the true binned ECE (l1)
  and l2 error are exactly 0.
- over-confident: ``f(c) = 1/3 + 0.85 (c - 1/3)``, gap ``g(c) = 0.15 (c - 1/3) >= 0``.

True values with 15 equal-width bins ``(lo, hi]`` on [0, 1], by exact integration (the regularised
incomplete beta function, no sampling): ``P(b)`` and ``E[c 1{c in b}]`` per bin from the Beta(5, 2)
and Beta(6, 2) CDFs, so ``ECE_l1 = sum_b P(b) |E[g | b]|`` and ``ECE_l2 = (sum_b P(b) E[g | b]^2)^(1/2)``.
A 10^7-sample Monte-Carlo check is printed beside them (10^6 with --quick).

For each case and n, R replications draw a sample and run ``sitecal.stats.bootstrap_metrics``
(each row its own cluster, B resamples, one seeded stream per replication) for ``"ece"`` (plug-in l1)
and ``"ece_debiased"`` (Kumar et al. l2: its signed squared estimate resampled, recentred on the estimate,
then the square root clipped at 0; BCa is refused for it) on the same resamples. Coverage is the share
of nominal 95 % intervals containing the true value of what each estimator estimates (l1 for the
plug-in, l2 for the debiased; the debiased interval's coverage of the l1 truth is shown too).
Percentile intervals are the 2.5 / 97.5 % quantiles of the replicates; BCa as in sitecal.stats.

Run:  python benchmarks/coverage_ece.py            (full: n = 200, 1000, 5000; R = 1000; B = 500)
      python benchmarks/coverage_ece.py --quick    (smoke: n = 200, 1000; R = 40; B = 200)
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from scipy.stats import beta as beta_dist

A, B_SHAPE, C = 5.0, 2.0, 3
N_BINS = 15
SLOPE = {"calibrated": 1.0, "over-confident": 0.85}
METRICS = ("ece", "ece_debiased")


def accuracy_given_confidence(c: np.ndarray, case: str) -> np.ndarray:
    out: np.ndarray = 1.0 / 3.0 + SLOPE[case] * (c - 1.0 / 3.0)
    return out


def true_errors(case: str) -> tuple[float, float]:
    """Exact binned l1 and l2 top-label errors with 15 width bins (incomplete beta integrals)."""
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    x_edges = np.clip((edges - 1.0 / 3.0) * 1.5, 0.0, 1.0)  # c = 1/3 + (2/3) x
    mass = np.diff(beta_dist.cdf(x_edges, A, B_SHAPE))
    mean_x_part = A / (A + B_SHAPE) * np.diff(beta_dist.cdf(x_edges, A + 1.0, B_SHAPE))  # E[x 1{bin}]
    occupied = mass > 0
    mean_c = 1.0 / 3.0 + (2.0 / 3.0) * mean_x_part[occupied] / mass[occupied]
    gap = mean_c - accuracy_given_confidence(mean_c, case)  # g is affine, so E[g | b] = g(E[c | b])
    w = mass[occupied]
    return float(np.sum(w * np.abs(gap))), float(np.sqrt(np.sum(w * gap**2)))


def sample(n: int, case: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    c = 1.0 / 3.0 + (2.0 / 3.0) * rng.beta(A, B_SHAPE, n)
    predicted = rng.integers(0, C, n)
    probs = np.repeat(((1.0 - c) / 2.0)[:, None], C, axis=1)
    probs[np.arange(n), predicted] = c
    correct = rng.random(n) < accuracy_given_confidence(c, case)
    other = (predicted + rng.integers(1, C, n)) % C
    labels = np.where(correct, predicted, other)
    return probs, labels


def monte_carlo_errors(case: str, n: int, seed: int) -> tuple[float, float]:
    """Binned l1 / l2 from a huge sample using the known f(c) (no label noise): a check of the integral."""
    rng = np.random.default_rng(seed)
    c = 1.0 / 3.0 + (2.0 / 3.0) * rng.beta(A, B_SHAPE, n)
    g = c - accuracy_given_confidence(c, case)
    idx = np.clip(np.searchsorted(np.linspace(0, 1, N_BINS + 1), c, side="left") - 1, 0, N_BINS - 1)
    count = np.bincount(idx, minlength=N_BINS)
    mean_gap = np.bincount(idx, weights=g, minlength=N_BINS) / np.maximum(count, 1)
    w = count / n
    return float(np.sum(w * np.abs(mean_gap))), float(np.sqrt(np.sum(w * mean_gap**2)))


@dataclass(frozen=True)
class Task:
    case: str
    n: int
    rep: int
    n_resamples: int


def run_one(task: Task) -> np.ndarray:
    """Estimates and interval ends of one replication: shape (2 metrics, 5) = est, pct lo/hi, bca lo/hi."""
    from sitecal.stats import BootstrapSpec, bootstrap_metrics

    seed = np.random.SeedSequence([list(SLOPE).index(task.case), task.n, task.rep])
    probs, labels = sample(task.n, task.case, np.random.default_rng(seed))

    def run(metrics: tuple[str, ...], method: str) -> object:
        return bootstrap_metrics(
            {"p": probs},
            labels,
            clusters=None,
            metrics=metrics,
            n_bins=N_BINS,
            spec=BootstrapSpec(n_resamples=task.n_resamples, method=method, seed=task.rep),
        )

    pct = run(METRICS, "percentile")  # the debiased ECE's interval is its recentred one (sitecal.stats)
    bca = run(("ece",), "bca")  # BCa is refused for the debiased ECE: its ends stay NaN here
    out = np.full((len(METRICS), 5), np.nan)
    for i, metric in enumerate(METRICS):
        p = pct.get(metric, "p")  # type: ignore[attr-defined]
        out[i, :3] = [p.estimate, p.low, p.high]
        if metric == "ece":
            b = bca.get(metric, "p")  # type: ignore[attr-defined]
            out[i, 3:] = [b.low, b.high]
    return out


def covered(low: np.ndarray, high: np.ndarray, truth: float) -> float:
    # a NaN interval (BCa undefined) counts as not covering
    return float(np.mean((low <= truth) & (truth <= high)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: n = 200, 1000; R = 40; B = 200")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=None, help="replications per cell (default 1000)")
    parser.add_argument("--resamples", type=int, default=None, help="bootstrap resamples B (default 500)")
    args = parser.parse_args()
    sizes = (200, 1000) if args.quick else (200, 1000, 5000)
    reps, n_resamples = (40, 200) if args.quick else (1000, 500)
    reps, n_resamples = args.reps or reps, args.resamples or n_resamples
    mc_n = 10**6 if args.quick else 10**7

    start = time.perf_counter()
    truths = {case: true_errors(case) for case in SLOPE}
    print(
        f"True binned top-label errors, {N_BINS} width bins (exact integral; Monte-Carlo {mc_n:.0e} check):"
    )
    for case, (l1, l2) in truths.items():
        mc1, mc2 = monte_carlo_errors(case, mc_n, seed=1)
        print(f"  {case}: ECE_l1 = {l1:.5f} (MC {mc1:.5f}), ECE_l2 = {l2:.5f} (MC {mc2:.5f})")
    tasks = [Task(case, n, rep, n_resamples) for case in SLOPE for n in sizes for rep in range(reps)]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(run_one, tasks, chunksize=8))
    by_key: dict[tuple[str, int], list[np.ndarray]] = {}
    for task, result in zip(tasks, results, strict=True):
        by_key.setdefault((task.case, task.n), []).append(result)

    print()
    print(
        f"Nominal 95 % bootstrap intervals, each row its own cluster; R = {reps} replications, "
        f"B = {n_resamples} resamples, {N_BINS} width bins, 3 classes."
    )
    print()
    print(
        "| case | n | true ECE (l1) | true l2 | plug-in ECE: mean | plug-in: pct cover | plug-in: BCa cover "
        "| debiased: mean | debiased: pct cover (l2) | debiased: BCa cover (l2) | debiased: pct cover (l1) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (case, n), rows in by_key.items():
        r = np.stack(rows)  # (R, metric, 5)
        l1, l2 = truths[case]
        plug, deb = r[:, 0], r[:, 1]
        cells = [
            case,
            f"{n:,}",
            f"{l1:.4f}",
            f"{l2:.4f}",
            f"{plug[:, 0].mean():.4f}",
            f"{100 * covered(plug[:, 1], plug[:, 2], l1):.0f} %",
            f"{100 * covered(plug[:, 3], plug[:, 4], l1):.0f} %",
            f"{deb[:, 0].mean():.4f}",
            f"{100 * covered(deb[:, 1], deb[:, 2], l2):.0f} %",
            "refused",
            f"{100 * covered(deb[:, 1], deb[:, 2], l1):.0f} %",
        ]
        print("| " + " | ".join(cells) + " |")
    nan_bca = sum(int(np.isnan(np.stack(rows)[:, 0, 3]).sum()) for rows in by_key.values())
    print()
    print(f"Plug-in ECE BCa intervals undefined (NaN, counted as not covering): {nan_bca} of {len(tasks)}")
    print(f"Wall time: {time.perf_counter() - start:.1f} s with {args.workers} worker process(es)")


if __name__ == "__main__":
    main()
