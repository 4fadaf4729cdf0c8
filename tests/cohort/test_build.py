from __future__ import annotations

from pathlib import Path

import pytest

from sitecal._pseudonym import Pseudonymizer
from sitecal.cohort import UNKNOWN, LabelTable, ScanResult, build_cohort
from sitecal.cohort.mapping import UNMAPPED, ValueMapping
from sitecal.cohort.scan import InstanceHeader
from sitecal.protocol import SubgroupSettings

PSEUDONYMIZE = Pseudonymizer(b"k" * 32)
ROOT = Path("/dicom")


def _scan(*studies: dict[str, str]) -> ScanResult:
    instances = tuple(
        InstanceHeader(
            path=ROOT / f"{i}.dcm",
            values={"SOPInstanceUID": f"9.{i}", "StudyInstanceUID": f"1.{i}", "PatientID": f"p{i}", **values},
        )
        for i, values in enumerate(studies)
    )
    return ScanResult(root=ROOT, files_found=len(instances), instances=instances, exclusions=())


def _labels(labels: dict[str, int], bad_rows: tuple[tuple[int, str], ...] = ()) -> LabelTable:
    return LabelTable(labels=labels, bad_rows=bad_rows, n_rows=len(labels) + len(bad_rows))


def test_studies_without_labels_and_labels_without_studies_are_both_counted() -> None:
    scan = _scan({}, {}, {}, {})  # studies 1.0 .. 1.3
    labels = _labels({"1.0": 0, "1.1": 1, "8.8": 0, "8.9": 1, "8.7": 2}, bad_rows=((7, "empty key"),))
    cohort = build_cohort(scan, labels, subgroups={}, key="StudyInstanceUID", pseudonymize=PSEUDONYMIZE)
    assert cohort.n_studies_found == 4
    assert cohort.n_labelled == 2
    counts = {(c["stage"], c["reason"]): c["count"] for c in cohort.exclusion_counts()}
    assert counts == {
        ("labels", "study has no label"): 2,
        ("labels", "label matches no study"): 3,
        ("labels", "unusable label row: empty key"): 1,
    }
    unmatched = [e.key for e in cohort.exclusions if e.reason == "label matches no study"]
    assert unmatched == [PSEUDONYMIZE("study", k) for k in ("8.7", "8.8", "8.9")]


def test_parquet_bad_rows_are_located_by_row() -> None:
    labels = LabelTable(labels={"1.0": 0}, bad_rows=((3, "empty key"),), n_rows=2, numbered_by="row")
    cohort = build_cohort(_scan({}), labels, subgroups={}, key="StudyInstanceUID", pseudonymize=PSEUDONYMIZE)
    assert [e.key for e in cohort.exclusions] == ["row 3"]


def _attributes(
    subgroups: dict[str, SubgroupSettings], mappings: dict[str, ValueMapping], *studies: dict
) -> list:
    scan = _scan(*studies)
    labels = _labels({f"1.{i}": 0 for i in range(len(studies))})
    cohort = build_cohort(
        scan,
        labels,
        subgroups=subgroups,
        mappings=mappings,
        key="StudyInstanceUID",
        pseudonymize=PSEUDONYMIZE,
        min_count_shown=1,  # these tests are about values; small groups are pooled in the tests below
    )
    assert cohort.attributes == tuple(subgroups)
    return [s.attributes for s in cohort.studies]


def test_mapping_applies_after_normalisation() -> None:
    subgroups = {
        "site": SubgroupSettings(tag="StationName", mapping="stations.csv"),
        "vendor": SubgroupSettings(tag="Manufacturer", mapping="vendors.csv"),
    }
    mappings = {
        "site": ValueMapping(path=Path("stations.csv"), groups={"CT01-ER": "Emergency", "CT02": "Radiology"}),
        "vendor": ValueMapping(path=Path("vendors.csv"), groups={"Siemens": "Vendor A"}),
    }
    assert _attributes(
        subgroups,
        mappings,
        {"StationName": "  ct01-er ", "Manufacturer": "SIEMENS HEALTHINEERS"},
        {"StationName": "CT02", "Manufacturer": "Philips Medical Systems"},
        {"StationName": "CT99"},
    ) == [
        {"site": "Emergency", "vendor": "Vendor A"},
        {"site": "Radiology", "vendor": UNMAPPED},
        {"site": UNMAPPED, "vendor": UNKNOWN},
    ]


def test_intersections_follow_protocol_order_and_unknown_wins() -> None:
    subgroups = {
        "sex_age": SubgroupSettings(intersection=["sex", "age"], label="Sex × age"),
        "sex": SubgroupSettings(tag="PatientSex"),
        "age": SubgroupSettings(tag="PatientAge", bands=[0, 40, 60, 200]),
        "site": SubgroupSettings(tag="StationName", mapping="stations.csv"),
        "site_sex": SubgroupSettings(intersection=["site", "sex"]),
    }
    mappings = {"site": ValueMapping(path=Path("stations.csv"), groups={"CT01": "Emergency"})}
    rows = _attributes(
        subgroups,
        mappings,
        {"PatientSex": "F", "PatientAge": "045Y", "StationName": "CT01"},
        {"PatientSex": "M", "PatientAge": "abc", "StationName": "CT02"},
        {"PatientAge": "070Y"},
    )
    assert rows == [
        {
            "sex_age": "F × 40–59",
            "sex": "F",
            "age": "40–59",
            "site": "Emergency",
            "site_sex": "Emergency × F",
        },
        {"sex_age": UNKNOWN, "sex": "M", "age": UNKNOWN, "site": UNMAPPED, "site_sex": "unmapped × M"},
        {"sex_age": UNKNOWN, "sex": UNKNOWN, "age": "60+", "site": UNKNOWN, "site_sex": UNKNOWN},
    ]
    assert list(rows[0]) == list(subgroups)


def test_a_declared_mapping_must_be_given() -> None:
    subgroups = {"site": SubgroupSettings(tag="StationName", mapping="stations.csv")}
    with pytest.raises(ValueError, match=r"subgroup 'site' declares mapping 'stations.csv': read it with"):
        build_cohort(
            _scan({}),
            _labels({"1.0": 0}),
            subgroups=subgroups,
            key="StudyInstanceUID",
            pseudonymize=PSEUDONYMIZE,
        )
