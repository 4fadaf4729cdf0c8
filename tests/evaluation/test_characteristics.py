"""Cohort characteristics and highest-confidence errors of evaluation.json, against hand counts and pandas."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from tests.conftest import DEMO_PROTOCOL, PATIENT_SPLIT

from sitecal.evaluation import EvaluationData, EvaluationPolicy, evaluate
from sitecal.evaluation._characteristics import (
    MAX_ERRORS,
    cohort_characteristics,
    highest_confidence_errors,
)
from sitecal.metrics import softmax
from sitecal.protocol import Protocol
from sitecal.results import Evaluation

CLASSES = ["normal", "nodule", "effusion"]
FLOW = {
    "files_found": 240,
    "dicom_instances": 240,
    "studies": 240,
    "labelled": 240,
    "analysed": 240,
    "exclusions": [],
}


def _protocol(*, sex: bool = True, age: bool = True, **evaluation: Any) -> Protocol:
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["calibration"]["split"] = dict(PATIENT_SPLIT)
    raw["subgroups"].pop("sex_age", None)  # the hand-built cohorts here carry the tag subgroups only
    raw["evaluation"]["bootstrap"].update({"n_resamples": 50, "refit": False})
    raw["evaluation"].update(evaluation)
    raw["calibration"]["min_group_size"] = 20
    if not sex:
        del raw["subgroups"]["sex"]
    if not age:
        raw["subgroups"]["age_band"].pop("bands")  # PatientAge without bands gives no age-band mix
    return Protocol.model_validate(raw)


def small_case() -> tuple[EvaluationData, np.ndarray]:
    """Eight studies of five patients; the fit mask chosen by hand."""
    attributes = {
        "scanner": np.array(["B", "A", "A", "unknown", "B", "A", "B", "A"]),
        "site": np.array(["s1", "s1", "s2", "s2", "s1", "s1", "s2", "s2"]),
        "sex": np.array(["F", "M", "M", "unknown", "F", "F", "F", "M"]),
        "age_band": np.array(["0–39", "40–59", "40–59", "unknown", "0–39", "60–79", "0–39", "40–59"]),
    }
    data = EvaluationData(
        logits=np.zeros((8, 3)),
        labels=np.array([0, 1, 0, 2, 0, 0, 1, 0]),
        patient_keys=np.array(["P1", "P2", "P2", "P3", "P1", "P4", "P5", "P2"]),
        attributes=attributes,
        class_names=CLASSES,
        study_keys=np.array([f"S-{i}" for i in range(8)]),
    )
    fit = np.array([True, False, False, True, True, False, False, False])
    return data, fit


def test_characteristics_of_a_hand_built_cohort() -> None:
    data, fit = small_case()
    out = cohort_characteristics(EvaluationPolicy.from_protocol(_protocol()), data, fit).to_dict()
    assert out["sex_attribute"] == "sex" and out["age_attribute"] == "age_band" and out["notes"] == []
    assert out["tags"] == {
        "scanner": "ManufacturerModelName",
        "site": "InstitutionName",
        "sex": "PatientSex",
        "age_band": "PatientAge",
    }
    overall = out["overall"]
    # By hand: 8 studies, 3 fit (rows 0, 3, 4), 5 patients; labels 0,1,0,2,0,0,1,0: 5 normal, 2 nodule, 1.
    assert (overall["n"], overall["n_fit"], overall["n_evaluation"], overall["n_patients"]) == (8, 3, 5, 5)
    assert overall["classes"] == [
        {"class": "normal", "count": 5, "share": 5 / 8},
        {"class": "nodule", "count": 2, "share": 2 / 8},
        {"class": "effusion", "count": 1, "share": 1 / 8},
    ]
    assert overall["sex"] == [
        {"value": "F", "count": 4, "share": 0.5},
        {"value": "M", "count": 3, "share": 3 / 8},
        {"value": "unknown", "count": 1, "share": 1 / 8},
    ]
    scanners = out["subgroups"]["scanner"]
    assert [g["group"] for g in scanners] == ["A", "B", "unknown"]  # sorted, unknown last and shown
    a = scanners[0]
    # Scanner A: rows 1, 2, 5, 7 (none fit); patients P2, P4; labels 1, 0, 0, 0; sex M, M, F, M.
    assert (a["n"], a["n_fit"], a["n_evaluation"], a["n_patients"], a["share_of_cohort"]) == (4, 0, 4, 2, 0.5)
    assert [c["count"] for c in a["classes"]] == [3, 1, 0]  # a zero count is kept
    assert a["sex"] == [{"value": "F", "count": 1, "share": 0.25}, {"value": "M", "count": 3, "share": 0.75}]
    assert a["age_band"] == [
        {"value": "40–59", "count": 3, "share": 0.75},
        {"value": "60–79", "count": 1, "share": 0.25},
    ]
    unknown = scanners[2]
    assert (unknown["n"], unknown["n_fit"], unknown["sex"][0]["value"]) == (1, 1, "unknown")


def test_characteristics_match_pandas_groupby() -> None:
    data, fit = small_case()
    out = cohort_characteristics(EvaluationPolicy.from_protocol(_protocol()), data, fit).to_dict()
    frame = pd.DataFrame({**data.attributes, "patient": data.patient_keys, "label": data.labels, "fit": fit})
    for attribute, rows in out["subgroups"].items():
        grouped = frame.groupby(attribute)
        assert sorted(g["group"] for g in rows) == sorted(grouped.groups)
        for row in rows:
            part = grouped.get_group(row["group"])
            assert row["n"] == len(part)
            assert row["n_fit"] == int(part["fit"].sum())
            assert row["n_evaluation"] == int((~part["fit"]).sum())
            assert row["n_patients"] == part["patient"].nunique()
            counts = part["label"].value_counts().reindex(range(3), fill_value=0)
            assert [c["count"] for c in row["classes"]] == counts.tolist()
            assert [c["share"] for c in row["classes"]] == pytest.approx((counts / len(part)).tolist())
            sex = part["sex"].value_counts(normalize=True)
            assert {m["value"]: m["share"] for m in row["sex"]} == pytest.approx(sex.to_dict())


def test_protocol_without_sex_or_age_bands_says_so() -> None:
    data, fit = small_case()
    out = cohort_characteristics(
        EvaluationPolicy.from_protocol(_protocol(sex=False, age=False, subgroups=["scanner"])), data, fit
    ).to_dict()
    assert out["sex_attribute"] is None and out["age_attribute"] is None
    assert out["notes"] == ["no_sex_attribute", "no_age_band_attribute"]  # codes: the report words them
    assert list(out["subgroups"]) == ["scanner"]
    assert all(row["sex"] is None and row["age_band"] is None for row in out["subgroups"]["scanner"])


def _error_case() -> tuple[EvaluationData, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Six evaluation rows with probabilities given directly (before, after) and two fit rows."""
    after = np.array(
        [
            [0.2, 0.7, 0.1],  # S-a true 0: error, conf 0.7
            [0.9, 0.05, 0.05],  # S-b true 0: right
            [0.1, 0.1, 0.8],  # S-c true 1: error, conf 0.8
            [0.7, 0.2, 0.1],  # S-d true 2: error, conf 0.7 (ties S-a; S-a first by key)
            [0.3, 0.6, 0.1],  # S-e true 1: right
            [0.5, 0.4, 0.1],  # S-f true 1: error, conf 0.5
        ]
    )
    before = np.array(
        [
            [0.1, 0.85, 0.05],
            [0.95, 0.03, 0.02],
            [0.05, 0.05, 0.9],
            [0.8, 0.15, 0.05],
            [0.2, 0.75, 0.05],
            [0.55, 0.4, 0.05],
        ]
    )
    keys = np.array(["S-fit1", "S-d", "S-a", "S-b", "S-c", "S-e", "S-fit2", "S-f"])
    labels = np.array([0, 2, 0, 0, 1, 1, 0, 1])
    held = np.array([False, True, True, True, True, True, False, True])
    order = [3, 0, 1, 2, 4, 5]  # evaluation rows of the probability tables above, in data row order
    data = EvaluationData(
        logits=np.zeros((8, 3)),
        labels=labels,
        patient_keys=keys,
        attributes={},
        class_names=CLASSES,
        study_keys=keys,
    )
    groups = np.array(["A", "B", "A", "B", "A", "B"])  # S-d, S-a, S-b, S-c, S-e, S-f
    return data, held, {"before": before[order], "after": after[order]}, groups


