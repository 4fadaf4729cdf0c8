from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sitecal.cohort.labels import read_labels
from sitecal.errors import DataError

CLASSES = ["normal", "nodule", "effusion"]


def test_names_and_indices_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(
        "\ufeffStudyInstanceUID,label\n1.2.3,normal\n1.2.4,2\n,nodule\n1.2.5,cat\n1.2.6,normal\n1.2.6,nodule\n"
    )
    table = read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)
    assert table.labels == {"1.2.3": 0, "1.2.4": 2}
    assert table.n_rows == 6
    assert table.bad_rows == (
        (4, "empty StudyInstanceUID"),
        (5, "label is not one of the class names [normal, nodule, effusion] or an index 0..2"),
        (7, "key labelled twice with different labels"),
    )


def test_missing_column_names_it_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("uid,label\n1.2.3,normal\n")
    with pytest.raises(
        DataError,
        match=r"no column 'StudyInstanceUID' \(columns: uid, label; delimiter ','\). Set data.key_column",
    ):
        read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"labels file not found. Check data.labels"):
        read_labels(tmp_path / "x.csv", key_column="k", label_column="label", class_names=CLASSES)


def _parquet(path: Path, columns: dict[str, list[object]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path


def test_parquet_names_indices_and_bad_rows_by_row_number(tmp_path: Path) -> None:
    path = _parquet(
        tmp_path / "labels.parquet",
        {
            "StudyInstanceUID": ["1.2.3", "1.2.4", None, "1.2.5", "1.2.6", "1.2.6", " 1.2.7 "],
            "label": ["normal", "2", "nodule", "cat", "normal", "nodule", " effusion "],
        },
    )
    table = read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)
    assert table.labels == {"1.2.3": 0, "1.2.4": 2, "1.2.7": 2}
    assert table.n_rows == 7
    assert table.numbered_by == "row"
    assert table.bad_rows == (
        (3, "empty StudyInstanceUID"),
        (4, "label is not one of the class names [normal, nodule, effusion] or an index 0..2"),
        (6, "key labelled twice with different labels"),
    )


def test_parquet_integer_labels_and_keys(tmp_path: Path) -> None:
    # accession numbers stored as integers, labels as class indices (floats where a null forced the type)
    path = _parquet(
        tmp_path / "labels.parquet",
        {"AccessionNumber": [1001, 1002, 1003, 1004], "label": [0.0, 1.0, None, 3.0]},
    )
    table = read_labels(path, key_column="AccessionNumber", label_column="label", class_names=CLASSES)
    assert table.labels == {"1001": 0, "1002": 1}
    assert table.bad_rows == (
        (3, "empty label"),
        (4, "label is not one of the class names [normal, nodule, effusion] or an index 0..2"),
    )


def test_csv_bad_rows_are_numbered_by_line(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("StudyInstanceUID,label\n1.2.3,normal\n")
    table = read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)
    assert table.numbered_by == "line"


def test_parquet_missing_column_names_it_and_the_field(tmp_path: Path) -> None:
    path = _parquet(tmp_path / "labels.parquet", {"uid": ["1.2.3"], "label": ["normal"]})
    with pytest.raises(
        DataError, match=r"no column 'StudyInstanceUID' \(columns: uid, label\). Set data.key_column"
    ):
        read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)


def test_parquet_without_rows(tmp_path: Path) -> None:
    path = _parquet(tmp_path / "labels.parquet", {"StudyInstanceUID": [], "label": []})
    with pytest.raises(DataError, match=r"labels.parquet: the labels file has no rows\."):
        read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)


def test_not_a_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "labels.parquet"
    path.write_text("StudyInstanceUID,label\n1.2.3,normal\n")
    with pytest.raises(DataError, match=r"labels.parquet: cannot read the Parquet labels file \(.+\)\. "):
        read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)


def test_parquet_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"x.parquet: labels file not found. Check data.labels"):
        read_labels(tmp_path / "x.parquet", key_column="k", label_column="label", class_names=CLASSES)


def test_parquet_without_pyarrow_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _parquet(tmp_path / "labels.parquet", {"StudyInstanceUID": ["1.2.3"], "label": ["normal"]})
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow` raise ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(
        DataError,
        match=r"labels.parquet: reading Parquet labels needs pyarrow: pip install pyarrow "
        r"\(or save the labels as CSV\)\.",
    ):
        read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)


def test_one_unusable_row_of_one_is_counted_in_the_singular(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("StudyInstanceUID,label\n1.2.3,cat\n")
    with caplog.at_level("WARNING", logger="sitecal.cohort.labels"):
        read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 1 of 1 label row cannot be used and is excluded (label is not one of the class names "
        "[normal, nodule, effusion] or an index 0..2: 1), e.g. line 2."
    ]
