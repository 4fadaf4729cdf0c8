"""Real runs' evaluation.json read back as sitecal.results.Evaluation and follow the generated schema.

One demo cohort is generated and run once through the command line (the full pipeline, report included).
The protocol variants then re-run the evaluation stage, ``sitecal.evaluation.evaluate``, on that run's own
analysed studies (cohort.csv + predictions.csv), which is what ``sitecal run`` would write for them; the
first variant is checked to reproduce the run's evaluation.json exactly, so the shortcut is faithful.
Broken documents and the schema itself are tested on small synthetic documents in tests/results.
"""

from __future__ import annotations

import copy
import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tests.conftest import PATIENT_SPLIT, assert_exit_is_the_verdicts, write_demo_protocol
from tests.results.sentences import sentences

from sitecal._split_key import rank_key
from sitecal.cli import main
from sitecal.demo import generate_demo
from sitecal.evaluation import EvaluationData, evaluate
from sitecal.protocol import load_protocol
from sitecal.results import Evaluation, json_schema, read_document

jsonschema = pytest.importorskip("jsonschema", reason="the schema tests need the test extra (jsonschema)")

Document = dict[str, Any]
_BOOTSTRAP = {"n_resamples": 50, "level": 0.95, "method": "percentile", "seed": 7, "refit": True}
_ALL_METRICS = ["ece", "nll", "brier", "accuracy"]


def _no_scanner_criterion(p: dict[str, Any]) -> None:
    """One global temperature, judged overall only, on a margin no model of this cohort meets (a fail)."""
    p["acceptance"] = [c for c in p["acceptance"] if c["scope"] != "scanner"]
    p["acceptance"].append({"id": "accuracy-unreachable", "metric": "accuracy", "above": 0.999})


def _bca_without_debiased(p: dict[str, Any]) -> None:
    """BCa is refused for the debiased ECE: drop it from the metrics; the scanner criterion judges Brier."""
    p["evaluation"]["metrics"] = _ALL_METRICS
    for criterion in p["acceptance"]:
        if criterion["metric"] == "ece_debiased":
            criterion.update(metric="brier", below=0.5)


def _no_subgroups(p: dict[str, Any]) -> None:
    p["subgroups"], p["acceptance"] = {}, []


def _unreported_scope(p: dict[str, Any]) -> None:
    """Calibration per site, but only scanners reported: the site criterion has no group to judge."""
    p["evaluation"].update(subgroups=["scanner"], metrics=["brier", "nll"], disparity_metrics=["brier"])
    p["acceptance"] = [
        {"id": "brier-site", "metric": "brier", "stage": "before", "below": 0.5, "scope": "site"}
    ]


#: name -> (protocol sections for write_demo_protocol, a further edit of the protocol or None)
VARIANTS: dict[str, tuple[dict[str, dict[str, Any]], Callable[[dict[str, Any]], None] | None]] = {
    "per-scanner-refit": ({"calibration": {"min_group_size": 30}}, None),
    "global-temperature": ({"calibration": {"per": None, "min_group_size": 30}}, _no_scanner_criterion),
    "shrink": ({"calibration": {"min_group_size": 80, "fallback": "shrink"}}, None),
    "no-refit-bca-all-disparities": (
        {
            "calibration": {"min_group_size": 30},
            "evaluation": {
                "bootstrap": {**_BOOTSTRAP, "refit": False, "method": "bca"},
                "disparity_metrics": _ALL_METRICS,
            },
        },
        _bca_without_debiased,
    ),
    # one half split (the demo cross-fits), where scanners of about 30 fit studies fall back to the global T
    "insufficient-data": (
        {
            "calibration": {"min_group_size": 60, "split": dict(PATIENT_SPLIT)},
            "evaluation": {"min_group_size": 200},
        },
        None,
    ),
    "no-subgroups-no-criteria": ({"calibration": {"per": None, "min_group_size": 30}}, _no_subgroups),
    "unreported-scope-two-metrics": (
        {"calibration": {"per": "site", "min_group_size": 30}},
        _unreported_scope,
    ),
}


