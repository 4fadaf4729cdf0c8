"""Hash once: hashing a cohort's files with the persistent file-hash manifest, first and second run.

Files: N generated files of 4-64 KiB of random bytes (default 10,000; hashing does not look inside, so no
DICOM is needed), written with a fixed seed, or the files already under ``root`` when there are some (the
scale benchmark hands its DICOM folder). A file modified less than 2 s before it is hashed is not
remembered (``sitecal._hash_manifest.SETTLE_NS``), so the benchmark waits until the newest file is that
old before timing, as files of an archive are.

Routes over the same files, in one process, the page cache warmed first for all alike:

- no manifest (baseline, every run before "hash once"): ``sitecal.provenance.file_sha256`` per file;
- first run: ``hash_files`` with a new, empty manifest: every file read and remembered;
- second run: ``hash_files`` again, files unchanged: none read, every hash taken from the manifest.

Printed per route: files hashed, files reused, wall time, files/s, and the ratio of the first run's time to
its own. Target (issue 18): a second run on an unchanged folder of 10^4 files hashes nothing.

Run:  python benchmarks/bench_hash.py            (N = 10,000)
      python benchmarks/bench_hash.py --quick    (N = 1,000)
      python benchmarks/bench_hash.py --files 1000 --size-kib 512,512   (files the size of a CT slice)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sitecal._hash_manifest import SETTLE_NS, HashManifest, hash_files
from sitecal.provenance import file_sha256

KEY = bytes.fromhex("0123456789abcdef" * 4)  # a fixed site key: the benchmark's manifest is thrown away
MANIFEST_NAME = ".sitecal-file-hashes.sqlite"


def write_files(
    root: Path, n_files: int, *, size_kib: tuple[int, int] = (4, 64), seed: int = 18
) -> list[Path]:
    """``n_files`` files of random bytes, sizes uniform in ``size_kib`` (KiB, both ends), 100 to a folder."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(size_kib[0] << 10, (size_kib[1] << 10) + 1, size=n_files)
    paths = []
    for i, size in enumerate(sizes):
        path = root / f"folder{i // 100:04d}" / f"file{i:06d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.bytes(int(size)))
        paths.append(path)
    return paths


def measure(n_files: int, root: Path, *, size_kib: tuple[int, int] = (4, 64)) -> dict[str, Any]:
    """Hash the files under ``root`` without a manifest, then twice with a new one.

    When ``root`` holds no file, ``n_files`` files of random bytes (``size_kib``) are written there first.

    Returns
    -------
    dict
        ``files``, ``bytes``, and per route (``baseline``, ``first``, ``second``) a dict of ``hashed``,
        ``reused``, ``seconds``, ``files_per_s`` and ``vs_first`` (the first run's time over this
        route's).
    """
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
    if not paths:
        paths = write_files(root, n_files, size_kib=size_kib)
    n_bytes = 0
    newest = 0
    for path in paths:  # warm the page cache for every route alike
        n_bytes += len(path.read_bytes())
        newest = max(newest, path.stat().st_mtime_ns)
    wait = (newest + SETTLE_NS - time.time_ns()) / 1e9
    if wait > 0:
        time.sleep(wait + 0.05)  # until the files are settled, as an archive's are (not timed)
    routes: dict[str, dict[str, Any]] = {}
    start = time.perf_counter()
    reference = {path: file_sha256(path) for path in paths}
    routes["baseline"] = {"hashed": len(paths), "reused": 0, "seconds": time.perf_counter() - start}
    with tempfile.TemporaryDirectory() as tmp:
        manifest = HashManifest(Path(tmp) / MANIFEST_NAME, KEY)
        for route in ("first", "second"):
            start = time.perf_counter()
            hashes = hash_files(paths, manifest=manifest)
            seconds = time.perf_counter() - start
            if dict(hashes) != reference:
                raise AssertionError(f"{route} run: hashes differ from provenance.file_sha256")
            routes[route] = {"hashed": hashes.n_hashed, "reused": hashes.n_reused, "seconds": seconds}
        manifest_bytes = manifest.path.stat().st_size
    for row in routes.values():
        row["files_per_s"] = len(paths) / row["seconds"]
        row["vs_first"] = routes["first"]["seconds"] / row["seconds"]
    return {"files": len(paths), "bytes": n_bytes, "manifest_bytes": manifest_bytes, **routes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size-kib", default="4,64", help="smallest,largest file in KiB (default 4,64)")
    parser.add_argument("--quick", action="store_true", help="1,000 files")
    args = parser.parse_args()
    n = 1_000 if args.quick else args.files
    low, high = (int(v) for v in args.size_kib.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        print(f"writing {n:,} files of {low}-{high} KiB ...", flush=True)
        result = measure(n, Path(tmp), size_kib=(low, high))
    print(
        f"{result['files']:,} files, {result['bytes'] / 2**20:.0f} MiB, page cache warm, {os.cpu_count()} "
        f"cores; manifest {result['manifest_bytes'] / 2**10:.0f} KiB\n"
    )
    names = {
        "baseline": "no manifest (file_sha256 each file)",
        "first": "first run, new manifest",
        "second": "second run, files unchanged",
    }
    print("| route | files hashed | files reused | time | files/s | vs first run |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for route, name in names.items():
        row = result[route]
        print(
            f"| {name} | {row['hashed']:,} | {row['reused']:,} | {row['seconds']:.2f} s | "
            f"{row['files_per_s']:,.0f} | {row['vs_first']:.1f}x |"
        )
    second = result["second"]
    verdict = "met" if second["hashed"] == 0 else "MISSED"
    print(f"\nsecond run hashed {second['hashed']} files (target 0): {verdict}")


if __name__ == "__main__":
    main()
