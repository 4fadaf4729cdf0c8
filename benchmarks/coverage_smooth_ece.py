"""Coverage of patient-cluster bootstrap intervals for the smooth ECE, and its cost against ECE.

Source (3 classes), that of ``benchmarks/coverage_ece.py``: the top-label confidence is
``c = 1/3 + (2/3) X`` with ``X ~ Beta(5, 2)`` (mean c = 0.81); the predicted class is uniform, the other
two classes get ``(1 - c) / 2`` each; the prediction is correct with probability ``f(c)``. Patients have
two studies with the same confidence (two views of one finding), each correct or not independently given
``c``, so a study's marginal law is the one above and a patient's two studies are not independent.

- calibrated: ``f(c) = c``; the residual ``c - f(c)`` is 0 everywhere, so the true smooth ECE is 0 at
  every bandwidth.
- over-confident: ``f(c) = 1/3 + 0.85 (c - 1/3)``, residual ``0.15 (c - 1/3) > 0``: nothing cancels, so
  the smoothed residual mass is its mean at any bandwidth (the reflected kernel keeps the mass in [0, 1]
  up to ``exp(-1 / (2 sigma^2))``), and the true smooth ECE is ``0.15 (E[c] - 1/3) = 0.15 (2/3)(5/7)
  = 0.071429``.

Both truths are checked on a very large sample (10^6 rows; 10^5 with --quick) from the same model: the
smooth ECE of its *expected* residuals ``c_i - f(c_i)`` (no label noise), and, beside it, the plug-in
smooth ECE of sampled labels, whose excess over the truth is the estimator's upward bias at that size.
Both through the binned form the bootstrap uses (``sitecal.metrics._smooth_weighted``; within 1e-5 of
the exact function, tests/metrics/test_smooth_weighted.py).

For each case and n (studies), R replications draw a sample and run ``sitecal.stats.bootstrap_metrics``
for ``"smooth_ece"`` with patients as clusters (B resamples, percentile, one seeded stream per
replication). Coverage is the share of nominal 95 % intervals containing the true value; its Monte-Carlo
error is ``sqrt(p (1 - p) / R)``.

Speed: the weighted smooth ECE for B = 1,000 resamples at N = 300 and 3,000 rows through the same
engine call, against the ECE's sum form, one thread.

Run:  python benchmarks/coverage_smooth_ece.py           (full: n = 100, 300, 1000; R = 300; B = 300)
      python benchmarks/coverage_smooth_ece.py --quick   (smoke: n = 100, 300; R = 20; B = 100)
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

A, B_SHAPE, C = 5.0, 2.0, 3
SLOPE = {"calibrated": 1.0, "over-confident": 0.85}
TRUTH = {"calibrated": 0.0, "over-confident": 0.15 * (2.0 / 3.0) * A / (A + B_SHAPE)}
LEVEL = 0.95


def accuracy_given_confidence(c: np.ndarray, case: str) -> np.ndarray:
    out: np.ndarray = 1.0 / 3.0 + SLOPE[case] * (c - 1.0 / 3.0)
    return out


def sample(n: int, case: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` studies (n even) of ``n / 2`` patients: probabilities, labels and patient of each study."""
    patients = n // 2
    c = np.repeat(1.0 / 3.0 + (2.0 / 3.0) * rng.beta(A, B_SHAPE, patients), 2)
    predicted = rng.integers(0, C, n)
    probs = np.repeat(((1.0 - c) / 2.0)[:, None], C, axis=1)
    probs[np.arange(n), predicted] = c
    correct = rng.random(n) < accuracy_given_confidence(c, case)
    labels = np.where(correct, predicted, (predicted + rng.integers(1, C, n)) % C)
    return probs, labels, np.repeat(np.arange(patients), 2)


def large_sample_truth(case: str, n: int, seed: int) -> tuple[float, float]:
    """Smooth ECE of the expected residuals of ``n`` draws, and the plug-in of sampled labels."""
    from sitecal.metrics import metric_statistic
    from sitecal.metrics._smooth import GRID_POINTS
    from sitecal.metrics._smooth_weighted import smooth_ece_from_binned

    rng = np.random.default_rng(seed)
    probs, labels, _ = sample(n, case, rng)
    c = probs.max(axis=1)
    residual = c - accuracy_given_confidence(c, case)
    position = c * (GRID_POINTS - 1)  # linear binning, as the weighted form does
    left = np.minimum(np.floor(position).astype(np.int64), GRID_POINTS - 2)
    share = position - left
    mass = np.bincount(left, weights=residual * (1 - share), minlength=GRID_POINTS)
    mass += np.bincount(left + 1, weights=residual * share, minlength=GRID_POINTS)
    expected = float(smooth_ece_from_binned(mass[None, :] / n)[0])
    plug_in = float(metric_statistic("smooth_ece")(probs, labels, weights=np.ones((1, n)))[0])
    return expected, plug_in


@dataclass(frozen=True)
class Task:
    case: str
    n: int
    rep: int
    n_resamples: int


