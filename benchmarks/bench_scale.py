"""Network scale: wall time and peak memory of read, evaluate (refit bootstrap) and report, N = 10^4-10^6.

Cohort: N synthetic studies with precomputed logits (no images, no model run), as a vendor's predictions
CSV that ``sitecal evaluate --predictions`` reads: a StudyInstanceUID key in clear, a PatientID column
(about 1.25 studies per patient), a label column, and subgroup columns ``site`` (6 hospitals), ``scanner``
(2 per site, 12 in all), ``PatientSex`` and ``age`` (banded as the demo's age bands), with 3 classes.
The logits are calibrated by construction (each label drawn from the softmax of its logits), then divided
by a temperature per scanner between 0.6 and 1.8, so every scanner is miscalibrated in its own way and
the per-scanner temperatures differ. The protocol is the demo's (``sitecal:demo/protocols/demo.yaml``):
temperature per scanner, 5-fold cross-fitting, ECE, debiased ECE, NLL, Brier and accuracy with 15 bins,
fairness on ECE and NLL, a percentile bootstrap with ``refit: true`` (B = 1,000; ``--quick``: 200), the
study-size planning with 100 simulations, and the demo's three acceptance criteria.

Stages, each in a fresh subprocess (wall time around the process; peak RSS from ``os.wait4``'s rusage,
i.e. the largest resident set of the process or any child it waited for, as ``/usr/bin/time -v``):

- ``read``: :func:`sitecal.run.stages.scan` alone: the predictions file read, checked, keys pseudonymised
  and the cohort built (a part of ``evaluate``, measured alone to show where the time goes);
- ``evaluate``: ``sitecal evaluate PROTOCOL --no-progress``, the whole command: read, split, fits,
  metrics, refit bootstrap, fairness, planning, the run folder's tables and documents, and its report;
- ``report``: ``sitecal report RUN``, the report rendered again from the stored run folder;
- ``scan``: :func:`sitecal.cohort.scan_folder` (2 worker processes) over N headers-only DICOM files of
  clinical header size (``_ct_files.py``, 64x64 pixels never read), N <= ``--scan-max`` (default 10^4);
- ``hash``: ``bench_hash.measure`` (the persistent hash manifest) over the same files.

Evaluate and report run in one process on one machine: no Dask ``LocalCluster`` is used by them (the
cluster shards ``sitecal predict``, the model's inference, which a predictions file skips).

Run:  python benchmarks/bench_scale.py                       (N = 10^4, 10^5, 10^6; B = 1,000)
      python benchmarks/bench_scale.py --quick               (N = 10^4, B = 200)
      python benchmarks/bench_scale.py --sizes 1e4,1e5 --out /tmp/scale
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
CLASSES = ("normal", "nodule", "effusion")
SITES = 6
SCANNERS_PER_SITE = 2
#: The done-when limits of issue 18 for evaluate + report at 10^6 studies on 2 cores.
LIMIT_S = 600.0
LIMIT_MIB = 8 * 1024


@dataclass(frozen=True)
class Row:
    n: int
    stage: str
    wall_s: float | None
    peak_mib: float | None
    note: str = ""


def write_cohort(root: Path, n: int, *, n_resamples: int, seed: int = 0) -> Path:
    """Write the predictions CSV and the protocol for ``n`` studies under ``root``; return the protocol."""
    rng = np.random.default_rng(seed)
    n_scanners = SITES * SCANNERS_PER_SITE
    scanner = rng.integers(0, n_scanners, n)
    site = scanner // SCANNERS_PER_SITE
    # a temperature per scanner, spread over [0.6, 1.8]: logits as given are the calibrated ones / T
    temperature = np.linspace(0.6, 1.8, n_scanners)[rng.permutation(n_scanners)]
    z = rng.normal(0.0, 1.0, (n, len(CLASSES))) * 2.2 + np.array([0.8, 0.0, -0.3])
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    label = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1).clip(0, len(CLASSES) - 1)
    logits = z / temperature[scanner][:, None]
    # about 1.25 studies per patient: a fifth of the studies belong to an earlier study's patient
    patient = np.arange(n)
    repeat = rng.random(n) < 0.2
    patient[repeat] = rng.integers(0, n, int(repeat.sum()))
    sex = rng.choice(np.array(["M", "F"]), n)
    age = rng.integers(18, 96, n)
    path = root / "predictions.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(
            ["StudyInstanceUID", "PatientID", "label", "site", "scanner", "PatientSex", "age"]
            + [f"logit:{c}" for c in CLASSES]
        )
        for i in range(n):
            out.writerow(
                [
                    f"1.2.826.0.1.3680043.10.543.{i}",
                    f"PAT{patient[i]:08d}",
                    CLASSES[label[i]],
                    f"Hospital {site[i] + 1}",
                    f"Scanner {chr(65 + site[i])}{scanner[i] % SCANNERS_PER_SITE + 1}",
                    sex[i],
                    str(age[i]),
                    *[repr(float(v)) for v in logits[i]],
                ]
            )
    demo = yaml.safe_load((HERE.parent / "src/sitecal/demo/protocols/demo.yaml").read_text())
    protocol = {
        "name": f"scale-{n}",
        "intended_use": demo["intended_use"],
        "model": {"name": "vendor triage model", "version": "4.2", "class_names": list(CLASSES)},
        "data": {
            "predictions": path.name,
            "key": "StudyInstanceUID",
            "patient_column": "PatientID",
            "label_column": "label",
        },
        "subgroups": {
            "scanner": {"column": "scanner", "label": "Scanner"},
            "site": {"column": "site", "label": "Site"},
            "sex": {"column": "PatientSex", "label": "Sex"},
            "age_band": {"column": "age", "bands": [0, 40, 60, 80, 200], "label": "Age band"},
            "sex_age": {"intersection": ["sex", "age_band"], "label": "Sex × age band"},
        },
        "calibration": demo["calibration"],
        "evaluation": {
            **demo["evaluation"],
            "bootstrap": {**demo["evaluation"]["bootstrap"], "n_resamples": n_resamples},
        },
        "acceptance": demo["acceptance"],
        "report": {**demo["report"], "output_dir": "reports"},
    }
    out_path = root / "protocol.yaml"
    out_path.write_text(yaml.safe_dump(protocol, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out_path


class OverLimit(Exception):
    """A stage killed at the time limit: how long it ran and its peak RSS until then."""

    def __init__(self, wall_s: float, peak_mib: float) -> None:
        super().__init__(f"killed after {wall_s:.0f} s")
        self.wall_s, self.peak_mib = wall_s, peak_mib


def measured(
    argv: list[str], *, env: dict[str, str] | None = None, limit_s: float | None = None
) -> tuple[float, float, str]:
    """Run ``argv`` in a fresh process: (wall s, peak RSS MiB of it and its children, stdout).

    A process still running after ``limit_s`` is killed and :class:`OverLimit` raised.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, text=True, start_new_session=True)
        killed = False
        while True:
            # os.wait4 gives this child's own rusage (ru_maxrss: its peak, or its children's, in KiB)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if limit_s is not None and time.perf_counter() - start > limit_s and not killed:
                os.killpg(proc.pid, 9)
                killed = True
            time.sleep(0.2)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if killed:
        raise OverLimit(wall, usage.ru_maxrss / 1024)
    if proc.returncode not in (0, 1, 3):  # pass, fail and inconclusive are all finished runs
        raise SystemExit(f"{' '.join(argv[:3])} ... exited {proc.returncode}:\n{stderr[-3000:]}")
    return wall, usage.ru_maxrss / 1024, stdout


