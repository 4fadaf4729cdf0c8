"""Does cross-fitting steady the verdict? One patient split against K-fold cross-fitting over 20 seeds.

Reads a demo run folder (``cohort.csv`` and ``predictions.csv``, what ``sitecal demo`` writes) and the
demo protocol, and evaluates the same studies with ``split.by: patient`` (fit_fraction 0.5) and with
``split.by: crossfit`` (5 folds) for 20 split seeds, everything else as the protocol says. Prints, per
method: how often each verdict came out, and per criterion the spread over seeds (standard deviation,
min-max) of the bound the criterion judges on its worst group, and how many evaluation studies the
judged groups had.

    sitecal demo                                   # once: writes reports/demo-<time>/
    python benchmarks/crossfit_stability.py reports/demo-<time> [--seeds 20] [--resamples 1000]

About 20-40 s an evaluation on 2 CPU cores (bootstrap with refit, 1,000 resamples): 40 evaluations.
"""

from __future__ import annotations

import argparse
import csv
import time
from collections import Counter
from pathlib import Path

import numpy as np

from sitecal._split_key import rank_key
from sitecal.evaluation import EvaluationData, evaluate
from sitecal.protocol import load_protocol

DEMO_PROTOCOL = Path(__file__).resolve().parents[1] / "src" / "sitecal" / "demo" / "protocols" / "demo.yaml"


def _data(run: Path, class_names: list[str], attributes: list[str]) -> EvaluationData:
    with open(run / "cohort.csv", newline="", encoding="utf-8") as f:
        cohort = {row["study_key"]: row for row in csv.DictReader(f)}
    with open(run / "predictions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    first: dict[str, int] = {}
    for row in rows:
        first[row["patient_key"]] = min(int(row["split_rank"]), first.get(row["patient_key"], 1 << 62))
    logits = np.array([[float(row[f"logit:{c}"]) for c in class_names] for row in rows])
    labels = np.array([class_names.index(cohort[row["study_key"]]["label"]) for row in rows])
    return EvaluationData(
        logits=logits,
        labels=labels,
        patient_keys=np.array([rank_key(first[row["patient_key"]]) for row in rows], dtype=object),
        attributes={
            a: np.array([cohort[row["study_key"]][a] for row in rows], dtype=object) for a in attributes
        },
        class_names=class_names,
    )


def _worst_bounds(result) -> dict[str, tuple[float, int]]:  # type: ignore[no-untyped-def]
    """Per criterion: the bound judged on its worst group (the upper bound for 'below', etc.) and its n."""
    out = {}
    for c in result.acceptance:
        groups = [g for g in c.results if g.low is not None and g.high is not None]
        if not groups:
            out[c.id] = (float("nan"), 0)
            continue
        if c.rule == "below":
            g = max(groups, key=lambda g: g.high)
            out[c.id] = (g.high, g.n)
        elif c.rule == "above":
            g = min(groups, key=lambda g: g.low)
            out[c.id] = (g.low, g.n)
        else:  # within: the bound nearest a margin, as its distance inside the margin (negative: outside)
            lo, hi = c.lower_margin, c.upper_margin
            g = min(groups, key=lambda g: min(g.low - lo, hi - g.high))
            out[c.id] = (min(g.low - lo, hi - g.high), g.n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a demo run folder (cohort.csv, predictions.csv)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()

    base = load_protocol(DEMO_PROTOCOL).protocol
    data = _data(args.run, list(base.model.class_names), list(base.subgroups))
    n = len(data.labels)
    flow = {
        "files_found": n,
        "dicom_instances": n,
        "studies": n,
        "labelled": n,
        "analysed": n,
        "exclusions": [],
    }
    methods = {
        "patient split (fit_fraction 0.5)": {"by": "patient", "fit_fraction": 0.5},
        f"crossfit ({args.folds} folds)": {"by": "crossfit", "folds": args.folds},
    }
    print(
        f"{len(data.labels)} studies; {args.seeds} seeds; {args.resamples} resamples (refit as the protocol)"
    )
    for label, split in methods.items():
        verdicts: Counter[str] = Counter()
        per_criterion: dict[str, Counter[str]] = {}
        bounds: dict[str, list[float]] = {}
        sizes: dict[str, list[int]] = {}
        started = time.perf_counter()
        for seed in range(args.seeds):
            settings = {**split, "seed": 1000 + seed, "stratify": base.calibration.split.stratify}
            protocol = base.model_copy(
                update={
                    "calibration": base.calibration.model_copy(
                        update={"split": type(base.calibration.split).model_validate(settings)}
                    ),
                    "evaluation": base.evaluation.model_copy(
                        update={
                            "bootstrap": base.evaluation.bootstrap.model_copy(
                                update={"n_resamples": args.resamples}
                            )
                        }
                    ),
                }
            )
            outcome = evaluate(protocol, data, cohort_flow=flow, protocol_sha256="0" * 64)
            verdicts[outcome.result.verdict] += 1
            for c in outcome.result.acceptance:
                per_criterion.setdefault(c.id, Counter())[c.verdict] += 1
            for cid, (bound, n) in _worst_bounds(outcome.result).items():
                bounds.setdefault(cid, []).append(bound)
                sizes.setdefault(cid, []).append(n)
        seconds = time.perf_counter() - started
        print(f"\n{label}: {seconds / args.seeds:.1f} s an evaluation")
        print("  verdicts: " + ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items())))
        print(
            "  | criterion | verdicts | worst group's judged bound: mean | SD over seeds | min - max | "
            "n of that group |"
        )
        print("  | --- | --- | ---: | ---: | --- | ---: |")
        for cid, values in bounds.items():
            v = np.array(values)
            counted = ", ".join(f"{n} {k}" for k, n in sorted(per_criterion[cid].items()))
            print(
                f"  | {cid} | {counted} | {v.mean():.4f} | {v.std(ddof=1):.4f} | {v.min():.4f} - "
                f"{v.max():.4f} | {np.median(sizes[cid]):.0f} |"
            )


if __name__ == "__main__":
    main()
