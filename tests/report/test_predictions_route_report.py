"""The report of a run whose model was not run here: its outputs were read from a predictions file.

The documents are the report fixtures with what such a run stores added (issue 14, item 4):
``provenance.json`` → ``predictions_file`` and ``sha256.predictions_file``, no device, transforms or logit
cache record, a model of name and version only; ``evaluation.json`` → ``cohort_flow`` with
``source: predictions_file`` when no DICOM folder was read, and exclusions of stage ``predictions``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sitecal.report import ReportArtifacts, ReportInputs, render_report
from sitecal.report.flow_figure import _excluded_text, flow_steps

PREDICTIONS_SHA = "73b288681ac1" + "0" * 52
UNUSABLE = "unusable prediction row: probabilities sum to 1.2, not 1 (tolerance 0.001)"
NO_ROW = "study has no row in the predictions file"
READ_FROM_FILE = "The model was not run by sitecal: its outputs were read from a predictions file"
# statements only a report of this route makes
ROUTE_ONLY = (
    "not run by sitecal",
    "not run here",
    "predictions file",
    "Model outputs",
    "softmax(log p / T)",
    "its own patient",
    "Rows in the predictions file",
    "pseudonymised on read",
)


def squash(text: str) -> str:
    return " ".join(text.split())


def _lean(raw: dict[str, Any]) -> dict[str, Any]:
    """The fixtures without reliability curves (fewer figures, faster), as a run of this route stores."""
    parts = copy.deepcopy(raw)
    ev = parts["evaluation"]
    for group in [ev["overall"], *[g for gs in ev["subgroups"].values() for g in gs]]:
        group.pop("reliability", None)
    prov = parts["provenance"]
    prov["model"] = {"name": prov["model"]["name"]}  # name and version only: no file, format or code
    prov["transforms_sha256"] = None
    prov["device"] = None
    prov.pop("logits", None)
    prov["sha256"]["predictions_file"] = PREDICTIONS_SHA
    parts["protocol"]["image_selection"] = "One image per study (by lowest InstanceNumber)."
    for exclusion in ev["cohort_flow"]["exclusions"]:
        if exclusion["reason"] == "label matches no study":
            exclusion["unit"] = "label"
    return parts


def _render(parts: dict[str, Any], out: Path) -> ReportArtifacts:
    inputs = ReportInputs(parts["evaluation"], parts["calibration"], parts["provenance"], parts["protocol"])
    return render_report(inputs, out)


@pytest.fixture(scope="module")
def without_dicom(raw: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Vendor probabilities by StudyInstanceUID, labels in the file, no patient column, no DICOM, no model."""
    parts = _lean(raw)
    prov = parts["provenance"]
    for key in ("model", "labels", "instances"):
        prov["sha256"].pop(key, None)
    prov["predictions_file"] = {
        "model_run_here": False,
        "rows": 2010,
        "usable_rows": 2000,
        "scores": "probabilities",
        "key": "StudyInstanceUID",
        "patients": "one per study",
        "labels": "predictions file",
        "subgroups_from": ["predictions file columns"],
        "dicom_joined": False,
        "probability_floor": 1e-12,
        "sum_tolerance": 0.001,
    }
    flow = parts["evaluation"]["cohort_flow"]
    flow.pop("sources", None)
    flow |= {
        "source": "predictions_file",
        "files_found": 0,
        "dicom_instances": 0,
        "studies": 2000,
        "exclusions": [
            {"stage": "predictions", "reason": UNUSABLE, "unit": "prediction", "count": 10},
            {"stage": "labels", "reason": "study has no label", "unit": "study", "count": 1},
        ],
    }
    parts["calibration"]["model_sha256"] = None
    return parts


@pytest.fixture(scope="module")
def with_dicom(raw: dict[str, Any]) -> dict[str, Any]:
    """Logits keyed by sitecal's pseudonyms (sitecal predict), joined to DICOM; a model file named."""
    parts = _lean(raw)
    parts["provenance"]["predictions_file"] = {
        "model_run_here": False,
        "rows": 2000,
        "usable_rows": 2000,
        "scores": "logits",
        "key": "sitecal study pseudonym",
        "patients": "DICOM PatientID",
        "labels": "labels file",
        "subgroups_from": ["DICOM headers"],
        "dicom_joined": True,
    }
    parts["evaluation"]["cohort_flow"]["exclusions"] += [
        {"stage": "predictions", "reason": NO_ROW, "unit": "study", "count": 1},
        {
            "stage": "predictions",
            "reason": "prediction row matches no study",
            "unit": "prediction",
            "count": 2,
        },
    ]
    return parts


