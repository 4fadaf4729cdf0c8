"""DICOM studies joined to a predictions file: every file, study, label and row counted once in the flow.

One small generated cohort (60 intact studies, one truncated file, two non-DICOM files) is joined to a
predictions file with ``K`` rows of each problem: a NaN logit, no row, a row of no study; and to a labels
file missing ``K`` studies. A few studies have two problems at once (no label and a NaN row, no label and
no row, a key given twice with other scores); each must be excluded once, for one reason. The file is
joined once with the StudyInstanceUID in clear (a vendor's file, ``sitecal run`` with
``data.predictions``) and once with sitecal's own pseudonyms (as ``sitecal predict`` writes it, read by
``sitecal evaluate --predictions``).
"""

from __future__ import annotations

import csv
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tests.conftest import TEST_PSEUDONYM_KEY, VERDICT_EXIT, write_demo_protocol

from sitecal._pseudonym import Pseudonymizer
from sitecal.cli import main
from sitecal.cohort import read_predictions
from sitecal.cohort._build import prediction_row_exclusions
from sitecal.demo import generate_demo

EPOCH = "1767225600"  # 2026-01-01T00:00:00Z
K = 3  # studies (or rows) of each problem
N_STUDIES = 60
NAN = "unusable prediction row: not a finite number in column logit:normal"
TWICE = "unusable prediction row: key given twice with different scores, patient, label or columns"
WARNING = "prediction rows cannot be used and are excluded"
CLASSES = ("normal", "nodule", "effusion")
SCORE_COLUMNS = [f"logit:{c}" for c in CLASSES]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The generated cohort, its labels file and which studies have which problem."""
    root = tmp_path_factory.mktemp("joined")
    manifest = generate_demo(root / "data", n_studies=N_STUDIES, seed=11)
    protocol = write_demo_protocol(
        root, manifest, evaluation={"bootstrap": {"n_resamples": 50, "seed": 7, "refit": False}}
    )
    intact = [s for s in manifest.studies if s.intact]
    truncated = [s for s in manifest.studies if not s.intact]
    assert len(intact) == N_STUDIES and len(truncated) == 1
    uids = [s.study_uid for s in intact]
    groups = {  # disjoint sets of intact studies, by their problem
        "nan": uids[0:K],
        "missing": uids[K : 2 * K],
        "unlabelled": uids[2 * K : 3 * K],
        "unlabelled_nan": uids[3 * K : 3 * K + 1],
        "unlabelled_missing": uids[3 * K + 1 : 3 * K + 2],
        "twice": uids[3 * K + 2 : 3 * K + 3],
    }
    unlabelled = {*groups["unlabelled"], *groups["unlabelled_nan"], *groups["unlabelled_missing"]}
    labels = root / "labels.csv"
    with labels.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["StudyInstanceUID", "label"])
        # the truncated study's label: accounted for by its file's exclusion
        out.writerows([s.study_uid, s.label] for s in manifest.studies if s.study_uid not in unlabelled)
        out.writerows([f"1.2.826.0.1.3680043.99.{i}", "normal"] for i in range(2))  # labels of no study
    return {
        "root": root,
        "manifest": manifest,
        "protocol": protocol,
        "labels": labels,
        "uids": [s.study_uid for s in manifest.studies],  # the truncated study's too: it has a row
        "groups": groups,
    }


def _rows(cohort: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(StudyInstanceUID, logits as written) of each row of the predictions file, in file order."""
    groups = cohort["groups"]
    rng = np.random.default_rng(5)
    nan = {*groups["nan"], *groups["unlabelled_nan"]}
    missing = {*groups["missing"], *groups["unlabelled_missing"]}
    rows: list[tuple[str, list[str]]] = []
    for uid in cohort["uids"]:
        if uid in missing:
            continue
        logits = [repr(float(v)) for v in rng.normal(size=3)]
        rows.append((uid, ["nan", *logits[1:]] if uid in nan else logits))
        if uid in groups["twice"]:  # given again with other scores: neither row can be used
            rows.append((uid, [repr(float(v)) for v in rng.normal(size=3)]))
    rows += [(f"1.2.826.0.1.3680043.98.{i}", ["0.5", "0.25", "-1.0"]) for i in range(K)]  # no study's
    rows.append(("1.2.826.0.1.3680043.97.1", ["nan", "0.0", "0.0"]))  # unusable, and of no study
    return rows


