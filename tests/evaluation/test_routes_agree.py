"""One answer per data set: ``evaluate_arrays`` writes what ``sitecal evaluate`` writes, byte for byte.

The same rows go through both routes: as arrays (the notebook route) and as a predictions file read by
``sitecal evaluate`` in process (the command line). Their ``evaluation.json`` files must be the same
bytes, but for two fields that name the route rather than the data, replaced in both files before the
comparison:

- ``protocol.sha256``, the hash of the protocol's text: the command line's names its predictions file,
  patient column, output folder and key file; the arrays' says its predictions are arrays;
- ``highest_confidence_errors.studies[*].study_key``, the names of the listed studies: the command line
  writes their pseudonyms under the site key (they change with the key, by design), the arrays their row
  (``row i``). The test checks that both name the same studies.

Before the arrays were ordered by the split keys of their ids, the two routes drew different splits from
the same data (a site's ECE 0.122 by the arrays, 0.198 by the command line, on 200 studies).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tests.conftest import TEST_PSEUDONYM_KEY, VERDICT_EXIT

from sitecal import evaluate_arrays
from sitecal._pseudonym import Pseudonymizer
from sitecal.cli import main
from sitecal.errors import DataError

CLASSES = ["none", "mild", "severe"]
N = 240
#: the settings of the routes' runs: few resamples (the routes are compared, not the intervals)
CASES: dict[str, dict[str, Any]] = {
    "patient split, refit": {
        "calibrate_by": "site",
        "n_resamples": 50,
        "seed": 11,
        "split_seed": 5,
        "refit": True,
        "acceptance": [{"id": "ece", "metric": "ece_debiased", "below": 0.2, "scope": "site"}],
    },
    "crossfit, refit": {
        "calibrate_by": "site",
        "n_resamples": 50,
        "seed": 11,
        "split_seed": 5,
        "folds": 4,
        "refit": True,
        "fallback": "shrink",
        "acceptance": [{"id": "ece", "metric": "ece_debiased", "below": 0.15, "scope": "site"}],
    },
}


def _cohort() -> dict[str, np.ndarray]:
    """240 studies of 224 patients (16 with two studies, 6 of them at two sites), two subgroup columns."""
    rng = np.random.default_rng(20260301)
    site = np.array(["North"] * 110 + ["South"] * 70 + ["East"] * 60)
    scanner = rng.choice(["DRX 1", "Fluoro 9"], size=N)
    patients = np.array([f"MRN-{i:05d}" for i in rng.permutation(N)])
    for first, second in [(i, i + 1) for i in range(0, 20, 2)] + [(109 - i, 110 + i) for i in range(6)]:
        patients[second] = patients[first]  # 10 patients twice at North, 6 at North and South
    temperature = np.select([site == "North", site == "South"], [2.0, 0.7], 1.2)
    logits = rng.normal(size=(N, 3)) * 2.0
    truth = np.exp(logits / temperature[:, None])
    truth /= truth.sum(axis=1, keepdims=True)
    labels = (rng.random(N)[:, None] > np.cumsum(truth, axis=1)).sum(axis=1)
    studies = np.array([f"1.2.826.0.1.3680043.10.{i}" for i in rng.permutation(N)])
    return {
        "logits": logits,
        "labels": labels.astype(np.int64),
        "site": site,
        "scanner": scanner,
        "patients": patients,
        "studies": studies,
    }


def _write_predictions(path: Path, data: dict[str, np.ndarray], *, patients: bool) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(
            [
                "StudyInstanceUID",
                *(["PatientID"] if patients else []),
                "site",
                "scanner",
                "label",
                *[f"logit:{c}" for c in CLASSES],
            ]
        )
        for i in range(N):
            out.writerow(
                [
                    data["studies"][i],
                    *([data["patients"][i]] if patients else []),
                    data["site"][i],
                    data["scanner"][i],
                    CLASSES[data["labels"][i]],
                    *[repr(float(v)) for v in data["logits"][i]],
                ]
            )


def _command_line(root: Path, protocol: dict[str, Any]) -> Path:
    """``sitecal evaluate`` on ``root/predictions.csv`` under ``protocol``; its exit code is the verdict's."""
    key_file = root / "key"
    key_file.write_text(TEST_PSEUDONYM_KEY + "\n")
    key_file.chmod(0o600)
    protocol["data"] = {**protocol["data"], "predictions": str(root / "predictions.csv")}
    protocol["report"] = {"output_dir": str(root / "reports")}
    protocol["privacy"] = {**protocol.get("privacy", {}), "key_file": str(key_file)}
    path = root / "protocol.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False), encoding="utf-8")
    code = main(["evaluate", str(path), "--no-progress"])
    (folder,) = (root / "reports").glob("notebook-*")
    verdict = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))["verdict"]
    assert code == VERDICT_EXIT[verdict]
    return folder / "evaluation.json"