@pytest.fixture(scope="module")
def text_without_dicom(
    without_dicom: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    poppler_text: Callable[[Path], str],
) -> str:
    return squash(poppler_text(_render(without_dicom, tmp_path_factory.mktemp("no-dicom")).pdf))


@pytest.fixture(scope="module")
def text_with_dicom(
    with_dicom: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, poppler_text: Callable[[Path], str]
) -> str:
    return squash(poppler_text(_render(with_dicom, tmp_path_factory.mktemp("dicom")).pdf))


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


def test_cover_says_the_model_was_not_run_here(text_without_dicom: str, text_with_dicom: str) -> None:
    cover = text_without_dicom[: text_without_dicom.index("Acceptance criteria at a glance")]
    assert (
        f"{READ_FROM_FILE} (sha256 73b288681ac1), given as probabilities, keyed by StudyInstanceUID "
        "(pseudonymised on read; no key is shown)."
    ) in cover
    assert "Model sha256 not run here" in cover
    assert "Site(s) no DICOM folder was read" in cover
    cover = text_with_dicom[: text_with_dicom.index("Acceptance criteria at a glance")]
    assert (
        f"{READ_FROM_FILE} (sha256 73b288681ac1), given as logits, keyed by sitecal's own study pseudonyms "
        "(a file written by sitecal predict; no key is shown)."
    ) in cover
    # a model file the protocol named: its sha256, and that it was not run
    assert "Model sha256 9372c470eead (model file named by the protocol; not run here)" in cover


def test_methods_say_how_probabilities_are_calibrated_and_who_the_patients_are(
    text_without_dicom: str,
) -> None:
    methods = _between(text_without_dicom, "Methods Model", "Fitted temperatures")
    assert f"{READ_FROM_FILE} (sha256 73b288681ac1)" in methods
    assert "The file has 2,010 rows, 2,000 of them usable." in methods
    assert "the temperature acts on their logarithms" in methods
    assert "= softmax(log p / T), which gives back p at T = 1" in methods
    assert "each probability is floored at 1e-12 (0 has no logarithm)" in methods
    assert "probabilities must sum to 1 within 0.001" in methods
    assert (
        "The predictions file names no patient, so each study is treated as its own patient: the "
        "patient-level split and the bootstrap intervals assume independent studies"
    ) in methods
    assert "Ground-truth labels come from the label column of the predictions file itself." in methods
    assert "Subgroup attributes are read from predictions file columns." in methods
    assert "Images analysed" not in methods  # no image was read
    assert "MONAI transforms" not in methods


def test_methods_of_logits_joined_to_dicom(text_with_dicom: str) -> None:
    methods = _between(text_with_dicom, "Methods Model", "Fitted temperatures")
    assert "the model's logits, as the predictions file gives them, are divided by a temperature" in methods
    assert "softmax(log p / T)" not in methods
    assert "Its rows are joined to the studies of the DICOM folder." in methods
    assert "Patients are read from the PatientID of each study's DICOM headers" in methods
    assert "Ground-truth labels come from the labels file" in methods
    assert "Images analysed" in methods


def test_limitations_carry_the_independence_caveat(text_without_dicom: str, text_with_dicom: str) -> None:
    limitations = _between(text_without_dicom, "Limitations Each point", "Highest-confidence errors")
    assert "Model outputs as given." in limitations
    assert "probabilities in [0, 1] that sum to 1" in limitations
    assert (
        "Each study its own patient. The predictions file names no patient, so each study was treated as "
        "its own patient: the split and the intervals assume independent studies."
    ) in limitations
    assert "11 exclusion records against 2,010 rows in the predictions file (0.5%)" in limitations
    assert "its own patient" not in text_with_dicom  # patients came from the DICOM headers


