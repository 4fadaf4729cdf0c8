"""Header scan: sitecal's parallel scan_folder against a single-process pydicom header loop.

Files: N generated CT files (default 10,000; 64x64 pixels, since a header scan never reads pixel data,
with a clinical-size header of about 330 elements: see ``_ct_files.py``).

Routes over the same files:

- pydicom loop (baseline): one process, ``pydicom.dcmread(path, stop_before_pixels=True)`` per file and
  the scan's keywords read as text.
- sitecal: ``sitecal.cohort.scan_folder(root, workers=W)`` (default ``min(4, cores)`` processes), which
  also checks each file for truncation and its image module, and accounts for every file.

Each route runs once after a warm-up pass over the files (page cache). Target (issue 4): >= 1.6x the
baseline on 2 cores.

Run:  python benchmarks/bench_scan.py            (N = 10,000)
      python benchmarks/bench_scan.py --quick    (N = 1,000)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pydicom

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ct_files import write_ct_files

from sitecal.cohort.scan import BASE_KEYWORDS, scan_folder


def _loop(paths: list[Path]) -> int:
    kept = 0
    for path in paths:
        ds = pydicom.dcmread(path, stop_before_pixels=True)
        values = {k: str(ds.get(k)) for k in BASE_KEYWORDS if k in ds}
        kept += "SOPInstanceUID" in values
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="1,000 files")
    args = parser.parse_args()
    n = 1_000 if args.quick else args.files

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"writing {n} files ...", flush=True)
        paths = write_ct_files(root, n, size=64, header_elements=250)
        for path in paths:  # warm the page cache for both routes alike
            path.read_bytes()
        start = time.perf_counter()
        kept = _loop(paths)
        loop_s = time.perf_counter() - start
        start = time.perf_counter()
        result = scan_folder(root, workers=args.workers)
        scan_s = time.perf_counter() - start
    assert kept == n and len(result.instances) == n, (kept, len(result.instances))
    workers = args.workers or min(4, os.cpu_count() or 1)
    print(f"Header scan, {n} files, {os.cpu_count()} cores, sitecal with {workers} worker processes")
    print()
    print("| route | time | files/s | vs loop |")
    print("| --- | --- | --- | --- |")
    print(f"| pydicom loop, one process (baseline) | {loop_s:.2f} s | {n / loop_s:.0f} | 1.00x |")
    print(f"| sitecal scan_folder | {scan_s:.2f} s | {n / scan_s:.0f} | {loop_s / scan_s:.2f}x |")
    print()
    print(f"sitecal vs the single-process loop: {loop_s / scan_s:.2f}x (target >= 1.6x on 2 cores)")


if __name__ == "__main__":
    main()
