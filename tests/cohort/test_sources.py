"""Sources of the analysed studies (sites, scanners, modalities, months) and the series counts of the flow."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.series_files import write_series

from sitecal._pseudonym import Pseudonymizer
from sitecal.cohort import build_cohort, scan_folder
from sitecal.cohort.labels import LabelTable
from sitecal.cohort.sources import source_values, study_month, summarise_sources
from sitecal.protocol import SeriesRules


@pytest.mark.parametrize(
    ("value", "month"),
    [
        ("20250314", "2025-03"),
        (" 19991231 ", "1999-12"),
        ("20251301", "unknown"),  # month 13
        ("2025-03-14", "unknown"),  # not a DA value
        ("", "unknown"),
        (None, "unknown"),
    ],
)
def test_study_month_keeps_the_month_only(value: str | None, month: str) -> None:
    assert study_month(value) == month


def test_source_values_normalise_vendor_and_join_model() -> None:
    values = {
        "InstitutionName": "  St.  Mary's ",
        "Manufacturer": "SIEMENS",
        "ManufacturerModelName": "Ysio",
        "Modality": "DX",
        "StudyDate": "20250701",
    }
    assert source_values(values) == {
        "site": "St. Mary's",
        "scanner": "Siemens Ysio",
        "modality": "DX",
        "month": "2025-07",
    }
    # a model name that already names the vendor is not prefixed twice; missing parts are unknown
    assert (
        source_values({"Manufacturer": "Siemens Healthineers", "ManufacturerModelName": "Siemens Ysio"})[
            "scanner"
        ]
        == "Siemens Ysio"
    )
    assert source_values({"ManufacturerModelName": "Ysio"})["scanner"] == "Ysio"
    assert source_values({}) == {
        "site": "unknown",
        "scanner": "unknown",
        "modality": "unknown",
        "month": "unknown",
    }


def test_summary_counts_most_frequent_first_unknown_last_and_month_range() -> None:
    rows = [
        {"site": "B", "scanner": "X", "modality": "CT", "month": "2025-02"},
        {"site": "unknown", "scanner": "X", "modality": "CT", "month": "unknown"},
        {"site": "A", "scanner": "Y", "modality": "CT", "month": "2024-11"},
        {"site": "B", "scanner": "Y", "modality": "MR", "month": "2025-06"},
        {"site": "A", "scanner": "X", "modality": "CT", "month": "2025-01"},
    ]
    summary = summarise_sources(rows)
    assert summary["sites"] == [
        {"value": "A", "count": 2},
        {"value": "B", "count": 2},
        {"value": "unknown", "count": 1},
    ]
    assert summary["scanners"] == [{"value": "X", "count": 3}, {"value": "Y", "count": 2}]
    assert summary["modalities"] == [{"value": "CT", "count": 4}, {"value": "MR", "count": 1}]
    assert summary["months"] == {"first": "2024-11", "last": "2025-06", "unknown": 1}
    assert summarise_sources([])["months"] == {"first": None, "last": None, "unknown": 0}


def test_cohort_counts_series_and_carries_each_studys_sources_and_series_key(tmp_path: Path) -> None:
    root = tmp_path / "dicom"
    study_a, study_b = "1.2.826.0.1.3680043.8.498.21", "1.2.826.0.1.3680043.8.498.22"
    header = {"InstitutionName": "General", "Manufacturer": "GE MEDICAL SYSTEMS", "StudyDate": "20250402"}
    write_series(root / "a" / "axial", [0, 2.5, 5], study_uid=study_a, extra=header)
    write_series(
        root / "a" / "scout", [0], study_uid=study_a, description="Topogram", series_number=1, extra=header
    )
    write_series(root / "b" / "axial", [0, 2.5, 5, 7.5], study_uid=study_b, extra={"StudyDate": "20241230"})
    write_series(root / "b" / "lung", [0, 2.5, 5], study_uid=study_b, series_number=3)
    cohort = build_cohort(
        scan_folder(root, workers=1),
        LabelTable(labels={study_a: 0, study_b: 1}, bad_rows=(), n_rows=2),
        subgroups={},
        key="StudyInstanceUID",
        pseudonymize=Pseudonymizer(b"k" * 32),
        series=SeriesRules(series_description="Thorax", min_slices=2),
    )
    assert (cohort.n_series_found, cohort.n_series_selected) == (4, 2)
    sources = sorted((s.sources["site"], s.sources["scanner"], s.sources["month"]) for s in cohort.studies)
    assert sources == [("General", "GE", "2025-04"), ("unknown", "unknown", "2024-12")]
    # the chosen series and every series set aside are named by a pseudonymised SeriesInstanceUID
    chosen = {s.series_key for s in cohort.studies}
    passed = {e.series_key for e in cohort.exclusions if e.stage == "series"}
    assert len(chosen) == 2 and len(passed) == 2 and not chosen & passed
    assert all(k and k.startswith("R") and "1.2.826" not in k for k in chosen | passed)
    assert sorted(s.series_number for s in cohort.studies) == ["2", "2"]
