"""A small synthetic evaluation (three scanners, two sexes, two studies a patient) for the results tests.

``python -m tests.results.synthetic OUT.json`` writes the golden document of the default variant: it was
written once by the code that built ``evaluation.json`` from dict literals (before the typed results), so
that the typed path is checked to give the same bytes, and written again for schema_version 2 (sentences
became codes; every number the same) and for schema_version 3 (criteria judged on whole intervals).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import yaml
from tests.conftest import DEMO_PROTOCOL

from sitecal.evaluation import EvaluationData, evaluate
from sitecal.metrics import softmax
from sitecal.protocol import Protocol

FLOW: dict[str, Any] = {
    "files_found": 262,
    "dicom_instances": 261,
    "studies": 261,
    "labelled": 260,
    "analysed": 260,
    "exclusions": [
        {"stage": "scan", "reason": "not a DICOM file", "unit": "file", "count": 1},
        {"stage": "labels", "reason": "study has no label", "unit": "study", "count": 1},
    ],
    "sources": {
        "sites": [{"value": "Northgate", "count": 260}],
        "scanners": [{"value": "A", "count": 120}, {"value": "B", "count": 100}, {"value": "C", "count": 40}],
        "modalities": [{"value": "DX", "count": 260}],
        "months": {"first": "2025-01", "last": "2025-06", "unknown": 0},
    },
}

#: name -> edits of the protocol (calibration, evaluation) for each variant
VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "per-scanner-refit": {"calibration": {"min_group_size": 30}, "evaluation": {"refit": True}},
    "shrink": {"calibration": {"min_group_size": 45, "fallback": "shrink"}, "evaluation": {}},
    "global": {"calibration": {"per": None, "min_group_size": 30}, "evaluation": {}},
    "empirical-bayes-refit": {"calibration": {"fallback": "empirical_bayes"}, "evaluation": {"refit": True}},
}


def data(seed: int = 5) -> EvaluationData:
    rng = np.random.default_rng(seed)
    sizes, t_true = {"A": 120, "B": 100, "C": 40}, {"A": 2.0, "B": 1.4, "C": 1.7}
    logits, labels, scanner, patients = [], [], [], []
    for name, n in sizes.items():
        z = rng.normal(size=(n, 3)) * 3.0
        labels.append(
            (softmax(z, temperature=t_true[name]).cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
        )
        logits.append(z)
        scanner += [name] * n
        patients += [f"{name}-{i // 2:04d}" for i in range(n)]
    n_all = sum(sizes.values())
    sex = np.array(["F", "M"])[rng.integers(0, 2, n_all)]
    return EvaluationData(
        logits=np.vstack(logits),
        labels=np.concatenate(labels),
        patient_keys=np.array(patients),
        attributes={"scanner": np.array(scanner), "sex": sex},
        class_names=["normal", "nodule", "effusion"],
        study_keys=np.array([f"S-{i:04x}" for i in range(n_all)]),
    )


def protocol(variant: str = "per-scanner-refit") -> Protocol:
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    edits = VARIANTS[variant]
    raw["subgroups"] = {k: v for k, v in raw["subgroups"].items() if k in ("scanner", "sex")}
    # one patient split, as when the golden file was written (the demo protocol cross-fits since)
    raw["calibration"]["split"] = {"by": "patient", "fit_fraction": 0.5, "seed": 20261202}
    raw["calibration"].update(edits["calibration"])
    raw["evaluation"]["bootstrap"].update({"n_resamples": 50, "refit": False, **edits["evaluation"]})
    raw["evaluation"].update(disparity_metrics=["ece"], n_bins=5)
    if raw["calibration"]["per"] is None:
        raw["acceptance"] = [c for c in raw["acceptance"] if c["scope"] != "scanner"]
    return Protocol.model_validate(raw)


def document(variant: str = "per-scanner-refit") -> Any:
    """The evaluation outcome of a variant."""
    return evaluate(protocol(variant), data(), cohort_flow=FLOW, protocol_sha256="0" * 64)


def file_text(doc: dict[str, Any]) -> str:
    """What ``sitecal._io.write_json_atomic`` writes for ``doc``."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        out.write(file_text(document().document))
