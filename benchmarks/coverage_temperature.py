"""Coverage of sitecal's bootstrap intervals for the fitted temperature, on sources of known T.

Source (5 classes): logits ``z = 3 N(0, 1)`` with +2 on a random class; labels drawn from
``softmax(z / T_true)``. The temperature family contains the true model, so the population NLL
minimiser is exactly ``T_true``. Cases: T_true = 2.0 (over-confident model) and 1.0 (calibrated).

For each case and n, R replications draw a fresh sample (own seed) and run
``sitecal.stats.bootstrap_temperature(..., clusters=None)`` (each row its own cluster, B resamples,
percentile and BCa on the same resamples). Coverage is the share of nominal 95 % intervals that
contain T_true; its Monte-Carlo standard error is ``sqrt(p (1 - p) / R)``.

Run:  python benchmarks/coverage_temperature.py            (n = 200, 1000, 5000; R = 500; B = 400)
      python benchmarks/coverage_temperature.py --quick    (n = 200, 1000; R = 40; B = 200)
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

CLASSES = 5


def sample(n: int, t_true: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    z = rng.normal(size=(n, CLASSES)) * 3.0
    z[np.arange(n), rng.integers(0, CLASSES, n)] += 2.0
    e = np.exp(z / t_true - (z / t_true).max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    y = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return z, y


def replication(args: tuple[float, int, int, int]) -> tuple[float, bool, bool, float, float]:
    from sitecal.stats import BootstrapSpec, bootstrap_temperature

    t_true, n, b, seed = args
    z, y = sample(n, t_true, np.random.default_rng(seed))
    out = []
    for method in ("percentile", "bca"):
        res = bootstrap_temperature(
            z, y, clusters=None, spec=BootstrapSpec(n_resamples=b, seed=seed, method=method, workers=1)
        ).temperature
        out.append(res)
    pct, bca = out
    return (
        pct.estimate,
        bool(pct.low <= t_true <= pct.high),
        bool(bca.low <= t_true <= bca.high),
        pct.high - pct.low,
        bca.high - bca.low,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes, r, b = ((200, 1000), 40, 200) if args.quick else ((200, 1000, 5000), 500, 400)
    t0 = time.perf_counter()
    print(f"R = {r} replications, B = {b}, {CLASSES} classes, nominal 95 %")
    print()
    print(
        "| T_true | n | mean T-hat | percentile cover | BCa cover | MC s.e. | mean width (pct) "
        "| mean width (BCa) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with ProcessPoolExecutor(max_workers=2) as pool:
        for t_true in (2.0, 1.0):
            for n in sizes:
                jobs = [(t_true, n, b, 1_000_003 * n + 7919 * i + int(10 * t_true)) for i in range(r)]
                rows = list(pool.map(replication, jobs, chunksize=10))
                est = np.array([x[0] for x in rows])
                pct, bca = np.mean([x[1] for x in rows]), np.mean([x[2] for x in rows])
                se = np.sqrt(0.95 * 0.05 / r)
                widths = np.mean([x[3] for x in rows]), np.mean([x[4] for x in rows])
                print(
                    f"| {t_true:.1f} | {n:,} | {est.mean():.3f} | {100 * pct:.1f} % | {100 * bca:.1f} % | "
                    f"{100 * se:.1f} pts | {widths[0]:.3f} | {widths[1]:.3f} |",
                    flush=True,
                )
    print()
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