def test_highest_confidence_errors_by_hand() -> None:
    data, held, probs, groups = _error_case()
    out = highest_confidence_errors(data, held, probs, groups).to_dict()
    assert (out["limit"], out["n_evaluation"], out["n_errors"]) == (MAX_ERRORS, 6, 4)
    assert "note" not in out
    # Hand order: S-c 0.8; then S-a and S-d at 0.7 (by key); then S-f 0.5. Groups follow the data rows.
    assert out["studies"] == [
        {
            "study_key": "S-c",
            "calibration_group": "B",
            "predicted": "effusion",
            "true": "nodule",
            "confidence_before": 0.9,
            "confidence_after": 0.8,
        },
        {
            "study_key": "S-a",
            "calibration_group": "B",
            "predicted": "nodule",
            "true": "normal",
            "confidence_before": 0.85,
            "confidence_after": 0.7,
        },
        {
            "study_key": "S-d",
            "calibration_group": "A",
            "predicted": "normal",
            "true": "effusion",
            "confidence_before": 0.8,
            "confidence_after": 0.7,
        },
        {
            "study_key": "S-f",
            "calibration_group": "B",
            "predicted": "normal",
            "true": "nodule",
            "confidence_before": 0.55,
            "confidence_after": 0.5,
        },
    ]
    two = highest_confidence_errors(data, held, probs, groups, limit=2).to_dict()
    assert [s["study_key"] for s in two["studies"]] == ["S-c", "S-a"]


