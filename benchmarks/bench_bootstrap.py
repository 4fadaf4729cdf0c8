"""Bootstrap interval of top-label ECE: sitecal against the routes a user would otherwise take.

Data: N rows, 10 classes, an over-confident model (probabilities ``softmax(z)`` while labels follow
``softmax(z / 2)``); ECE with 15 equal-width bins; B resamples of rows (each row its own cluster);
95 % percentile intervals. Every route runs in its own subprocess, which reports its wall time and
its peak resident memory above what the process held before the route started ("+ memory").

Routes:

- ``scipy``: ``scipy.stats.bootstrap((confidence, correct), ece, paired=True, vectorized=True,
  method="percentile")`` with a numpy ECE vectorised over resamples by one ``np.bincount`` (a
  strong baseline); ``scipy-per-bin``: the same with the textbook numpy ECE, a loop over bins with
  boolean masks (what most scripts contain).
- ``netcal`` / ``torchmetrics``: a Python loop over resamples of rows calling netcal's
  ``ECE(bins=15).measure`` / torchmetrics' ``multiclass_calibration_error``; timed on the first
  ``--loop`` resamples and scaled to B (the table says so).
- ``floor``: the raw floor of row resampling, written here: draw B x N row indices a chunk at a time,
  gather each drawn row's bin and (correct - confidence), one weighted ``np.bincount`` over
  (resample, bin) per chunk, then the ECE per resample. One thread; chunks of 2^21 elements.
- ``sitecal-1`` / ``sitecal-2``: ``sitecal.stats.bootstrap_metrics(..., metrics=("ece",))`` with
  ``BootstrapSpec(workers=1)`` and ``workers=2``.

Every route's interval is printed beside its time, so they can be seen to estimate the same thing.
Targets (issue 7): sitecal-1 within 1.25x of the floor; sitecal-2 at least 30x faster than scipy;
peak memory below 2 GB at N = 10^6, B = 2,000.

Run:  python benchmarks/bench_bootstrap.py             (N = 100,000, B = 2,000; then the scaling table)
      python benchmarks/bench_bootstrap.py --quick     (N = 20,000, B = 500, small scaling table)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

N_BINS = 15
CLASSES = 10
CHUNK_ELEMENTS = 1 << 21  # elements per chunk, as sitecal's automatic chunk size


def make_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, CLASSES)) * 2.5
    z[np.arange(n), rng.integers(0, CLASSES, n)] += 3.0
    e = np.exp(z - z.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    e2 = np.exp(z / 2.0 - (z / 2.0).max(axis=1, keepdims=True))
    truth = e2 / e2.sum(axis=1, keepdims=True)
    labels = (truth.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return probs, labels


def bins_of(confidence: np.ndarray) -> np.ndarray:
    """Bin of each confidence with sitecal's (lo, hi] equal-width edges."""
    return np.clip(np.ceil(confidence * N_BINS).astype(np.int64) - 1, 0, N_BINS - 1)


