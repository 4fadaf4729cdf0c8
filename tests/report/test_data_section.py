"""The Data section: sources, eligibility, the flow diagram's steps and side boxes, flow and exclusions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.report.sections import render_section

from sitecal.report._data import data_section
from sitecal.report.flow_figure import _excluded_text, flow_steps

SHORT = "series not selected: 2 slices, fewer than min_slices 3"
NO_SERIES = "study has no series that meets data.series"
HOSTILE = '<b>St. Mary\'s & "Ünïcødé" <font color=red>'


@pytest.fixture
def evaluation() -> dict[str, Any]:
    return {
        "class_names": ["normal", "nodule"],
        "cohort_flow": {
            "files_found": 130,
            "dicom_instances": 127,
            "series_found": 40,
            "series_selected": 24,
            "studies": 25,
            "labelled": 23,
            "analysed": 22,
            "fit": 10,
            "evaluation": 12,
            "exclusions": [
                {"stage": "scan", "reason": "not a DICOM file", "unit": "file", "count": 3},
                {"stage": "series", "reason": SHORT, "unit": "series", "count": 15},
                {"stage": "series", "reason": NO_SERIES, "unit": "study", "count": 1},
                {"stage": "labels", "reason": "study has no label", "unit": "study", "count": 1},
                {"stage": "labels", "reason": "label matches no study", "unit": "label", "count": 4},
                {
                    "stage": "inference",
                    "reason": "image could not be read: bad slice spacing",
                    "unit": "study",
                    "count": 1,
                },
            ],
            "sources": {
                "sites": [{"value": HOSTILE, "count": 15}, {"value": "unknown", "count": 7}],
                "scanners": [{"value": "Siemens SOMATOM", "count": 22}],
                "modalities": [{"value": "CT", "count": 22}],
                "months": {"first": "2024-11", "last": "2025-06", "unknown": 2},
            },
        },
        "split": {"n_fit": 10, "n_evaluation": 12, "patients_fit": 9, "patients_evaluation": 11},
    }


def test_volume_flow_has_a_series_step_and_exclusions_beside_the_step_they_precede(evaluation: dict) -> None:
    flow = evaluation["cohort_flow"]
    steps = flow_steps(flow)
    assert [(s.label, s.count, s.excluded_stage) for s in steps] == [
        ("Files found", 130, "retrieve"),  # studies a PACS could not send, beside the first arrow
        ("DICOM image instances", 127, "scan"),
        ("Studies", 25, None),
        ("Series selected (one per study)", "24 of 40", "series"),
        ("Studies with a label", 23, "labels"),
        ("Studies analysed", 22, "inference"),
    ]
    series = _excluded_text(flow["exclusions"], "series")
    assert series is not None
    lines = series.splitlines()  # series and studies are counted apart, each with its reasons
    assert lines[0] == "Series not selected: 15" and lines[1].startswith("• 15  series not selected")
    assert lines[-2:] == ["Studies excluded: 1", "• 1  study has no series that meets data.series"]
    labels = _excluded_text(flow["exclusions"], "labels")
    # the label rows naming no study remove no study: not in the excluded count
    assert labels == (
        "Excluded: 1\n• 1  study has no label\n"
        "Label rows without a study (no study removed): 4\n• 4  label matches no study"
    )
    assert _excluded_text(flow["exclusions"], "studies") is None


def test_image_flow_has_one_image_per_study(evaluation: dict) -> None:
    flow = {k: v for k, v in evaluation["cohort_flow"].items() if not k.startswith("series_")}
    labels = [s.label for s in flow_steps(flow)]
    assert labels[2] == "Studies (one image each)" and len(labels) == 5


def test_section_text(tmp_path: Path, evaluation: dict) -> None:
    protocol = {
        "name": "t",
        "image_selection": "One series per study, read as a volume.",
        "eligibility": {"key": "AccessionNumber", "key_column": "acc", "labels_file": "labels.csv"},
    }
    text = " ".join(render_section(tmp_path, data_section, evaluation, protocol=protocol).split())
    for heading in ("1 Data", "1.1 Sources", "1.2 Eligibility", "1.3 Flow"):
        assert heading in text
    assert "The 22 studies analysed come from 2 sites, 1 scanner model, 1 modality" in text
    assert "Study dates run from 2024-11 to 2025-06 (month precision: no day is reported); 2 studies" in text
    assert f"Site (InstitutionName) {HOSTILE} 15 unknown 7" in text
    assert "Scanner (Manufacturer, model) Siemens SOMATOM 22" in text
    assert "joined by AccessionNumber to the column acc of labels.csv" in text
    assert "one of the model's classes (normal, nodule)" in text
    assert "Images. One series per study, read as a volume." in text
    assert "Studies 25 Series selected (one per study) 24 of 40 Studies with a label 23" in text
    assert "of which fit split 10 (9 patients) of which evaluation split 12 (11 patients)" in text
    assert "Series series not selected: 2 slices, fewer than min_slices 3 15" in text
    assert "(130 files found)" in text
    assert (tmp_path / "figures" / "flow.png").stat().st_size > 0
    assert (tmp_path / "figures" / "flow.svg").stat().st_size > 0


def test_section_of_an_older_run_without_sources(tmp_path: Path, evaluation: dict) -> None:
    del evaluation["cohort_flow"]["sources"]
    text = " ".join(render_section(tmp_path, data_section, evaluation).split())
    assert "Sources of the studies: not recorded in this run's evaluation.json." in text
    assert "1.3 Flow" in text


@pytest.mark.parametrize(("failed", "again"), [(0, 0), (2, 3)])
def test_the_retrieval_paragraph_says_what_failed_and_what_was_asked_again(
    tmp_path: Path, failed: int, again: int
) -> None:
    from sitecal.report._data import _retrieval

    pacs = {
        "route": "dicomweb",
        "service": "https://pacs.example/dicom-web",
        "query": {"modalities": ["DX", "CR"]},
        "studies_found": 40,
        "studies_retrieved_now": 38 - failed,
        "studies_from_store": 2,
        "studies_failed": failed,
        "studies_asked_again": again,
        "objects_sha256": "ab" * 32,
    }
    text = " ".join(render_section(tmp_path, _retrieval, {}, provenance={"pacs": pacs}).split())
    assert "retrieved by DICOMweb (QIDO-RS, WADO-RS) from the PACS https://pacs.example/dicom-web" in text
    assert "(modalities DX, CR). It matched 40 studies:" in text
    if failed:
        assert (
            "2 could not be retrieved and are listed as exclusions at the retrieve stage (3 asked again"
            in text
        )
    else:
        assert "from the local store of an earlier retrieval; none failed. The objects" in text
        assert "asked again" not in text