def test_errors_without_keys_or_with_uid_keys_are_not_listed() -> None:
    data, held, probs, groups = _error_case()
    bare = EvaluationData(data.logits, data.labels, data.patient_keys, {}, CLASSES)
    out = highest_confidence_errors(bare, held, probs, groups).to_dict()
    assert out["studies"] == [] and out["n_errors"] == 4
    assert out["note"] == "no_study_keys"
    uids = np.array([f"1.2.826.0.1.3680043.8.498.{i}" for i in range(8)])
    leaky = EvaluationData(data.logits, data.labels, data.patient_keys, {}, CLASSES, study_keys=uids)
    out = highest_confidence_errors(leaky, held, probs, groups).to_dict()
    assert out["studies"] == [] and out["note"] == "study_keys_look_like_uids"
    assert "1.2.826" not in json.dumps(out)


def _synthetic(seed: int = 3) -> EvaluationData:
    rng = np.random.default_rng(seed)
    n = 240
    scanner = np.array(["A", "B", "C"])[rng.integers(0, 3, n)]
    z = rng.normal(size=(n, 3)) * 3.0
    p = softmax(z, temperature=1.7)
    labels = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    sex = np.array(["F", "M", "unknown"])[rng.integers(0, 3, n)]
    age = np.array(["0–39", "40–59", "unknown"])[rng.integers(0, 3, n)]
    return EvaluationData(
        logits=z,
        labels=labels,
        patient_keys=np.array([f"P-{i // 2:04d}" for i in range(n)]),
        attributes={"scanner": scanner, "site": scanner, "sex": sex, "age_band": age},
        class_names=CLASSES,
        study_keys=np.array([f"S-{i:04d}" for i in range(n)]),
    )


def test_evaluate_writes_both_keys_consistently_and_they_validate() -> None:
    data = _synthetic()
    protocol = _protocol(
        subgroups=["scanner", "sex"], metrics=["ece", "ece_debiased", "accuracy"], disparity_metrics=["ece"]
    )
    out = evaluate(protocol, data, cohort_flow=FLOW, protocol_sha256="0" * 64)
    doc = json.loads(json.dumps(out.document))
    chars, errors = doc["characteristics"], doc["highest_confidence_errors"]
    assert chars["overall"]["n_fit"] == int(out.fit_mask.sum()) == doc["split"]["n_fit"]
    assert chars["overall"]["n_evaluation"] == doc["split"]["n_evaluation"]
    for row in chars["subgroups"]["scanner"]:
        evaluated = next(g for g in doc["subgroups"]["scanner"] if g["group"] == row["group"])
        assert row["n_evaluation"] == evaluated["n"]
    # The listed errors, recomputed independently from the temperatures the evaluation applied.
    held = ~out.fit_mask
    t = out.temperatures.temperatures_for(data.attributes["scanner"][held])
    after = softmax(data.logits[held], temperature=t)
    wrong = after.argmax(axis=1) != data.labels[held]
    assert errors["n_errors"] == int(wrong.sum()) > MAX_ERRORS
    assert data.study_keys is not None
    top = sorted(zip(-after.max(axis=1)[wrong], data.study_keys[held][wrong], strict=True))[:MAX_ERRORS]
    assert [s["study_key"] for s in errors["studies"]] == [k for _, k in top]
    assert [s["confidence_after"] for s in errors["studies"]] == pytest.approx([-c for c, _ in top])
    assert (
        evaluate(protocol, data, cohort_flow=FLOW, protocol_sha256="0" * 64).document[
            "highest_confidence_errors"
        ]
        == errors
    )
    assert Evaluation.from_dict(doc) == out.result