def _protocol(root: Path, manifest: object, name: str) -> Path:
    sections, edit = VARIANTS[name]
    folder = root / name
    folder.mkdir()
    path = write_demo_protocol(folder, manifest, n_resamples=50, **copy.deepcopy(sections))
    if edit is not None:
        data = yaml.safe_load(path.read_text())
        edit(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _analysed(folder: Path, class_names: list[str], subgroups: list[str]) -> EvaluationData:
    """The analysed studies of a run folder, as the run handed them to evaluate().

    The run orders studies and patients by key-independent split keys, which no output holds; a
    predictions file sitecal wrote keeps each study's rank in that order (``split_rank``), and a patient's
    first rank stands in for its split key, as the predictions route reads such a file back.
    """
    with open(folder / "cohort.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(folder / "predictions.csv", newline="", encoding="utf-8") as f:
        predicted = {r["study_key"]: r for r in csv.DictReader(f)}
    logits = {k: [float(r[f"logit:{c}"]) for c in class_names] for k, r in predicted.items()}
    rank = {k: int(r["split_rank"]) for k, r in predicted.items()}
    rows = sorted((r for r in rows if r["study_key"] in rank), key=lambda r: rank[r["study_key"]])
    first: dict[str, int] = {}
    for r in rows:
        first.setdefault(r["patient_key"], rank[r["study_key"]])
    return EvaluationData(
        logits=np.array([logits[r["study_key"]] for r in rows]),
        labels=np.array([class_names.index(r["label"]) for r in rows]),
        patient_keys=np.array([rank_key(first[r["patient_key"]]) for r in rows]),
        attributes={name: np.array([r[name] for r in rows]) for name in subgroups},
        class_names=class_names,
        study_keys=np.array([r["study_key"] for r in rows]),
    )


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Document]:
    root = tmp_path_factory.mktemp("schema")
    manifest = generate_demo(root / "data", n_studies=300, seed=1)
    first = next(iter(VARIANTS))
    path = _protocol(root, manifest, first)
    code = main(["run", str(path), "--no-progress"])
    (folder,) = (root / first / "reports").glob("demo-*")
    assert_exit_is_the_verdicts(code, folder)
    written = read_document(folder / "evaluation.json", Evaluation).to_dict()
    assert written == json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    data = _analysed(folder, written["class_names"], list(load_protocol(path).protocol.subgroups))
    flow = {k: v for k, v in written["cohort_flow"].items() if k not in ("fit", "evaluation")}
    docs = {"run": written}
    for name in VARIANTS:
        loaded = load_protocol(path if name == first else _protocol(root, manifest, name))
        protocol = loaded.protocol
        variant = EvaluationData(
            data.logits,
            data.labels,
            data.patient_keys,
            {k: v for k, v in data.attributes.items() if k in protocol.subgroups},
            data.class_names,
            study_keys=data.study_keys,
        )
        outcome = evaluate(protocol, variant, cohort_flow=flow, protocol_sha256=loaded.sha256)
        # as sitecal.run writes it: sorted keys, no NaN
        docs[name] = json.loads(json.dumps(outcome.document, sort_keys=True, allow_nan=False))
    return docs


@pytest.mark.slow
def test_the_evaluation_stage_reproduces_the_run(documents: dict[str, Document]) -> None:
    assert documents[next(iter(VARIANTS))] == documents["run"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["run", *VARIANTS])
def test_real_documents_validate(documents: dict[str, Document], name: str) -> None:
    doc = documents[name]
    assert Evaluation.from_dict(doc).to_dict() == doc
    jsonschema.Draft202012Validator(json_schema(Evaluation)).validate(doc)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["run", *VARIANTS])
def test_real_documents_hold_no_sentence(documents: dict[str, Document], name: str) -> None:
    # codes and numbers only: the report words them (tests/results/sentences.py lists the free texts)
    assert sentences(documents[name]) == []


@pytest.mark.slow
def test_the_variants_reach_every_optional_shape(documents: dict[str, Document]) -> None:
    rows = [d["overall"] for d in documents.values()]
    rows += [g for d in documents.values() for groups in d["subgroups"].values() for g in groups]
    assert {r.get("temperature_source") for r in rows} == {None, "own", "global_fallback", "shrunk", "global"}
    assert {r["refit"] for r in rows} == {True, False}
    assert {r["small"] for r in rows} == {True, False}
    stages = [
        s
        for d in documents.values()
        for by_metric in d["disparities"].values()
        for by_stage in by_metric.values()
        for s in by_stage.values()
    ]
    assert any(s.get("note") == "too_few_groups" for s in stages) and any("range" in s for s in stages)
    # the demo protocol's disparity metrics add the signed calibration gap to the variants' four
    assert {s["metric"] for s in stages if "metric" in s} == {*_ALL_METRICS, "calibration_gap"}
    verdicts = {d["verdict"] for d in documents.values()}
    assert verdicts == {"pass", "fail", "inconclusive", "insufficient data"}
    assert {a["scope"] for d in documents.values() for a in d["acceptance"] if not a["results"]} == {"site"}
    assert documents["no-subgroups-no-criteria"]["subgroups"] == {}
    assert documents["no-subgroups-no-criteria"]["acceptance"] == []
    assert {d["bootstrap"]["method"] for d in documents.values()} == {"percentile", "bca"}