def numpy_ece(confidence: np.ndarray, correct: np.ndarray, axis: int = -1) -> np.ndarray:
    """Vectorised top-label ECE over the last axis (the statistic handed to scipy)."""
    conf = np.moveaxis(confidence, axis, -1)
    corr = np.moveaxis(correct, axis, -1)
    n = conf.shape[-1]
    b = bins_of(conf)
    flat_b = b.reshape(-1, n) + N_BINS * np.arange(b.size // n)[:, None]
    gaps = np.bincount(flat_b.ravel(), (corr - conf).ravel(), minlength=flat_b.shape[0] * N_BINS)
    out: np.ndarray = np.abs(gaps.reshape(-1, N_BINS)).sum(axis=1).reshape(conf.shape[:-1]) / n
    return out


def numpy_ece_per_bin(confidence: np.ndarray, correct: np.ndarray, axis: int = -1) -> np.ndarray:
    """The textbook numpy ECE: a loop over bins with boolean masks (vectorised over resamples)."""
    conf = np.moveaxis(confidence, axis, -1)
    corr = np.moveaxis(correct, axis, -1)
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    total = np.zeros(conf.shape[:-1])
    for lo, hi in itertools.pairwise(edges):  # a loop over bins
        in_bin = (conf > lo) & (conf <= hi)
        if lo == 0.0:
            in_bin |= conf == 0.0
        total += np.abs(np.where(in_bin, corr - conf, 0.0).sum(axis=-1))
    out: np.ndarray = total / conf.shape[-1]
    return out


def percentile_interval(replicates: np.ndarray) -> tuple[float, float]:
    low, high = np.quantile(replicates, [0.025, 0.975])
    return float(low), float(high)


def _route_scipy(statistic):  # type: ignore[no-untyped-def]
    def route(probs: np.ndarray, labels: np.ndarray, b: int, loop: int) -> tuple[float, float, str]:
        return _scipy(statistic, probs, labels, b)

    return route


def _scipy(statistic, probs: np.ndarray, labels: np.ndarray, b: int) -> tuple[float, float, str]:  # type: ignore[no-untyped-def]
    from scipy.stats import bootstrap

    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    res = bootstrap(
        (confidence, correct),
        statistic,
        paired=True,
        vectorized=True,
        n_resamples=b,
        method="percentile",
        random_state=np.random.default_rng(1),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high), ""


def _loop(measure, probs: np.ndarray, labels: np.ndarray, b: int, loop: int) -> tuple[float, float, str]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    n = labels.shape[0]
    reps = np.array(
        [measure(probs[idx], labels[idx]) for idx in (rng.integers(0, n, n) for _ in range(loop))]
    )
    low, high = percentile_interval(reps)
    return low, high, f"{loop} of {b} resamples timed, x {b / loop:g}"


def route_netcal(probs: np.ndarray, labels: np.ndarray, b: int, loop: int) -> tuple[float, float, str]:
    from netcal.metrics import ECE

    ece = ECE(bins=N_BINS)
    return _loop(lambda p, y: ece.measure(p, y), probs, labels, b, loop)


def route_torchmetrics(probs: np.ndarray, labels: np.ndarray, b: int, loop: int) -> tuple[float, float, str]:
    import torch
    from torchmetrics.functional.classification import multiclass_calibration_error

    torch.set_num_threads(1)

    def measure(p: np.ndarray, y: np.ndarray) -> float:
        tensor = multiclass_calibration_error(
            torch.from_numpy(p), torch.from_numpy(y), CLASSES, n_bins=N_BINS
        )
        return float(tensor)

    return _loop(measure, probs, labels, b, loop)


def route_floor(probs: np.ndarray, labels: np.ndarray, b: int, loop: int) -> tuple[float, float, str]:
    confidence = probs.max(axis=1)
    gap = (probs.argmax(axis=1) == labels) - confidence
    bins = bins_of(confidence)
    n = labels.shape[0]
    chunk = max(1, CHUNK_ELEMENTS // n)
    rng = np.random.default_rng(1)
    reps = np.empty(b)
    for start in range(0, b, chunk):  # a loop over chunks of resamples
        m = min(chunk, b - start)
        rows = rng.integers(0, n, size=(m, n))
        keys = bins[rows]
        keys += (N_BINS * np.arange(m))[:, None]
        sums = np.bincount(keys.ravel(), gap[rows].ravel(), minlength=m * N_BINS)
        reps[start : start + m] = np.abs(sums.reshape(m, N_BINS)).sum(axis=1) / n
    low, high = percentile_interval(reps)
    return low, high, ""


def _route_sitecal(workers: int):  # type: ignore[no-untyped-def]
    def route(probs: np.ndarray, labels: np.ndarray, b: int, loop: int) -> tuple[float, float, str]:
        from sitecal.stats import BootstrapSpec, bootstrap_metrics

        spec = BootstrapSpec(n_resamples=b, seed=1, workers=workers)
        res = bootstrap_metrics({"model": probs}, labels, clusters=None, metrics=("ece",), spec=spec)
        r = res.get("ece", "model")
        return r.low, r.high, ""

    return route


ROUTES = {
    "scipy": _route_scipy(numpy_ece),
    "scipy-per-bin": _route_scipy(numpy_ece_per_bin),
    "netcal": route_netcal,
    "torchmetrics": route_torchmetrics,
    "floor": route_floor,
    "sitecal-1": _route_sitecal(1),
    "sitecal-2": _route_sitecal(2),
}


def run_route(route: str, n: int, b: int, loop: int) -> None:
    """In a subprocess: build the data, run one route, print a JSON line."""
    probs, labels = make_data(n)
    import scipy.stats  # noqa: F401  (imports before the baseline memory reading)

    import sitecal.stats  # noqa: F401

    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    low, high, note = ROUTES[route](probs, labels, b, loop)
    seconds = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if note:  # a timed subset of the loop: scale to B resamples
        seconds *= b / loop
    print(
        json.dumps(
            {
                "seconds": seconds,
                "low": low,
                "high": high,
                "note": note,
                "extra_mib": (peak_kib - before_kib) / 1024,
                "peak_mib": peak_kib / 1024,
            }
        )
    )


def measure(route: str, n: int, b: int, loop: int) -> dict[str, float | str]:
    out = subprocess.run(
        [sys.executable, __file__, "--route", route, "--n", str(n), "--b", str(b), "--loop", str(loop)],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(f"route {route} (N = {n}, B = {b}) failed:\n{out.stderr}")
    result: dict[str, float | str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--b", type=int, default=2_000)
    parser.add_argument("--loop", type=int, default=200, help="resamples timed in the loop baselines")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--route", choices=sorted(ROUTES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.route:
        run_route(args.route, args.n, args.b, args.loop)
        return
    if args.quick:
        args.n, args.b, args.loop = 20_000, 500, 50
    print(
        f"ECE interval, N = {args.n:,} rows, {CLASSES} classes, B = {args.b:,}, 95 % percentile; "
        f"{os.cpu_count()} cores"
    )
    print()
    results = {}
    for route in ROUTES:  # each in a fresh subprocess
        results[route] = measure(route, args.n, args.b, args.loop)
        print(f"  {route}: {results[route]['seconds']:.2f} s", file=sys.stderr)
    floor = float(results["floor"]["seconds"])
    scipy_s = float(results["scipy"]["seconds"])
    print("| route | time | vs floor | sitecal-2 faster by | + memory | 95 % interval of ECE |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    ours = float(results["sitecal-2"]["seconds"])
    for route, r in results.items():
        s = float(r["seconds"])
        note = f" ({r['note']})" if r["note"] else ""
        print(
            f"| {route}{note} | {s:.2f} s | {s / floor:.2f}x | {s / ours:.1f}x | "
            f"{float(r['extra_mib']):.0f} MiB | [{float(r['low']):.4f}, {float(r['high']):.4f}] |"
        )
    print()
    print(
        f"sitecal, one thread, against the floor: {float(results['sitecal-1']['seconds']) / floor:.2f}x "
        "(target <= 1.25x)"
    )
    per_bin_s = float(results["scipy-per-bin"]["seconds"])
    print(
        f"sitecal, two threads, against scipy.stats.bootstrap: {scipy_s / ours:.1f}x faster with the "
        "bincount "
        f"ECE, {per_bin_s / ours:.1f}x with the per-bin ECE (target >= 30x)"
    )

    print()
    print("Scaling of sitecal (two threads): time and peak resident memory of the whole process")
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    resamples = (200, 500) if args.quick else (500, 2_000)
    print("| N | B | time | time per resample x row | peak memory | + memory |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        for b in resamples:
            r = measure("sitecal-2", n, b, args.loop)
            s = float(r["seconds"])
            print(
                f"| {n:,} | {b:,} | {s:.2f} s | {s / (n * b) * 1e9:.1f} ns | "
                f"{float(r['peak_mib']):.0f} MiB | {float(r['extra_mib']):.0f} MiB |"
            )


if __name__ == "__main__":
    main()
