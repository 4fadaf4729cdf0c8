"""Where `sitecal evaluate` spends its time: wall seconds of each part of the evaluation, one run.

Wraps the evaluation's parts (the per-group intervals, the per-scanner refit intervals, the fairness
comparisons and their flags, sensitivity analyses, planning, the read and the report) with timers and runs
`sitecal evaluate PROTOCOL --no-progress` in this process. Parts nest: `attribute_disparities` holds
`refit_disparity_stages` (the after stage refitted and, on its draws, the before stage) or
`disparity_intervals_each` (without a refit) (`attribute_flags`, the size-matched flags of every
attribute, runs before them); `group_result` and
`add_temperature_uncertainty` are the per-group intervals and the scanners' refit intervals.

Run two B to split what grows with the resamples from what does not, e.g. on bench_scale.py's cohort:

    python -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; \\
        from bench_scale import write_cohort; p = Path('/tmp/scale/n1000000'); p.mkdir(parents=True); \\
        write_cohort(p, 10**6, n_resamples=1000)"                                              # the cohort
    python benchmarks/bench_evaluate_parts.py /tmp/scale/n1000000/protocol.yaml --resamples 50
    python benchmarks/bench_evaluate_parts.py /tmp/scale/n1000000/protocol.yaml --resamples 100
"""

from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

PARTS = {
    "sitecal.evaluation._core": [
        "group_result",
        "add_temperature_uncertainty",
        "attribute_disparities",
        "attribute_flags",
        "refit_temperatures",
        "sensitivity_analyses",
        "plan_study_sizes",
        "compare_recalibration",
        "cohort_characteristics",
        "bootstrap_temperature",
        "deployed_temperatures",
        "applied_temperatures",
        "make_split",
    ],
    "sitecal.evaluation._disparities": [
        "refit_disparity_stages",
        "disparity_intervals_each",
    ],
    "sitecal.run._protocol_run": ["scan", "evaluate_cohort", "render_run"],
}


def _timed(totals: dict[str, float], name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - start

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("protocol", type=Path, help="a protocol with data.predictions (bench_scale.py's)")
    parser.add_argument("--resamples", type=int, default=None, help="bootstrap B (default: the protocol's)")
    args = parser.parse_args()
    protocol = args.protocol
    if args.resamples is not None:  # a copy beside the protocol, so that its relative paths still hold
        document = yaml.safe_load(protocol.read_text(encoding="utf-8"))
        document["evaluation"]["bootstrap"]["n_resamples"] = args.resamples
        protocol = protocol.with_name(f"{protocol.stem}-b{args.resamples}.yaml")
        protocol.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")

    import importlib

    totals: dict[str, float] = defaultdict(float)
    for module_name, names in PARTS.items():  # a loop over modules
        module = importlib.import_module(module_name)
        for name in names:  # a loop over the parts each module calls
            setattr(module, name, _timed(totals, name, getattr(module, name)))
    from sitecal.cli import main as cli

    start = time.perf_counter()
    try:
        cli(["evaluate", str(protocol), "--no-progress"])
    except SystemExit:  # the verdict's exit code
        pass
    totals["TOTAL (evaluate, incl. read and report)"] = time.perf_counter() - start
    print(f"\n{'part':40s} {'wall s':>8s}")
    for name, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"{name:40s} {seconds:8.1f}")


if __name__ == "__main__":
    main()
