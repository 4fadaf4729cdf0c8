from __future__ import annotations

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
        (5, "label 'cat' is not one of ['normal', 'nodule', 'effusion']"),
        (7, "key labelled twice with different labels"),
    )


def test_missing_column_names_it_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("uid,label\n1.2.3,normal\n")
    with pytest.raises(
        DataError, match=r"no column 'StudyInstanceUID' \(columns: uid, label\). Set data.key_column"
    ):
        read_labels(path, key_column="StudyInstanceUID", label_column="label", class_names=CLASSES)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"labels file not found. Check data.labels"):
        read_labels(tmp_path / "x.csv", key_column="k", label_column="label", class_names=CLASSES)
