"""Candidate intervals for "debiased ECE below a margin": power against consumer risk, on one simulation.

Why this exists: with 15 bins and a 0.10 margin, the previous release's recentred percentile interval
passed a calibrated group of 300 studies about half the time (``coverage_debiased.md``). This script
asks whether another interval for the same estimator (Kumar et al.'s debiased squared error D, 15
equal-width bins) would pass more calibrated groups *without* passing more groups beyond the margin.
Every candidate is computed on the same samples and the same bootstrap weights (numpy only, each study
its own patient):

- ``recentred``: what the previous release reported: percentile interval of ``D* - (mean(D*) - D)``.
- ``previous``: the release before it: percentile interval of ``D*`` (not recentred).
- ``normal``: ``D +/- 1.96 se``, with the analytic variance of D conditional on the bin counts,
  ``sum_b p_b^2 [4 g_b^2 s_b^2 / n_b + 2 s_b^4 / (n_b (n_b - 1))]``, the squared gaps ``g_b^2`` taken
  from D as ``max(D, 0)`` spread over the bins in proportion to their variance ``s_b^2``.
- ``bootstrap-t``: the studentised bootstrap with that standard error in every resample, pivoting on
  the plug-in squared error of the sample (the bootstrap world's true value): what sitecal now reports
  (``sitecal.stats._scale``; its engines' figures are in ``coverage_debiased.md``).

Source as in ``coverage_debiased.py``: 3 classes, true logits N(0, 1.6^2) with class 0 shifted by 0.8,
labels from softmax(z); the model's logits are T z. Cases: calibrated (T = 1), T at the margin (15-bin
l2 error 0.10) and beyond it (0.11). PASS: upper end below 0.10 (squared: 0.01); FAIL: lower end above.

Run:  python benchmarks/acceptance_candidates.py            (R = 300, B = 1000; about 10 minutes)
      python benchmarks/acceptance_candidates.py --quick    (R = 40)
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from _wilson import wilson_text

N_BINS = 15
MARGIN2 = 0.01  # 0.10 squared
CASES = {"calibrated": 1.0, "l2 0.10 (T 1.632)": 1.632, "l2 0.11 (T 1.728)": 1.728}


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return out


def draw(rng: np.random.Generator, n: int, t: float) -> tuple[np.ndarray, np.ndarray]:
    z = rng.normal(0.0, 1.6, size=(n, 3))
    z[:, 0] += 0.8
    labels = (rng.random(n)[:, None] > np.cumsum(softmax(z), axis=1)).sum(axis=1)
    return softmax(t * z), labels


def terms(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-study one-hot terms: count, correct and confidence per bin, (n, 3 * N_BINS)."""
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(float)
    index = np.clip(np.ceil(conf * N_BINS).astype(int) - 1, 0, N_BINS - 1)
    out = np.zeros((len(labels), 3 * N_BINS))
    rows = np.arange(len(labels))
    out[rows, index], out[rows, N_BINS + index], out[rows, 2 * N_BINS + index] = 1.0, correct, conf
    return out


def parts(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """D (debiased squared error), the plug-in squared error and the analytic standard error of D."""
    n, a, c = sums[:, :N_BINS], sums[:, N_BINS : 2 * N_BINS], sums[:, 2 * N_BINS :]
    total = n.sum(axis=1, keepdims=True)
    ok = n >= 2
    safe = np.where(ok, n, 2.0)
    acc = a / safe
    gap = acc - c / safe
    var = acc * (1.0 - acc) / (safe - 1.0)
    d = np.where(ok, safe * (gap * gap - var), 0.0).sum(axis=1) / total[:, 0]
    plug = np.where(n > 0, (a - c) ** 2 / np.where(n > 0, n, 1.0), 0.0).sum(axis=1) / total[:, 0]
    s2 = np.where(ok, acc * (1.0 - acc) * safe / (safe - 1.0), 0.0)
    p = np.where(ok, safe / total, 0.0)
    null = (2.0 * p * p * s2 * s2 / (safe * (safe - 1.0))).sum(axis=1)
    spread = (p * s2).sum(axis=1)
    se = np.sqrt(4.0 * np.maximum(d, 0.0) * spread / total[:, 0] + null)
    return d, plug, se


def truth(t: float) -> float:
    probs, labels = draw(np.random.default_rng(9), 2_000_000, t)
    return float(parts(terms(probs, labels).sum(axis=0)[None, :])[0][0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    reps = args.reps or (40 if args.quick else 300)
    b, sizes = 1000, (100, 300, 1000)
    rng = np.random.default_rng(2)
    names = ("recentred", "previous", "normal", "bootstrap-t")
    print(f"R = {reps} replications a cell, B = {b}, {N_BINS} bins, margin 0.10; rates with Wilson 95 %\n")
    print("| case | true l2 | n | interval | coverage | PASS | FAIL |")
    print("|---|---:|---:|---|---|---|---|")
    for case, t in CASES.items():
        true_d = truth(t)
        for n in sizes:
            counts = {k: [0, 0, 0] for k in names}
            for _ in range(reps):  # a loop over replications
                probs, labels = draw(rng, n, t)
                m = terms(probs, labels)
                weights = rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(float)
                d_rep, _, se_rep = parts(weights @ m)
                d, plug, se = (x[0] for x in parts(m.sum(axis=0)[None, :]))
                lo, hi = np.quantile(d_rep, [0.025, 0.975])
                shift = d_rep.mean() - d
                t_lo, t_hi = np.quantile((d_rep - plug) / np.maximum(se_rep, 1e-12), [0.025, 0.975])
                ends = {
                    "recentred": (lo - shift, hi - shift),
                    "previous": (lo, hi),
                    "normal": (d - 1.96 * se, d + 1.96 * se),
                    "bootstrap-t": (d - t_hi * se, d - t_lo * se),
                }
                for k, (low, high) in ends.items():  # a loop over candidates
                    counts[k][0] += int(low <= true_d <= high)
                    counts[k][1] += int(high < MARGIN2)
                    counts[k][2] += int(low > MARGIN2)
            for k in names:
                c = counts[k]
                print(
                    f"| {case} | {np.sqrt(max(true_d, 0)):.4f} | {n} | {k} | {wilson_text(c[0], reps)} | "
                    f"{wilson_text(c[1], reps)} | {wilson_text(c[2], reps)} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
