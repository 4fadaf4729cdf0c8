"""Refit bootstrap of the temperature: sitecal's batched solve against per-resample fit loops.

Data: an over-confident 10-class set (N rows, default 100,000) whose labels are drawn from
``softmax(z / T_true)`` with T_true = 8, so the optimal temperature is far from the usual start.
Every row is its own cluster. Resample ``b`` is sitecal's own draw (``fit_stream_seed(seed)``), so
all three routes fit exactly the same B resamples of rows.

Routes, all fitting ``T_b`` on resample ``b``'s rows (row ``i`` repeated ``w_bi`` times):

- seed LBFGS loop: the seed code's recipe per resample (``T = 1.5``,
  ``torch.optim.LBFGS([T], lr=0.01, max_iter=50)``, one ``step``, float32 logits as a model gives them).
- converged loop: ``sitecal.calibration.fit_temperature`` per resample (Newton on log T to 1e-10).
- sitecal: ``sitecal.stats.bootstrap_temperature`` (one batched solve of all B resamples).

The loops are timed on the first ``--loop`` resamples (default 25) and their time per resample is
multiplied by B; the table says so. The batched solve runs all B. Accuracy: each looped resample's
``T_b`` against sitecal's, relative; the LBFGS loop's NLL left above the optimum.

Run:  python benchmarks/bench_refit.py                 (N = 100,000, B = 1,000, 25 looped resamples)
      python benchmarks/bench_refit.py --quick         (N = 20,000, B = 200, 5 looped resamples)
"""

from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch

from sitecal.calibration import fit_temperature
from sitecal.metrics import negative_log_likelihood, softmax
from sitecal.stats import BootstrapSpec, bootstrap_temperature, fit_stream_seed
from sitecal.stats._resample import make_plan, weight_chunks

T_TRUE = 8.0
CLASSES = 10


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, CLASSES)) * 4.0
    z[np.arange(n), rng.integers(0, CLASSES, n)] += 12.0
    p = softmax(z, temperature=T_TRUE)
    y = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return z, y


def seed_lbfgs(z: np.ndarray, y: np.ndarray) -> float:
    """The seed code's ModelWithTemperature.set_temperature fit, verbatim in its choices."""
    logits = torch.from_numpy(z.astype(np.float32))
    labels = torch.from_numpy(y)
    temperature = torch.nn.Parameter(torch.ones(1) * 1.5)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = criterion(logits / temperature, labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(temperature.item())


def resample_rows(n: int, seed: int, b: int) -> np.ndarray:
    """Row multiplicities (b, n) of sitecal's first b fit-split resamples."""
    plan = make_plan(n, None, None, func="bench_refit")
    (w,) = list(weight_chunks(plan, seed=fit_stream_seed(seed), n_resamples=b, chunk_size=b))
    return w[:, plan.cluster_of_row].astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--b", type=int, default=1_000)
    parser.add_argument("--loop", type=int, default=25, help="resamples timed in each loop baseline")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.n, args.b, args.loop = 20_000, 200, 5
    torch.set_num_threads(1)
    seed = 0
    z, y = make_data(args.n, seed=1)
    full = fit_temperature(z, y)
    print(
        f"N = {args.n:,}, {CLASSES} classes, B = {args.b:,}; full-data T = {full.temperature:.4f} "
        f"({full.iterations} Newton steps); one thread"
    )

    t0 = time.perf_counter()
    res = bootstrap_temperature(z, y, clusters=None, spec=BootstrapSpec(n_resamples=args.b, seed=seed))
    t_batched = time.perf_counter() - t0
    t_rep = np.exp(res.log_temperature_replicates)

    rows = resample_rows(args.n, seed, args.loop)
    newton_t, lbfgs_t, lbfgs_gap = [], [], []
    t_newton = t_lbfgs = 0.0
    for b in range(args.loop):  # the baselines: one fit per resample
        idx = np.repeat(np.arange(args.n), rows[b])
        zb, yb = z[idx], y[idx]
        t0 = time.perf_counter()
        fit = fit_temperature(zb, yb)
        t_newton += time.perf_counter() - t0
        newton_t.append(fit.temperature)
        t0 = time.perf_counter()
        t_seed = seed_lbfgs(zb, yb)
        t_lbfgs += time.perf_counter() - t0
        lbfgs_t.append(t_seed)
        lbfgs_gap.append(
            negative_log_likelihood(softmax(zb, temperature=t_seed), yb)
            - negative_log_likelihood(softmax(zb, temperature=fit.temperature), yb)
        )
    scale = args.b / args.loop
    newton_rel = np.abs(t_rep[: args.loop] / np.array(newton_t) - 1.0)
    lbfgs_rel = np.abs(t_rep[: args.loop] / np.array(lbfgs_t) - 1.0)

    print()
    print(f"| route (B = {args.b:,}) | time | ratio to sitecal | T_b vs sitecal's (max rel. diff.) |")
    print("| --- | ---: | ---: | ---: |")
    print(
        f"| seed LBFGS loop ({args.loop} timed, x {scale:g}) | {t_lbfgs * scale:.1f} s | "
        f"{t_lbfgs * scale / t_batched:.0f}x | {lbfgs_rel.max():.3f} |"
    )
    print(
        f"| loop of converged fits ({args.loop} timed, x {scale:g}) | {t_newton * scale:.1f} s | "
        f"{t_newton * scale / t_batched:.0f}x | {newton_rel.max():.1e} |"
    )
    print(f"| sitecal batched solve | {t_batched:.2f} s | 1x | - |")
    print()
    print(
        f"seed LBFGS: mean T_b = {np.mean(lbfgs_t):.3f} vs optimum {np.mean(newton_t):.3f}; "
        f"NLL left above the optimum: mean {np.mean(lbfgs_gap):.3f} nats"
    )
    print(
        f"sitecal: {res.n_exact} of {args.b} resamples sent to the exact solver, {res.n_at_bound} on a "
        f"bound; largest certified |log T_b - log T_b*| = {res.max_error_bound:.1e}"
    )
    interval = res.temperature
    print(f"95 % percentile interval of T: [{interval.low:.4f}, {interval.high:.4f}]")
    if not math.isfinite(t_batched):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
