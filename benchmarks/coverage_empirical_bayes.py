"""Coverage of the empirical-Bayes per-group temperature intervals, and of the pooled mean, with 3-8 groups.

Truth: G groups of known sizes (30-300 studies, two studies a patient). Group g has its own true
temperature, ``log T_g = mu + tau N(0, 1)`` with ``mu = log 1.5``, drawn afresh in every replication
(tau in {0, 0.1, 0.3}). A group's studies have 3 classes, logits ``z = 3 N(0, 1)`` with +2 on a random
class, and labels drawn from ``softmax(z / T_g)``, so the population NLL minimiser of the group is
exactly ``T_g`` (the temperature family holds the true model). Designs (group sizes):

- G = 3: 30, 100, 300
- G = 5: 30, 50, 100, 200, 300
- G = 8: 30, 30, 50, 80, 120, 200, 300, 300

Each replication runs ``sitecal.stats.bootstrap_group_temperatures`` (own fits, cluster-robust
variances, REML and the shrinkage repeated in each of B resamples of patients within groups;
percentile) and records, for every group, whether these 95 % intervals contain ``T_g``:

- ``sitecal``: ``GroupTemperatureIntervals.temperature(group)``, the interval the report prints;
- ``shrunk pct``: the plain percentile interval of the resampled shrunk temperatures (what sitecal
  printed before the shrinkage-bias term was added);
- ``own Wald``: ``exp(s_g +/- 1.96 sqrt(v_g))`` from the group's own fit and sandwich variance (no
  pooling), as a reference.

and, for the pooled mean ``exp(mu)`` (the centre of the distribution the groups are drawn from):
the percentile interval of ``exp(mu_b)`` over the resamples, and the random-effects interval
``sitecal.stats.random_effects_meta_analysis(s_g, v_g)`` (REML, HKSJ) from the groups' own fits.

Coverage is averaged over the draws of the true temperatures (empirical-Bayes coverage, Morris 1983):
per design, tau and group size it pools the groups of that size over R replications. Every rate
carries a 95 % Wilson interval. Target: 93-97 %.

Run:  python benchmarks/coverage_empirical_bayes.py            (R = 300, B = 250; about 7 min, one core)
      python benchmarks/coverage_empirical_bayes.py --quick    (R = 30, B = 200; smoke)
      python benchmarks/coverage_empirical_bayes.py --workers 2 (the same numbers on two processes)
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
from _wilson import wilson
from coverage_temperature import sample as temperature_sample

CLASSES = 3
MU = math.log(1.5)
TAUS = (0.0, 0.1, 0.3)
DESIGNS = {
    3: (30, 100, 300),
    5: (30, 50, 100, 200, 300),
    8: (30, 30, 50, 80, 120, 200, 300, 300),
}
Z975 = 1.959964


def cell(rate: float, n: int) -> str:
    low, high = wilson(rate * n, n)
    return f"{100 * rate:.1f} ({100 * low:.1f}-{100 * high:.1f})"


def sample(n: int, t_true: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return temperature_sample(n, t_true, rng, classes=CLASSES)


def replication(args: tuple[int, float, int, int]) -> tuple[list[list[float]], list[float]]:
    """Per group: covered by (sitecal, shrunk pct, own Wald), width of sitecal's; pooled mean: covered x2."""
    from sitecal.stats import BootstrapSpec, bootstrap_group_temperatures, random_effects_meta_analysis

    g, tau, b, seed = args
    sizes = DESIGNS[g]
    rng = np.random.default_rng(seed)
    s_true = MU + tau * rng.normal(size=g)
    parts = [sample(n, math.exp(s), rng) for n, s in zip(sizes, s_true, strict=True)]
    z = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    names = [f"g{i}" for i in range(g)]  # sorted as the result's groups
    groups = np.repeat(names, sizes)
    patients = np.array([f"{name}-{i // 2}" for name, n in zip(names, sizes, strict=True) for i in range(n)])
    spec = BootstrapSpec(n_resamples=b, seed=seed)
    res = bootstrap_group_temperatures(z, y, groups, clusters=patients, spec=spec)
    per_group = []
    own_s, own_v = [], []
    for i, name in enumerate(res.groups):
        t_true = math.exp(s_true[i])
        shown = res.temperature(name)
        pct = np.quantile(np.exp(res.log_temperature_replicates[i]), [0.025, 0.975])
        entry = res.temperatures.groups[name]
        s_own = entry.fit.log_temperature if entry.fit is not None else math.nan
        v_own = entry.variance if entry.variance is not None else math.inf
        half = Z975 * math.sqrt(v_own)
        per_group.append(
            [
                float(shown.low <= t_true <= shown.high),
                float(pct[0] <= t_true <= pct[1]),
                float(abs(s_own - s_true[i]) <= half),
                shown.high - shown.low,
            ]
        )
        if math.isfinite(v_own) and v_own > 0:
            own_s.append(s_own)
            own_v.append(v_own)
    mean_pct = np.quantile(np.exp(res.mean_replicates[np.isfinite(res.mean_replicates)]), [0.025, 0.975])
    meta = random_effects_meta_analysis(own_s, own_v)
    pooled = [
        float(mean_pct[0] <= math.exp(MU) <= mean_pct[1]),
        float(meta.low <= MU <= meta.high),
    ]
    return per_group, pooled


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--replications", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    r = args.replications or (30 if args.quick else 300)
    b = 200 if args.quick else 250
    t0 = time.perf_counter()
    group_rows, mean_rows = [], []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for g in DESIGNS:
            for tau in TAUS:
                jobs = [(g, tau, b, 1_000_003 * g + 7919 * i + int(1000 * tau)) for i in range(r)]
                reps = list(pool.map(replication, jobs, chunksize=10))
                per_group = np.array([x[0] for x in reps])  # (R, G, 4)
                pooled = np.array([x[1] for x in reps])  # (R, 2)
                sizes = np.array(DESIGNS[g])
                for n in sorted(set(DESIGNS[g])):
                    cols = per_group[:, sizes == n, :].reshape(-1, 4)
                    m = cols.shape[0]
                    rates = cols[:, :3].mean(axis=0)
                    group_rows.append(
                        f"| {g} | {tau:.1f} | {n} | {m} | "
                        + " | ".join(cell(float(x), m) for x in rates)
                        + f" | {cols[:, 3].mean():.3f} |"
                    )
                rates = pooled.mean(axis=0)
                mean_rows.append(
                    f"| {g} | {tau:.1f} | {r} | " + " | ".join(cell(float(x), r) for x in rates) + " |"
                )
    print(
        f"R = {r} replications a cell, B = {b}, {CLASSES} classes, mu = log 1.5; coverage in % (95 % Wilson)"
    )
    print()
    print("Each group's true T:")
    print()
    print("| G | tau | n of group | groups x R | sitecal | shrunk pct | own Wald | sitecal mean width |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(group_rows))
    print()
    print("The pooled mean exp(mu):")
    print()
    print("| G | tau | R | percentile of exp(mu_b) | REML + HKSJ on own fits |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(mean_rows))
    print()
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