def _child(stage: str, target: str, extra: str | None) -> None:
    """One stage inside the measured subprocess."""
    if stage == "read":
        from sitecal._pseudonym import Pseudonymizer, load_or_create_key
        from sitecal.protocol import load_protocol
        from sitecal.run.stages import scan

        loaded = load_protocol(Path(target))
        cohort = scan(loaded, Pseudonymizer(load_or_create_key(loaded.key_file)), progress=False)
        print(len(cohort.studies))
    elif stage == "scan":
        from sitecal.cohort.scan import scan_folder

        result = scan_folder(Path(target), workers=2, progress=False)
        print(len(result.instances))
    elif stage == "hash":
        sys.path.insert(0, str(HERE))
        from bench_hash import measure  # type: ignore[import-not-found]

        print(json.dumps(measure(int(extra or 0), Path(target)), default=str))
    else:
        raise SystemExit(f"unknown stage {stage}")


def _self(stage: str, target: Path, extra: str | None = None) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", stage, str(target)]
    return argv + ([extra] if extra else [])


def _sitecal() -> list[str]:
    return [sys.executable, "-c", "import sys; from sitecal.cli import main; sys.exit(main(sys.argv[1:]))"]


def _run_folder(root: Path) -> Path:
    folders = sorted(p for p in (root / "reports").iterdir() if (p / "evaluation.json").is_file())
    if not folders:
        raise SystemExit(f"{root / 'reports'}: no finished run folder")
    return folders[-1]


