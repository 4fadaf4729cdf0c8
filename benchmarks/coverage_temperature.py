"""Coverage of sitecal's bootstrap intervals for the fitted temperature, on sources of known T.

Source (5 classes): logits ``z = 3 N(0, 1)`` with +2 on a random class; labels drawn from
``softmax(z / T_true)``. The temperature family contains the true model, so the population NLL
minimiser is exactly ``T_true``. Cases: T_true = 2.0 (over-confident model) and 1.0 (calibrated).

For each case and n, R replications draw a fresh sample (own seed) and run
``sitecal.stats.bootstrap_temperature(..., clusters=None)`` (each row its own cluster, B resamples,
percentile and BCa on the same resamples). Coverage is the share of nominal 95 % intervals that
contain T_true; its Monte-Carlo standard error is ``sqrt(p (1 - p) / R)``.

Empirical-Bayes study (``--eb``): G = 5 groups of sizes 40, 100, 200, 400 and 800 studies (two a
patient), each with its own true temperature ``log T_g = log 1.5 + tau * N(0, 1)``, drawn afresh in every
replication, for tau = 0.1 and 0.3. Each replication runs
``sitecal.stats.bootstrap_group_temperatures`` (the shrinkage repeated in every resample, percentile)
and, for comparison, ``bootstrap_temperature`` on each group alone (its own, unshrunk fit). Reported by
group size: coverage of T_g by each interval, their mean widths, and the root-mean-square error of the
point estimates of log T_g (shrunk and own).

Run:  python benchmarks/coverage_temperature.py            (n = 200, 1000, 5000; R = 500; B = 400)
      python benchmarks/coverage_temperature.py --quick    (n = 200, 1000; R = 40; B = 200)
      python benchmarks/coverage_temperature.py --eb       (empirical Bayes; R = 120; B = 200)
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

CLASSES = 5


def sample(
    n: int, t_true: float, rng: np.random.Generator, classes: int = CLASSES
) -> tuple[np.ndarray, np.ndarray]:
    """Logits of ``classes`` classes (one raised at random) and labels drawn at temperature ``t_true``."""
    z = rng.normal(size=(n, classes)) * 3.0
    z[np.arange(n), rng.integers(0, classes, n)] += 2.0
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


EB_SIZES = (40, 100, 200, 400, 800)
EB_MEAN = math.log(1.5)


def eb_replication(args: tuple[float, int, int]) -> list[tuple[bool, bool, float, float, float, float]]:
    """One draw of 5 groups; per group: covered (EB, own), widths (EB, own), errors of log T (EB, own)."""
    from sitecal.stats import BootstrapSpec, bootstrap_group_temperatures, bootstrap_temperature

    tau, b, seed = args
    rng = np.random.default_rng(seed)
    s_true = EB_MEAN + tau * rng.normal(size=len(EB_SIZES))
    parts = [sample(n, math.exp(s), rng) for n, s in zip(EB_SIZES, s_true, strict=True)]
    z = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    groups = np.repeat([f"g{i}" for i in range(len(EB_SIZES))], EB_SIZES)
    patients = np.array(
        [f"{g}-{i // 2}" for g, n in zip(np.unique(groups), EB_SIZES, strict=True) for i in range(n)]
    )
    spec = BootstrapSpec(n_resamples=b, seed=seed, workers=1)
    eb = bootstrap_group_temperatures(z, y, groups, clusters=patients, spec=spec)
    out = []
    for i, name in enumerate(eb.groups):
        rows = groups == name
        shrunk = eb.temperature(name)
        own_res = bootstrap_temperature(z[rows], y[rows], clusters=patients[rows], spec=spec)
        own = own_res.temperature
        t_true = math.exp(s_true[i])
        out.append(
            (
                bool(shrunk.low <= t_true <= shrunk.high),
                bool(own.low <= t_true <= own.high),
                shrunk.high - shrunk.low,
                own.high - own.low,
                math.log(shrunk.estimate) - s_true[i],
                own_res.fit.log_temperature - s_true[i],
            )
        )
    return out


def main_eb(r: int, b: int) -> None:
    t0 = time.perf_counter()
    print(f"R = {r} replications, B = {b}, {CLASSES} classes, G = {len(EB_SIZES)} groups, nominal 95 %")
    print()
    print(
        "| tau | n of group | EB cover | own-fit cover | MC s.e. | EB mean width | own mean width "
        "| RMSE log T (EB) | RMSE log T (own) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with ProcessPoolExecutor(max_workers=2) as pool:
        for tau in (0.1, 0.3):
            jobs = [(tau, b, 7_000_003 * int(100 * tau) + 104_729 * i) for i in range(r)]
            reps = np.array(list(pool.map(eb_replication, jobs, chunksize=5)), dtype=np.float64)  # (R, G, 6)
            se = np.sqrt(0.95 * 0.05 / r)
            for j, n in enumerate(EB_SIZES):
                cover_eb, cover_own, w_eb, w_own = reps[:, j, :4].mean(axis=0)
                rmse_eb, rmse_own = np.sqrt((reps[:, j, 4:] ** 2).mean(axis=0))
                print(
                    f"| {tau:.1f} | {n:,} | {100 * cover_eb:.1f} % | {100 * cover_own:.1f} % "
                    f"| {100 * se:.1f} pts | {w_eb:.3f} | {w_own:.3f} | {rmse_eb:.3f} | {rmse_own:.3f} |",
                    flush=True,
                )
    print()
    print(f"{time.perf_counter() - t0:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--eb", action="store_true", help="the empirical-Bayes study only")
    parser.add_argument("--replications", type=int, default=120, help="R of the --eb study")
    args = parser.parse_args()
    if args.eb:
        main_eb(args.replications, 200)
        return
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