def _vendor_file(cohort: dict[str, Any], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["StudyInstanceUID", *SCORE_COLUMNS])
        out.writerows([uid, *logits] for uid, logits in _rows(cohort))


def _sitecal_file(cohort: dict[str, Any], path: Path) -> None:
    """The file as 'sitecal predict' writes it: study and patient pseudonyms, split ranks."""
    pseudonymize = Pseudonymizer(TEST_PSEUDONYM_KEY.encode())
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(
            ["study_key", "patient_key", "split_rank", "logit:normal", "logit:nodule", "logit:effusion"]
        )
        for rank, (uid, logits) in enumerate(_rows(cohort)):
            patient = pseudonymize("patient", f"study:{uid}")
            out.writerow([pseudonymize("study", uid), patient, rank, *logits])


def _protocol(cohort: dict[str, Any], name: str, predictions: Path | None) -> Path:
    """The demo protocol on ``labels.csv``; with ``predictions``, a vendor's model that is not run here."""
    protocol = yaml.safe_load(cohort["protocol"].read_text(encoding="utf-8"))
    protocol["data"]["labels"] = str(cohort["labels"])
    if predictions is not None:
        protocol["model"] = {"name": "vendor model", "version": "1", "class_names": list(CLASSES)}
        protocol.pop("inputs", None)
        protocol["data"]["predictions"] = str(predictions)
    path = cohort["root"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False), encoding="utf-8")
    return path