def _log_breakdown(folder: Path) -> str:
    """Seconds between the run log's first and last lines (the command less start-up), for the note."""
    lines = [line[:23] for line in (folder / "run.log").read_text().splitlines() if line[:4].isdigit()]
    if len(lines) < 2:
        return ""
    from datetime import datetime

    first, last = (datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f") for t in (lines[0], lines[-1]))
    return f"run log spans {(last - first).total_seconds():.0f} s"


def scale_rows(n: int, root: Path, n_resamples: int, limit_s: float | None) -> list[Row]:
    print(f"[N={n:,}] writing the predictions file ...", flush=True)
    protocol = write_cohort(root, n, n_resamples=n_resamples)
    size = (root / "predictions.csv").stat().st_size / 2**20
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1796083200"}
    stages = [
        ("read (predictions file -> cohort)", lambda: _self("read", protocol), f"{size:.0f} MiB CSV"),
        (
            f"evaluate (CLI, B={n_resamples}, incl. report)",
            lambda: [*_sitecal(), "evaluate", str(protocol), "--no-progress"],
            "",
        ),
        ("report (CLI, from the run folder)", lambda: [*_sitecal(), "report", str(_run_folder(root))], ""),
    ]
    rows = []
    for stage, argv, note in stages:
        if stage.startswith("report") and not any(r.stage.startswith("evaluate") and r.wall_s for r in rows):
            rows.append(Row(n, stage, None, None, "not run: evaluate did not finish"))
            continue
        try:
            wall, peak, _ = measured(argv(), env=env, limit_s=limit_s)
        except OverLimit as over:
            rows.append(Row(n, stage, None, over.peak_mib, f"killed at {over.wall_s:.0f} s (limit)"))
            print(f"[N={n:,}] {stage}: killed at {over.wall_s:.0f} s, {over.peak_mib:.0f} MiB", flush=True)
            continue
        if stage.startswith("evaluate"):
            note = _log_breakdown(_run_folder(root))
        rows.append(Row(n, stage, wall, peak, note))
        print(f"[N={n:,}] {stage}: {wall:.1f} s, {peak:.0f} MiB", flush=True)
    return rows


def file_rows(n: int, root: Path) -> list[Row]:
    sys.path.insert(0, str(HERE))
    from _ct_files import write_ct_files

    folder = root / "dicom"
    print(f"[N={n:,}] writing {n:,} headers-only DICOM files ...", flush=True)
    write_ct_files(folder, n, size=64, header_elements=250)
    rows = []
    wall, peak, out = measured(_self("scan", folder))
    rows.append(Row(n, "scan (headers, 2 workers)", wall, peak))
    print(f"[N={n:,}] scan {wall:.1f} s, {peak:.0f} MiB", flush=True)
    if (HERE / "bench_hash.py").exists():
        wall, peak, out = measured(_self("hash", folder, str(n)))
        routes = json.loads(out.strip().splitlines()[-1])
        for route, what in (
            ("baseline", "hash, no manifest"),
            ("first", "hash, first run (manifest written)"),
            ("second", "hash, second run (folder unchanged)"),
        ):
            r = routes[route]
            note = f"{r['hashed']} hashed, {r['reused']} reused; peak RSS of the three runs together"
            rows.append(Row(n, what, r["seconds"], peak, note))
        print(f"[N={n:,}] hash {wall:.1f} s in all, {peak:.0f} MiB", flush=True)
    else:
        rows.append(Row(n, "hash", None, None, "TODO: benchmarks/bench_hash.py not written yet"))
    shutil.rmtree(folder)
    return rows


def slope(rows: list[Row], stage: str) -> str | None:
    """Least-squares slope of log(wall) on log(N) over the sizes a stage was measured at."""
    points = [(r.n, r.wall_s) for r in rows if r.stage == stage and r.wall_s]
    if len(points) < 2:
        return None
    x = np.log([n for n, _ in points])
    y = np.log([t for _, t in points])
    b = float(np.polyfit(x, y, 1)[0])
    return f"- {stage}: time grows as N^{b:.2f} over N = {', '.join(f'{n:.0e}' for n, _ in points)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6", help="comma-separated N (default 1e4,1e5,1e6)")
    parser.add_argument("--quick", action="store_true", help="N = 10^4 only, B = 200")
    parser.add_argument("--resamples", type=int, default=None, help="bootstrap B (default 1,000)")
    parser.add_argument("--scan-max", type=float, default=1e4, help="largest N for scan and hash rows")
    parser.add_argument(
        "--limit-s", type=float, default=None, help="kill a stage still running after this many seconds"
    )
    parser.add_argument("--out", type=Path, default=None, help="keep the cohorts and run folders here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], args.child[2] if len(args.child) > 2 else None)
        return
    sizes = [10_000] if args.quick else [int(float(s)) for s in args.sizes.split(",")]
    n_resamples = args.resamples or (200 if args.quick else 1000)
    out = args.out or Path(tempfile.mkdtemp(prefix="sitecal-scale-"))
    rows: list[Row] = []
    for n in sizes:
        root = out / f"n{n}"
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        rows += scale_rows(n, root, n_resamples, args.limit_s)
        if n <= args.scan_max:
            rows += file_rows(n, root)
    print()
    print(f"Network scale on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}, B = {n_resamples}")
    print("(evaluate and report run in one process; no Dask cluster is involved in them)")
    print()
    print("| N | stage | wall s | peak RSS MiB | note |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        wall = ("TODO" if "TODO" in r.note else "—") if r.wall_s is None else f"{r.wall_s:.1f}"
        peak = ("TODO" if "TODO" in r.note else "—") if r.peak_mib is None else f"{r.peak_mib:.0f}"
        print(f"| {r.n:,} | {r.stage} | {wall} | {peak} | {r.note} |")
    print()
    for stage in dict.fromkeys(r.stage for r in rows):
        line = slope(rows, stage)
        if line:
            print(line)
    for r in rows:
        if r.n >= 1_000_000 and r.stage.startswith("evaluate"):
            if r.wall_s is None:
                verdict = f"OVER: {r.note}"
            else:
                ok = r.wall_s <= LIMIT_S and (r.peak_mib or math.inf) <= LIMIT_MIB
                verdict = f"{r.wall_s:.0f} s, {r.peak_mib:.0f} MiB: {'within' if ok else 'OVER'}"
            print(f"\nAt N = {r.n:,}, evaluate + report (limit {LIMIT_S:.0f} s, {LIMIT_MIB} MiB): {verdict}")


if __name__ == "__main__":
    main()
