"""One series per study for volumes: the protocol's rules, the stated tie-break, an exclusion for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.series_files import write_series

from sitecal._pseudonym import Pseudonymizer
from sitecal.cohort import LabelTable, build_cohort, scan_folder
from sitecal.cohort.scan import InstanceHeader
from sitecal.cohort.series import SERIES_TIE_BREAK, select_series
from sitecal.protocol import SeriesRules

ROOT = Path("/data")


def _series(study: str, series: str, n: int, **values: str) -> list[InstanceHeader]:
    return [
        InstanceHeader(
            path=ROOT / study / series / f"{k:03d}.dcm",
            values={
                "SOPInstanceUID": f"{study}.{series}.{k}",
                "StudyInstanceUID": study,
                "SeriesInstanceUID": f"{study}.{series}",
                "Modality": "CT",
                "SeriesDescription": "Thorax 3.0 B31f",
                "BodyPartExamined": "CHEST",
                **values,
            },
        )
        for k in range(n)
    ]


def test_each_rule_names_the_reason_a_series_was_passed_over() -> None:
    rules = SeriesRules(modality=["CT"], series_description="(?i)thorax", body_part=["chest"], min_slices=10)
    instances = [
        *_series("1.1", "1", 2, SeriesDescription="Topogram 0.6 T20"),
        *_series("1.1", "2", 20),
        *_series("1.1", "3", 30, Modality="PT"),
        *_series("1.1", "4", 30, BodyPartExamined="ABDOMEN"),
        *_series("1.1", "5", 9),
    ]
    (choice,) = select_series(instances, rules)
    assert choice.chosen is not None and {i.values["SeriesInstanceUID"] for i in choice.chosen} == {"1.1.2"}
    reasons = {group[0].values["SeriesInstanceUID"]: reason for group, reason in choice.passed_over}
    assert reasons == {
        "1.1.1": "series not selected: SeriesDescription does not match data.series.series_description",
        "1.1.3": "series not selected: Modality PT is not one of ['CT']",
        "1.1.4": "series not selected: BodyPartExamined ABDOMEN is not one of ['chest']",
        "1.1.5": "series not selected: 9 slices, fewer than min_slices 10",
    }


def test_tie_break_most_slices_then_series_number_then_uid() -> None:
    rules = SeriesRules(min_slices=1)
    more = select_series(
        [*_series("2", "a", 20, SeriesNumber="1"), *_series("2", "b", 24, SeriesNumber="9")], rules
    )
    assert more[0].chosen[0].values["SeriesInstanceUID"] == "2.b"  # type: ignore[index]
    numbered = select_series(
        [*_series("3", "a", 20, SeriesNumber="7"), *_series("3", "b", 20, SeriesNumber="3")], rules
    )
    assert numbered[0].chosen[0].values["SeriesInstanceUID"] == "3.b"  # type: ignore[index]
    by_uid = select_series([*_series("4", "10", 20), *_series("4", "9", 20)], rules)
    assert by_uid[0].chosen[0].values["SeriesInstanceUID"] == "4.9"  # type: ignore[index]
    ((_, reason),) = by_uid[0].passed_over
    assert SERIES_TIE_BREAK in reason


def test_a_multiframe_instance_counts_its_frames() -> None:
    (choice,) = select_series(_series("5", "mf", 1, NumberOfFrames="40"), SeriesRules(min_slices=30))
    assert choice.chosen is not None


def test_invalid_pattern_is_a_protocol_error() -> None:
    with pytest.raises(ValueError, match="not a regular expression"):
        SeriesRules(series_description="(unclosed")


@pytest.mark.parametrize("key", ["StudyInstanceUID", "AccessionNumber"])
def test_cohort_from_files_one_volume_per_study_and_every_other_series_accounted(
    tmp_path: Path, key: str
) -> None:
    root = tmp_path / "dicom"
    ok_study, short_study = "1.2.826.0.1.3680043.8.498.11", "1.2.826.0.1.3680043.8.498.12"
    extra = {"AccessionNumber": "ACC11"}
    chosen = write_series(
        root / "a" / "axial", [0, 2.5, 5, 7.5], study_uid=ok_study, extra=extra, file_order=[1, 3, 0, 2]
    )
    write_series(
        root / "a" / "scout", [0], study_uid=ok_study, description="Topogram", series_number=1, extra=extra
    )
    write_series(root / "b" / "axial", [0, 2.5], study_uid=short_study, extra={"AccessionNumber": "ACC12"})
    scan = scan_folder(root, workers=1)
    labels = {ok_study: 1, short_study: 0} if key == "StudyInstanceUID" else {"ACC11": 1, "ACC12": 0}
    cohort = build_cohort(
        scan,
        LabelTable(labels=labels, bad_rows=(), n_rows=2),
        subgroups={},
        key=key,
        pseudonymize=Pseudonymizer(b"k" * 32),
        series=SeriesRules(series_description="Thorax", min_slices=3),
    )
    (study,) = cohort.studies
    assert set(study.files) == set(chosen) and len(study.instance_uids) == 4
    assert study.relative_path == Pseudonymizer(b"k" * 32).path(Path("a/axial"))
    reasons = sorted((e.stage, e.reason, str(e.path)) for e in cohort.exclusions)
    assert reasons == [
        ("series", "series not selected: 2 slices, fewer than min_slices 3", "b/axial"),
        (
            "series",
            "series not selected: SeriesDescription does not match data.series.series_description",
            "a/scout/IM0000.dcm",
        ),
        ("series", "study has no series that meets data.series", "None"),
    ]
    assert cohort.n_studies_found == 2  # the label of the short study is not also "label matches no study"