def test_data_flow_starts_at_the_rows_of_the_file(text_without_dicom: str) -> None:
    data = _between(text_without_dicom, "Data 2.1 Sources", "Cohort characteristics")
    assert (
        "no DICOM folder was read, so their sites, scanners, modalities and study dates are not known" in data
    )
    assert "Flow from the rows of the predictions file to the studies analysed" in data
    assert (
        "Rows in the predictions file 2,010 Usable rows (one study each) 2,000 Studies with a label 1,999"
        in data
    )
    assert "Files found" not in data and "Instances." not in data
    assert "(2,010 rows in the predictions file)" in data
    assert f"Predictions {UNUSABLE} 10" in data


def test_data_flow_joined_to_dicom_lists_the_prediction_exclusions(text_with_dicom: str) -> None:
    data = _between(text_with_dicom, "Data 2.1 Sources", "Cohort characteristics")
    assert "Files found 2,003" in data
    assert "Studies with a label and a prediction 1,999" in data
    assert "joined to its row by its sitecal study pseudonym" in data
    assert f"Predictions {NO_ROW} 1" in data
    assert "Predictions prediction row matches no study 2" in data


def test_prediction_rows_remove_no_study_in_the_flow_figure(with_dicom: dict[str, Any]) -> None:
    flow = with_dicom["evaluation"]["cohort_flow"]
    steps = flow_steps(flow, predictions_file=True)
    assert steps[-2].label == "Studies with a label and a prediction"
    side = _excluded_text(flow["exclusions"], steps[-2].excluded_stage or "")
    assert side == (
        "Excluded: 2\n"
        "• 1  study has no label\n"
        "• 1  study has no row in the predictions file\n"
        "Label rows without a study (no study removed): 1\n"
        "• 1  label matches no study\n"
        "Predictions file rows not used (no study removed): 2\n"
        "• 2  prediction row matches no study"
    )
    rows_only = [e for e in flow["exclusions"] if e.get("unit") == "prediction"]
    assert _excluded_text(rows_only, "predictions") == (
        "Predictions file rows not used (no study removed): 2\n• 2  prediction row matches no study"
    )


def test_flow_without_dicom_starts_at_the_rows(without_dicom: dict[str, Any]) -> None:
    flow = without_dicom["evaluation"]["cohort_flow"]
    steps = flow_steps(flow, predictions_rows=2010, predictions_file=True)
    assert [(s.label, s.count, s.excluded_stage) for s in steps] == [
        ("Rows in the predictions file", 2010, None),
        ("Usable rows (one study each)", 2000, "predictions"),
        ("Studies with a label", 1999, "labels"),
        ("Studies analysed", 1999, "inference"),
    ]


def test_provenance_names_the_file_and_what_was_not_run(
    text_without_dicom: str, text_with_dicom: str
) -> None:
    section = _between(text_without_dicom, "Provenance What produced", "Sign-off")
    assert "Device none: the model was not run here" in section
    assert "Model cxr-triage-densenet121 v2.3 · not run here" in section
    assert f"Model outputs {READ_FROM_FILE} (sha256 73b288681ac1)" in section
    assert "Transforms sha256 none: the model was not run here" in section
    assert (
        f"Model file not run here Predictions file (the model's outputs, as read) {PREDICTIONS_SHA}"
        in section
    )
    assert "none: no DICOM folder was read" in section
    assert "Labels (ground-truth table) none: the labels are a column of the predictions file" in section
    assert "sort the lines bytewise" not in section  # no manifest to recompute
    section = _between(text_with_dicom, "Provenance What produced", "Sign-off")
    assert "Model file (named by the protocol; not run here)" in section
    assert "sort the lines bytewise" in section


def test_crosswalk_points_at_the_methods_for_how_predictions_were_made(text_without_dicom: str) -> None:
    crosswalk = text_without_dicom[text_without_dicom.index("Reporting-guideline crosswalk Where") :]
    assert (
        "How the predictions were calculated 4 Methods; by the site: how the images were prepared and the "
        "predictions computed, from whoever produced the file"
    ) in crosswalk


def test_a_model_run_report_says_none_of_it(text: str) -> None:
    flat = squash(text)
    for phrase in ROUTE_ONLY:
        assert phrase not in flat, phrase
    assert "How the predictions were calculated 11 Provenance" in flat