def _route_fields_replaced(text: bytes) -> tuple[bytes, int, list[str]]:
    """``text`` with the protocol hash and the listed studies' names replaced; the count of each."""
    text, hashes = re.subn(rb'("sha256": )"[0-9a-f]{64}"', rb'\1"<protocol text>"', text)
    names = [m.decode() for m in re.findall(rb'"study_key": "([^"]*)"', text)]
    text = re.sub(rb'("study_key": )"[^"]*"', rb'\1"<listed study>"', text)
    return text, hashes, names


def _assert_same_evaluation(notebook: Path, command_line: Path, studies: np.ndarray) -> None:
    a, hashes_a, rows = _route_fields_replaced(notebook.read_bytes())
    b, hashes_b, pseudonyms = _route_fields_replaced(command_line.read_bytes())
    assert hashes_a == hashes_b == 1  # protocol.sha256, and nothing else with that name
    assert len(rows) == len(pseudonyms) > 0
    # the listed studies are the same studies: row i of the arrays is the file's study with that pseudonym
    pseudonym = Pseudonymizer(TEST_PSEUDONYM_KEY.encode())
    assert [pseudonym("study", str(studies[int(r.removeprefix("row "))])) for r in rows] == pseudonyms
    assert a == b


@pytest.fixture(scope="module")
def cohort() -> dict[str, np.ndarray]:
    return _cohort()


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_arrays_and_the_command_line_write_the_same_evaluation(
    case: str, cohort: dict[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = CASES[case]
    result = evaluate_arrays(
        logits=cohort["logits"],
        labels=cohort["labels"],
        class_names=CLASSES,
        patients=cohort["patients"],
        studies=cohort["studies"],
        groups={"site": cohort["site"], "scanner": cohort["scanner"]},
        **settings,
    )
    notebook = result.write(tmp_path / "notebook")
    _write_predictions(tmp_path / "predictions.csv", cohort, patients=True)
    protocol = yaml.safe_load((notebook / "protocol.yaml").read_text(encoding="utf-8"))
    protocol["data"] = {"patient_column": "PatientID"}  # the arrays' settings, the file's columns
    monkeypatch.chdir(tmp_path)
    command_line = _command_line(tmp_path, protocol)
    _assert_same_evaluation(notebook / "evaluation.json", command_line, cohort["studies"])

    doc = result.document
    assert doc["split"]["method"] == ("crossfit" if "folds" in settings else "patient")
    assert doc["bootstrap"]["refit"] is True
    # the split is handed back in the arrays' order: a patient's two studies share their part or fold
    fold = result.outcome.split.fold
    twice = [np.flatnonzero(cohort["patients"] == p) for p in set(cohort["patients"].tolist())]
    assert sum(len(rows) == 2 for rows in twice) == 16
    assert all(len(set(fold[rows].tolist())) == 1 for rows in twice)
    if doc["split"]["method"] == "patient":
        assert int((fold == 0).sum()) == doc["split"]["n_fit"] == 240 - doc["split"]["n_evaluation"]
    else:
        # 224 patients dealt to 4 folds in turn: 56 each
        patients_per_fold = [len(set(cohort["patients"][fold == k].tolist())) for k in range(4)]
        assert patients_per_fold == [56, 56, 56, 56]


@pytest.mark.slow
def test_the_default_options_give_the_default_protocol_s_evaluation(
    cohort: dict[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No patients, no study ids: each row is its own study, named by its number, as a file keyed by it."""
    result = evaluate_arrays(
        logits=cohort["logits"],
        labels=cohort["labels"],
        class_names=CLASSES,
        groups={"site": cohort["site"], "scanner": cohort["scanner"]},
        calibrate_by="site",
    )
    notebook = result.write(tmp_path / "notebook")
    numbered = {**cohort, "studies": np.arange(N).astype(str)}
    _write_predictions(tmp_path / "predictions.csv", numbered, patients=False)
    # a protocol written by hand, every option left at its default (the seeds have none: 0, as the arrays')
    protocol = {
        "name": "notebook",
        "intended_use": "Calibration of a model read from a predictions file.",
        "model": {"name": "a vendor's model", "class_names": CLASSES},
        "data": {},
        "subgroups": {"site": {"column": "site"}, "scanner": {"column": "scanner"}},
        "calibration": {"per": "site", "split": {"seed": 0}},
        "evaluation": {"bootstrap": {"seed": 0}},
    }
    monkeypatch.chdir(tmp_path)
    command_line = _command_line(tmp_path, protocol)
    _assert_same_evaluation(notebook / "evaluation.json", command_line, numbered["studies"])
    doc = result.document
    assert doc["bootstrap"]["n_resamples"] == 1000 and doc["bootstrap"]["refit"] is False
    assert doc["split"] | {"n_fit": 0, "n_evaluation": 0, "patients_fit": 0, "patients_evaluation": 0} == {
        "method": "patient",
        "fit_fraction": 0.5,
        "folds": None,
        "seed": 0,
        "stratify": "site",
        "n_fit": 0,
        "n_evaluation": 0,
        "patients_fit": 0,
        "patients_evaluation": 0,
    }
    # the protocol's default calibration.min_group_size (50) decides which site has its own temperature:
    # South and East, with 30 to 49 fit studies, take the global one, as on the command line
    fit = result.outcome.split.fold == 0
    fitted = {site: int(fit[cohort["site"] == site].sum()) for site in ("North", "South", "East")}
    sources = {g["group"]: g["temperature_source"] for g in doc["subgroups"]["site"]}
    assert sources == {"East": "global_fallback", "North": "own", "South": "global_fallback"}
    assert fitted == {"North": 55, "South": 35, "East": 30}  # half of each site's 110, 70 and 60 studies


def test_the_order_of_the_arrays_changes_no_number(cohort: dict[str, np.ndarray]) -> None:
    """Rows in another order: the same split, numbers and verdict; only the listed rows' numbers follow."""
    settings = CASES["patient split, refit"]
    order = np.random.default_rng(1).permutation(N)

    def evaluated(rows: np.ndarray) -> Any:
        return evaluate_arrays(
            logits=cohort["logits"][rows],
            labels=cohort["labels"][rows],
            class_names=CLASSES,
            patients=cohort["patients"][rows],
            studies=cohort["studies"][rows],
            groups={"site": cohort["site"][rows], "scanner": cohort["scanner"][rows]},
            **settings,
        )

    a, b = evaluated(np.arange(N)), evaluated(order)
    doc_a, doc_b = a.document, b.document
    listed_a = [e.pop("study_key") for e in doc_a["highest_confidence_errors"]["studies"]]
    listed_b = [e.pop("study_key") for e in doc_b["highest_confidence_errors"]["studies"]]
    # row j of the shuffled arrays is row order[j] of the first
    assert [f"row {order[int(r.removeprefix('row '))]}" for r in listed_b] == listed_a
    assert doc_a == doc_b
    assert np.array_equal(a.outcome.split.fold[order], b.outcome.split.fold)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"studies": ["1.2.3", "1.2.3", "1.2.4"]}, "studies must hold a distinct, non-empty id per label"),
        ({"studies": ["1.2.3", " ", "1.2.4"]}, "studies must hold a distinct, non-empty id per label"),
        ({"studies": ["1.2.3", "1.2.4"]}, r"studies has shape \(2,\); give one id per label \(3\)"),
        (
            {"key": "PatientID"},
            "The 'key' parameter of evaluate_arrays must be 'StudyInstanceUID' or 'AccessionNumber'. "
            "Got 'PatientID'.",
        ),
    ],
)
def test_study_ids_that_no_file_could_hold_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(DataError, match=message):
        evaluate_arrays(
            logits=np.zeros((3, 2)), labels=np.array([0, 1, 0]), class_names=["no", "yes"], **kwargs
        )
