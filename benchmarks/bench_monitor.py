"""Time ``sitecal monitor`` on twelve months of 10^5 studies each (the issue's target: within 5 minutes on 2
cores), then again on the same data (every window is in the history: nothing is computed again).

A baseline is made first with ``sitecal run`` on a vendor predictions file (3,000 calibrated studies, six
scanners, patient split, 1,000 bootstrap resamples); then a monitoring file of ``--months`` months of
``--per-month`` studies, one scanner over-confident from month seven. Prints each stage's wall time and
the peak memory of the monitor's process, and writes nothing outside ``--workdir``.

    python benchmarks/bench_monitor.py                 # 12 x 100,000 studies
    python benchmarks/bench_monitor.py --per-month 10000
"""

from __future__ import annotations

import argparse
import csv
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the monitoring tests' vendor protocol
from tests.monitor.vendor import CALIBRATION_CRITERIA, CLASSES, vendor_protocol

SCANNERS = [f"Scanner {c}" for c in "ABCDEF"]


def _rows(rng: np.random.Generator, n: int, prefix: str, tau: np.ndarray) -> dict[str, np.ndarray]:
    """Scores and labels drawn from softmax(z / tau) (tau 1: calibrated), vectorised."""
    z = rng.normal(size=(n, 3)) * 2.0
    truth = np.exp(z / tau[:, None] - (z / tau[:, None]).max(axis=1, keepdims=True))
    truth /= truth.sum(axis=1, keepdims=True)
    labels = (rng.random(n)[:, None] > truth.cumsum(axis=1)).sum(axis=1).clip(0, 2)
    return {"z": z, "labels": labels, "keys": np.char.add(prefix, np.arange(n).astype(str))}


def _write(
    path: Path, rng: np.random.Generator, n: int, prefix: str, dates: list[str] | None, drift: bool
) -> None:
    scanner = np.array(SCANNERS)[rng.integers(0, len(SCANNERS), n)]
    tau = np.where(drift & (scanner == SCANNERS[0]), 2.0, 1.0)
    made = _rows(rng, n, prefix, tau)
    with path.open("a", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        if fh.tell() == 0:
            out.writerow(
                ["accession", "mrn", "scanner", "label", *[f"logit:{c}" for c in CLASSES], "study_date"]
            )
        for i in range(n):
            out.writerow(
                [
                    made["keys"][i],
                    f"P{made['keys'][i]}",
                    scanner[i],
                    CLASSES[made["labels"][i]],
                    *[f"{v:.5f}" for v in made["z"][i]],
                    dates[i] if dates else "",
                ]
            )


def _protocol(**monitoring: object) -> dict[str, object]:
    """The monitoring tests' vendor protocol, with 1,000 resamples and an accuracy margin besides."""
    protocol = vendor_protocol(
        "bench-monitor", split={"by": "patient", "fit_fraction": 0.5, "seed": 3}, **monitoring
    )
    protocol["evaluation"]["bootstrap"]["n_resamples"] = 1000  # type: ignore[index]
    protocol["acceptance"] = [
        *CALIBRATION_CRITERIA,
        {"id": "accuracy", "metric": "accuracy", "stage": "after", "above": 0.6, "scope": "overall"},
    ]
    return protocol


def _timed(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, exit code and output of a sitecal command in a child process."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done.returncode, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--per-month", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-monitor-"))
    site, after = work / "site", work / "after"
    site.mkdir(parents=True)
    after.mkdir()
    rng = np.random.default_rng(20261207)
    _write(site / "predictions.csv", rng, 3000, "V", None, False)
    (site / "validation.yaml").write_text(yaml.safe_dump(_protocol()), encoding="utf-8")
    sitecal = [sys.executable, "-m", "sitecal.cli"]
    seconds, code, said = _timed([*sitecal, "run", str(site / "validation.yaml"), "--no-progress"])
    if code not in (0, 1, 3):
        raise SystemExit(f"the baseline run failed ({code}):\n{said}")
    (run,) = (site / "reports").iterdir()
    print(f"baseline run (3,000 studies): {seconds:.1f} s")
    start = time.perf_counter()
    for month in range(args.months):
        days = rng.integers(1, 29, args.per_month)
        year, index = 2025 + (11 + month) // 12, (11 + month) % 12 + 1  # from December 2025, all past
        dates = [f"{year}-{index:02d}-{d:02d}" for d in days]
        _write(after / "predictions.csv", rng, args.per_month, f"M{month}-", dates, month >= 6)
    size = (after / "predictions.csv").stat().st_size / 2**20
    seconds = time.perf_counter() - start
    print(f"monitoring file ({args.months} x {args.per_month:,} studies): {seconds:.1f} s, {size:.0f} MiB")
    (after / "site.key").write_bytes((site / "site.key").read_bytes())
    (after / "site.key").chmod(0o600)
    protocol = _protocol(baseline=str(run), window="month", date_column="study_date")
    (after / "monitor.yaml").write_text(yaml.safe_dump(protocol), encoding="utf-8")
    for label in ("monitor, first run", "monitor, again (all windows stored)"):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        seconds, code, said = _timed([*sitecal, "monitor", str(after / "monitor.yaml"), "--no-progress"])
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        rss = max(before, peak) / 1024
        print(f"{label}: {seconds:.1f} s, exit {code}, peak RSS of the largest child so far {rss:.0f} MiB")
        if code not in (0, 1):
            raise SystemExit(said)
    print(said.strip())


if __name__ == "__main__":
    main()
