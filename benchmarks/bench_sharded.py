"""Sharded inference: ``sitecal predict`` in one process against a Dask LocalCluster of 2 workers.

Data: the demo cohort generated here (N radiographs, default 2,000; ``--quick`` 300), the demo CNN, the logit
cache off so that every route computes every logit. Each route is a fresh ``sitecal predict`` process, so
its wall time includes the header scan, hashing (the file-hash manifest is removed before each route), the
cluster's start and stop, and writing the file; peak memory is the largest resident set of the process and
its children (the workers). The predictions files must be identical, byte for byte.

Run:  python benchmarks/bench_sharded.py            (N = 2,000; about 3 minutes on 2 cores)
      python benchmarks/bench_sharded.py --quick    (N = 300)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DEMO_PROTOCOL = REPO / "src" / "sitecal" / "demo" / "protocols" / "demo.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 studies")
    parser.add_argument("--studies", type=int, default=None)
    parser.add_argument("--shard-size", type=int, default=256)
    args = parser.parse_args()
    n = args.studies or (300 if args.quick else 2000)
    from sitecal.demo import generate_demo

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"generating {n} demo studies ...", file=sys.stderr)
        manifest = generate_demo(root / "data", n_studies=n, seed=1)
        protocol = yaml.safe_load(DEMO_PROTOCOL.read_text())
        protocol["data"]["dicom_dir"] = str(manifest.dicom_dir)
        protocol["data"]["labels"] = str(manifest.labels_csv)
        protocol["report"]["output_dir"] = str(root / "reports")
        protocol["inputs"]["logit_cache"] = False
        protocol["privacy"] = {"key_file": str(root / "site.key")}  # one key: the files must compare
        path = root / "protocol.yaml"
        path.write_text(yaml.safe_dump(protocol, sort_keys=False))
        routes = {
            "one process (baseline)": [],
            f"LocalCluster, 2 workers, shards of {args.shard_size}": [
                "--dask-workers",
                "2",
                "--shard-size",
                str(args.shard_size),
            ],
        }
        rows = []
        outputs = []
        for name, extra in routes.items():
            shutil.rmtree(root / "reports", ignore_errors=True)  # no file-hash manifest: every file hashed
            output = root / f"preds-{len(outputs)}.csv"
            seconds, peak = _timed(["predict", str(path), "--output", str(output), "--no-progress", *extra])
            outputs.append(output.read_bytes())
            rows.append((name, seconds, peak))
        base = rows[0][1]
        print(f"\nsitecal predict, {n} demo radiographs, demo CNN, logit cache off; {os.cpu_count()} cores\n")
        print("| route | wall time | vs one process | peak RSS (process + workers) |")
        print("| --- | ---: | ---: | ---: |")
        for name, seconds, peak in rows:
            print(f"| {name} | {seconds:.1f} s | {seconds / base:.2f}x | {peak:.0f} MiB |")
        same = all(o == outputs[0] for o in outputs)
        print(f"\npredictions files identical: {same}")
        if not same:
            raise SystemExit(1)


def _timed(args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS in MiB (the largest of the process and the children it reaped)."""
    code = (
        "import resource, sys; from sitecal.cli import main; code = main(sys.argv[1:]); "
        "r = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
        "print(f'PEAK {r}', file=sys.stderr); sys.exit(code)"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sitecal {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    peak = max(int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("PEAK "))
    return seconds, peak / 1024


if __name__ == "__main__":
    main()