def run_one(task: Task) -> tuple[float, float, float]:
    """Estimate and the percentile interval's ends of one replication."""
    from sitecal.stats import BootstrapSpec, bootstrap_metrics

    seed = np.random.SeedSequence([list(SLOPE).index(task.case), task.n, task.rep, 7])
    probs, labels, patients = sample(task.n, task.case, np.random.default_rng(seed))
    res = bootstrap_metrics(
        {"p": probs},
        labels,
        clusters=patients,
        metrics=("smooth_ece",),
        spec=BootstrapSpec(n_resamples=task.n_resamples, level=LEVEL, seed=task.rep, workers=1),
    ).get("smooth_ece", "p")
    return res.estimate, res.low, res.high


def speed(sizes: tuple[int, ...], n_resamples: int) -> list[tuple[str, int, float, float]]:
    """Seconds of B resamples of ECE (sum form) and of smooth ECE, one thread, same data and draws.

    Calibrated: residuals of both signs, the usual case (about 7 to 10 bandwidths tried per resample).
    Over-confident: residuals of one sign, where the first bracket already holds the fixed point.
    """
    from sitecal.stats import BootstrapSpec, bootstrap_metrics

    out = []
    for case, n in ((case, n) for case in SLOPE for n in sizes):
        probs, labels, patients = sample(n, case, np.random.default_rng(n))
        spec = BootstrapSpec(n_resamples=n_resamples, seed=0, workers=1)
        times = {}
        for metric in ("ece", "smooth_ece"):
            best = np.inf
            for _ in range(2):  # best of two
                start = time.perf_counter()
                bootstrap_metrics({"p": probs}, labels, clusters=patients, metrics=(metric,), spec=spec)
                best = min(best, time.perf_counter() - start)
            times[metric] = best
        out.append((case, n, times["ece"], times["smooth_ece"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: n = 100, 300; R = 20; B = 100")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=None, help="replications per cell (default 300)")
    parser.add_argument("--resamples", type=int, default=None, help="bootstrap resamples B (default 300)")
    args = parser.parse_args()
    sizes = (100, 300) if args.quick else (100, 300, 1000)
    reps, n_resamples = (20, 100) if args.quick else (300, 300)
    reps, n_resamples = args.reps or reps, args.resamples or n_resamples
    large = 10**5 if args.quick else 10**6

    start = time.perf_counter()
    print(f"True smooth ECE (analytic), checked on {large:.0e} rows of the same model:")
    for case, truth in TRUTH.items():
        expected, plug_in = large_sample_truth(case, large, seed=1)
        print(
            f"  {case}: {truth:.6f}; expected residuals {expected:.6f}; plug-in of sampled labels "
            f"{plug_in:.6f}"
        )
    tasks = [Task(case, n, rep, n_resamples) for case in SLOPE for n in sizes for rep in range(reps)]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(run_one, tasks, chunksize=4))
    by_key: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for task, result in zip(tasks, results, strict=True):
        by_key.setdefault((task.case, task.n), []).append(result)
    coverage_time = time.perf_counter() - start

    print()
    print(
        f"Nominal {100 * LEVEL:.0f} % percentile intervals, patients (two studies each) resampled; "
        f"R = {reps} replications, B = {n_resamples} resamples, 3 classes. "
        f"Monte-Carlo error of a coverage near 95 %: +/- {100 * np.sqrt(0.95 * 0.05 / reps):.1f} points "
        "(1 SE)."
    )
    print()
    print(
        "| case | n (studies) | true smooth ECE | mean estimate | mean interval | pct cover | below / above |"
    )
    print("| --- | ---: | ---: | ---: | --- | ---: | --- |")
    for (case, n), rows in by_key.items():
        r = np.array(rows)
        truth = TRUTH[case]
        cover = np.mean((r[:, 1] <= truth) & (truth <= r[:, 2]))
        below, above = np.mean(r[:, 2] < truth), np.mean(r[:, 1] > truth)
        se = np.sqrt(cover * (1 - cover) / len(r))
        cells = [
            case,
            f"{n:,}",
            f"{truth:.4f}",
            f"{r[:, 0].mean():.4f}",
            f"[{r[:, 1].mean():.4f}, {r[:, 2].mean():.4f}]",
            f"{100 * cover:.1f} % (± {100 * se:.1f})",
            f"{100 * below:.1f} % / {100 * above:.1f} %",
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    print(f"Coverage wall time: {coverage_time:.1f} s with {args.workers} worker process(es)")

    print()
    b_speed = 1000
    print(f"Speed: B = {b_speed:,} resamples through bootstrap_metrics, one thread, best of 2:")
    print("| model | N | ECE (sum form) | smooth ECE | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for case, n, t_ece, t_smooth in speed((300, 3000), b_speed):
        print(f"| {case} | {n:,} | {t_ece:.3f} s | {t_smooth:.3f} s | {t_smooth / t_ece:.0f}x |")
    print(f"Total wall time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
