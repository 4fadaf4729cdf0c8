"""Coverage of the random-effects site meta-analysis with 3-6 sites: pooled-mean and prediction intervals.

Truth (the normal-normal random-effects model the method assumes): each of k sites has a true
effect ``theta_i ~ N(mu, tau^2)`` (mu = 0; e.g. log O:E) and reports ``y_i ~ N(theta_i, v_i)`` with a
known sampling variance ``v_i``. Variance patterns:

- ``equal``: every ``v_i = 0.01`` (a log O:E of a site with about 100 events);
- ``unequal``: ``v_i`` evenly spaced on the log scale from 0.002 to 0.04 (a 20-fold range of site
  sizes, as between a university hospital and a small clinic).

``tau^2`` in {0, 0.0025, 0.01, 0.04}: none, small (tau = 0.05: I^2 about 20 % for equal variances),
moderate (I^2 about 50 %) and large (I^2 about 80 %).

Each replication runs ``sitecal.stats.random_effects_meta_analysis(y, v)`` (the default: REML tau^2,
HKSJ interval) and records whether its 95 % interval for the pooled mean contains ``mu`` and the
probability that its 95 % prediction interval contains a new site's true effect
``theta_new ~ N(mu, tau^2)``, ``Phi((high - mu) / tau) - Phi((low - mu) / tau)`` (exact given the
interval; an indicator of ``mu`` inside when tau = 0), averaged over replications. For comparison the
same replication computes, from the same REML (or DL) estimate:

- ``HKSJ plain``: the Hartung-Knapp-Sidik-Jonkman interval without the ``max(1, q)`` modification;
- ``HKSJ max(1,q)``: with it (Knapp & Hartung 2003; Jackson, Law, Rücker & Schwarzer 2017);
- ``DL Wald``: DerSimonian-Laird tau^2 with the normal interval (``method="dl"``);
- prediction intervals ``mu-hat +/- t_{k-2} sqrt(tau^2-hat + SE^2)`` with SE the Wald SE of REML
  (Higgins, Thompson & Spiegelhalter 2009), the plain HKSJ SE, or the modified HKSJ SE.

Coverage rates carry a 95 % Wilson interval (for the prediction interval, whose per-replication
value is a probability, the Wilson interval of the same number of Bernoulli trials: conservative, as
averaging probabilities has less Monte Carlo error than counting hits). Target: 93-97 %.

Run:  python benchmarks/coverage_meta_analysis.py            (R = 4000 a cell; about 2-3 min, one core)
      python benchmarks/coverage_meta_analysis.py --quick    (R = 300 a cell; smoke)
"""

from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _wilson import wilson
from scipy.special import ndtr
from scipy.stats import t as student_t

MU = 0.0
LEVEL = 0.95
KS = (3, 4, 5, 6)
TAU2S = (0.0, 0.0025, 0.01, 0.04)
PATTERNS = ("equal", "unequal")


def variances(pattern: str, k: int) -> np.ndarray:
    if pattern == "equal":
        return np.full(k, 0.01)
    return np.exp(np.linspace(math.log(0.002), math.log(0.04), k))


def cell(rate: float, n: int) -> str:
    low, high = wilson(rate * n, n)
    return f"{100 * rate:.1f} ({100 * low:.1f}-{100 * high:.1f})"


def covered_mean(low: float, high: float) -> float:
    return float(low <= MU <= high)


def covered_new(low: float, high: float, tau2: float) -> float:
    """P(theta_new in [low, high]) for theta_new ~ N(mu, tau2): exact given the interval."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return math.nan
    if tau2 == 0.0:
        return covered_mean(low, high)
    tau = math.sqrt(tau2)
    return float(ndtr((high - MU) / tau) - ndtr((low - MU) / tau))


def replication(y: np.ndarray, v: np.ndarray, tau2_true: float) -> list[float]:
    """tau^2-hat, then the coverage of each interval (mean intervals, then prediction intervals)."""
    from sitecal.stats import random_effects_meta_analysis

    k = y.shape[0]
    res = random_effects_meta_analysis(y, v, level=LEVEL)
    dl = random_effects_meta_analysis(y, v, level=LEVEL, method="dl")
    w = 1.0 / (v + res.tau2)
    est = float(np.sum(w * y) / w.sum())
    q_hk = float(np.sum(w * (y - est) ** 2)) / (k - 1)  # the HKSJ scale factor
    se_wald = math.sqrt(1.0 / float(w.sum()))
    se_plain = se_wald * math.sqrt(q_hk)
    se_mod = se_wald * math.sqrt(max(1.0, q_hk))
    t1 = float(student_t.ppf((1 + LEVEL) / 2, k - 1))
    t2 = float(student_t.ppf((1 + LEVEL) / 2, k - 2))
    out = [
        res.tau2,
        covered_mean(res.low, res.high),
        covered_mean(est - t1 * se_plain, est + t1 * se_plain),
        covered_mean(est - t1 * se_mod, est + t1 * se_mod),
        covered_mean(dl.low, dl.high),
        covered_new(res.prediction_low, res.prediction_high, tau2_true),
    ]
    for se in (se_wald, se_plain, se_mod):
        half = t2 * math.sqrt(res.tau2 + se * se)
        out.append(covered_new(est - half, est + half, tau2_true))
    return out


COLUMNS_MEAN = ("sitecal CI", "HKSJ plain", "HKSJ max(1,q)", "DL Wald")
COLUMNS_PRED = ("sitecal PI", "PI Wald SE", "PI HKSJ plain", "PI HKSJ max(1,q)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--replications", type=int, default=None)
    args = parser.parse_args()
    r = args.replications or (300 if args.quick else 4000)
    t0 = time.perf_counter()
    print(f"R = {r} replications a cell, mu = {MU}, nominal {100 * LEVEL:.0f} %; coverage in % (95 % Wilson)")
    print()
    head = ("variances", "tau^2", "k", "mean tau^2-hat", *COLUMNS_MEAN, *COLUMNS_PRED)
    print("| " + " | ".join(head) + " |")
    print("| " + " | ".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + " |")
    for pattern in PATTERNS:
        for tau2 in TAU2S:
            for k in KS:
                rng = np.random.default_rng([k, int(1e6 * tau2), PATTERNS.index(pattern)])
                v = variances(pattern, k)
                rows = []
                for _ in range(r):  # a loop over replications
                    theta = MU + math.sqrt(tau2) * rng.normal(size=k)
                    y = theta + np.sqrt(v) * rng.normal(size=k)
                    rows.append(replication(y, v, tau2))
                means = np.nanmean(np.array(rows), axis=0)
                cells = [cell(float(c), r) for c in means[1:]]
                print(
                    f"| {pattern} | {tau2:g} | {k} | {means[0]:.4f} | " + " | ".join(cells) + " |",
                    flush=True,
                )
    print()
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