def _flow(
    args: list[str], cohort: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> tuple[dict[str, Any], Path]:
    """Run the CLI; its cohort flow and run folder. The predictions file is warned of once."""
    reports = cohort["root"] / "reports"
    before = set(reports.iterdir()) if reports.exists() else set()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sitecal"), pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
        code = main(args)
    (folder,) = [p for p in set(reports.iterdir()) - before if p.is_dir() and not p.name.startswith(".")]
    evaluation = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    assert code == VERDICT_EXIT[evaluation["verdict"]]
    warned = [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]
    assert len(warned) == 1, warned  # read twice (the checks before the run, the run), warned of once
    # K + 1 NaN rows of studies, one of no study, and both rows of the key given twice
    assert f": {K + 4} of {len(_rows(cohort))} prediction rows" in warned[0]
    assert (folder / "run.log").read_text(encoding="utf-8").count(WARNING) == 1
    return evaluation["cohort_flow"], folder


def _expected_exclusions() -> Counter[tuple[str, str, str]]:
    return Counter(
        {
            ("scan", "not a DICOM file", "file"): 2,
            ("scan", "truncated file", "file"): 1,
            # no label: K, and the one without a label and a NaN row, and the one without either (once each)
            ("labels", "study has no label", "study"): K + 2,
            ("predictions", NAN, "study"): K,
            ("predictions", TWICE, "study"): 1,  # its first row stands for it ...
            ("predictions", TWICE, "prediction"): 1,  # ... and its second row is listed
            ("predictions", "study has no row in the predictions file", "study"): K,
            ("predictions", "prediction row matches no study", "prediction"): K,
            ("predictions", NAN, "prediction"): 1,  # the NaN row of no study
            ("labels", "label matches no study", "label"): 2,
        }
    )


def _check_flow(flow: dict[str, Any], cohort: dict[str, Any]) -> None:
    got = Counter({(e["stage"], e["reason"], e["unit"]): e["count"] for e in flow["exclusions"]})
    assert len(got) == len(flow["exclusions"])  # each (stage, reason, unit) once, with its count
    assert got == _expected_exclusions()
    excluded_studies = sum(n for (_, _, unit), n in got.items() if unit == "study")
    assert flow["files_found"] == cohort["manifest"].n_files == N_STUDIES + 3
    assert flow["studies"] == N_STUDIES
    # without a label: K + 2; joined to no usable row: K NaN, K without a row, the one given twice
    assert flow["analysed"] == N_STUDIES - (K + 2) - (2 * K + 1) == 48
    assert flow["analysed"] + excluded_studies == flow["studies"]
    # every file: a study's image, or excluded
    assert flow["files_found"] == flow["dicom_instances"] + sum(n for k, n in got.items() if k[2] == "file")
    # every label row: a study's (analysed, or excluded once), the truncated study's, or listed
    n_labels = len(cohort["labels"].read_text(encoding="utf-8").splitlines()) - 1
    joined_out = sum(n for (stage, _, unit), n in got.items() if stage == "predictions" and unit == "study")
    labelled_studies = flow["analysed"] + joined_out
    assert n_labels == labelled_studies + 1 + got["labels", "label matches no study", "label"]
    # every predictions row: a study's (analysed, excluded for it, or without a label), the truncated
    # study's, or listed
    n_rows = len(_rows(cohort))
    studies_with_rows = flow["analysed"] + K + 1 + (K + 1)  # NaN, given twice, no label (with a row)
    assert n_rows == studies_with_rows + 1 + sum(n for k, n in got.items() if k[2] == "prediction")


def test_a_vendor_file_joined_to_dicom_counts_each_study_once(
    cohort: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    predictions = cohort["root"] / "vendor.csv"
    _vendor_file(cohort, predictions)
    protocol = _protocol(cohort, "vendor", predictions)
    flow, folder = _flow(["run", str(protocol), "--no-progress"], cohort, caplog)
    _check_flow(flow, cohort)
    # rows are named by their line, studies by their pseudonym: no key in clear
    with (folder / "exclusions.csv").open(encoding="utf-8") as fh:
        listed = list(csv.DictReader(fh))
    assert len(listed) == sum(_expected_exclusions().values())
    written = (folder / "exclusions.csv").read_text(encoding="utf-8")
    assert not any(uid in written for uid in cohort["uids"])


def test_sitecal_s_own_file_joined_to_dicom_counts_each_study_once(
    cohort: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    predictions = cohort["root"] / "predictions.csv"
    _sitecal_file(cohort, predictions)
    protocol = _protocol(cohort, "pseudonymised", None)
    args = ["evaluate", str(protocol), "--predictions", str(predictions), "--no-progress"]
    flow, _ = _flow(args, cohort, caplog)
    _check_flow(flow, cohort)


def test_a_key_without_a_usable_row_is_kept_with_the_row_that_stands_for_it(tmp_path: Path) -> None:
    """Which row stands for a key whose rows are all unusable; the key's other unusable rows are listed."""
    path = tmp_path / "vendor.csv"
    rows = [
        "A,nan,0,0",  # line 2: A's NaN row; A has a usable row (line 3), so A is usable ...
        "A,1,2,3",
        "B,nan,0,0",  # line 4: B's first unusable row stands for it ...
        "B,0,inf,0",  # ... its second is listed
        "C,1,2,3",  # line 6: C given twice with other scores: its first row stands for it
        "C,1,2,4",
        "D,nan,0,0",  # line 8: listed (D is unusable for the duplicate, not for this row)
        "D,1,2,3",  # line 9: stands for D
        "D,1,2,5",
        "E,1,2,3",
    ]
    path.write_text("StudyInstanceUID," + ",".join(SCORE_COLUMNS) + "\n" + "\n".join(rows) + "\n")
    table = read_predictions(path, class_names=CLASSES, key_column="StudyInstanceUID")
    twice = TWICE.removeprefix("unusable prediction row: ")
    assert list(table.rows) == ["A", "E"]
    assert dict(table.unusable_keys) == {
        "B": (4, "not a finite number in column logit:normal"),
        "C": (6, twice),
        "D": (9, twice),
    }
    assert "unusable_keys" not in repr(table) and "'B'" not in repr(table)  # keys are never shown
    # studies B, C, D and E were found: the rows standing for B, C and D are theirs (A's study is not)
    listed = [(e.key, e.reason) for e in prediction_row_exclusions(table, {"B", "C", "D", "E"})]
    assert listed == [
        ("line 2", NAN),
        ("line 5", "unusable prediction row: not a finite number in column logit:nodule"),
        ("line 7", TWICE),
        ("line 8", NAN),
        ("line 10", TWICE),
        ("line 3", "prediction row matches no study"),
    ]
