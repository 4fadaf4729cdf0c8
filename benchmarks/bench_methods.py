"""Cost of calibration.compare: every recalibration method with refit intervals, beside temperature alone.

Reads a demo run folder (``cohort.csv`` and ``predictions.csv``, what ``sitecal demo`` writes), splits
the studies as ``--split`` says (``patient``: ``fit_fraction`` 0.5 with the protocol's seed; ``crossfit``:
the demo protocol's own 5 folds, each fold calibrated by fits on the other four and every fold refitted in
every resample), and runs :func:`sitecal.stats.compare_methods` on every calibration group (all studies,
then each scanner), with B refitted resamples:

- the baseline: temperature scaling alone (the refit bootstrap of the temperature arm);
- each method beside temperature: the extra time is that method's cost;
- every method together, as ``calibration.compare`` with all of them runs it;

and prints wall time and its ratio to the baseline, measured in this run. Then one whole ``evaluate``
of the protocol (refit bootstrap) without and with ``calibration.compare``, and how many comparisons
came out clearly better or worse.

    sitecal demo                                        # once: writes reports/demo-<time>/
    python benchmarks/bench_methods.py reports/demo-<time> [--resamples 1000] [--split patient|crossfit]

The demo model has three classes, so beta calibration (binary only) is not among the methods.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
from crossfit_stability import DEMO_PROTOCOL, _data

from sitecal.evaluation import evaluate
from sitecal.evaluation._split import make_split
from sitecal.protocol import Protocol, load_protocol
from sitecal.stats import BootstrapSpec, compare_methods

METHODS = ("vector", "matrix", "dirichlet", "histogram", "isotonic")


def _protocol(base: Protocol, resamples: int, compare: tuple[str, ...], split: str) -> Protocol:
    raw = base.model_dump(mode="json")
    if split == "patient":
        raw["calibration"]["split"] = {
            "by": "patient",
            "fit_fraction": 0.5,
            "seed": base.calibration.split.seed,
        }
    raw["calibration"]["compare"] = list(compare)
    raw["evaluation"]["bootstrap"].update({"n_resamples": resamples, "refit": True})
    return Protocol.model_validate(raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a demo run folder (cohort.csv, predictions.csv)")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--split", choices=("patient", "crossfit"), default="patient")
    args = parser.parse_args()

    base = load_protocol(DEMO_PROTOCOL).protocol
    data = _data(args.run, list(base.model.class_names), list(base.subgroups))
    protocol = _protocol(base, args.resamples, METHODS, args.split)
    cal = protocol.calibration
    per = data.attributes[cal.per or ""]
    split = make_split(cal, data.patient_keys, data.attributes[cal.split.stratify or cal.per or ""])
    fit, held = split.fit, split.held
    groups = [("All studies", np.ones(len(per), dtype=bool))] + [(g, per == g) for g in sorted(set(per))]
    spec = BootstrapSpec(n_resamples=args.resamples, seed=protocol.evaluation.bootstrap.seed)
    folds = cal.split.folds if cal.split.by == "crossfit" else None
    print(
        f"split {cal.split.by}: "
        f"{len(data.labels)} studies ({int(fit.sum())} fit, {int(held.sum())} evaluation), "
        f"{len(groups)} calibration groups (all studies and {len(groups) - 1} scanners), "
        f"B = {args.resamples} refitted resamples, {len(base.model.class_names)} classes"
    )

    def run(methods: tuple[str, ...]) -> float:
        started = time.perf_counter()
        for _, mask in groups:
            fold_sizes = [int((fit & mask & (split.fold != k)).sum()) for k in range(folds or 1)]
            own = min(fold_sizes) if folds else int((fit & mask).sum())
            f = fit & mask if own >= cal.min_group_size else fit
            e = held & mask
            crossfit = (
                {}
                if folds is None
                else {"fit_folds": split.fold[f], "eval_folds": split.fold[e], "folds": folds}
            )
            compare_methods(
                data.logits[f],
                data.labels[f],
                data.logits[e],
                data.labels[e],
                fit_clusters=data.patient_keys[f],
                eval_clusters=data.patient_keys[e],
                methods=methods,
                n_bins=protocol.evaluation.n_bins,
                spec=spec,
                **crossfit,
            )
        return time.perf_counter() - started

    baseline = run(())
    print("\n| methods refitted in every resample | wall time | ratio to temperature alone |")
    print("| --- | ---: | ---: |")
    print(f"| temperature alone (baseline) | {baseline:.1f} s | 1.0 |")
    for method in METHODS:
        seconds = run((method,))
        print(f"| temperature + {method} | {seconds:.1f} s | {seconds / baseline:.1f} |")
    seconds = run(METHODS)
    print(f"| temperature + all {len(METHODS)} | {seconds:.1f} s | {seconds / baseline:.1f} |")

    n = len(data.labels)
    flow = {
        "files_found": n,
        "dicom_instances": n,
        "studies": n,
        "labelled": n,
        "analysed": n,
        "exclusions": [],
    }
    timings = {}
    for label, compare in (("without calibration.compare", ()), ("with all methods", METHODS)):
        started = time.perf_counter()
        outcome = evaluate(
            _protocol(base, args.resamples, compare, args.split),
            data,
            cohort_flow=flow,
            protocol_sha256="0" * 64,
        )
        timings[label] = time.perf_counter() - started
        print(f"\nevaluate(), refit bootstrap, {label}: {timings[label]:.1f} s")
        comparison = outcome.result.method_comparison
        if comparison is not None:
            found: Counter[str] = Counter()
            for group in comparison.groups:
                for method, measures in group.methods.items():
                    for measure in measures.values():
                        if method != comparison.reference:
                            found[str(measure.finding)] += 1
            print(
                "  findings against temperature scaling: "
                + ", ".join(f"{v} {k}" for k, v in sorted(found.items()))
            )


if __name__ == "__main__":
    main()
