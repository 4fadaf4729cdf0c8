"""The predictions file: its form, its checks, and an exact round trip of what sitecal writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sitecal.cohort import read_predictions, write_predictions
from sitecal.cohort.predictions_file import PROBABILITY_FLOOR, SUM_TOLERANCE
from sitecal.errors import DataError

CLASSES = ["normal", "nodule", "effusion"]


def _write(tmp_path: Path, text: str, name: str = "vendor.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_probabilities_become_their_logarithms(tmp_path: Path) -> None:
    path = _write(tmp_path, "StudyInstanceUID,prob:normal,prob:nodule,prob:effusion\n1.2.3,0.5,0.3,0.2\n")
    table = read_predictions(path, class_names=CLASSES, key_column="StudyInstanceUID")
    assert table.score_kind == "prob" and not table.pseudonymised
    np.testing.assert_allclose(table.rows["1.2.3"].logits, np.log([0.5, 0.3, 0.2]), rtol=0, atol=1e-15)


def test_a_two_class_model_may_give_one_probability(tmp_path: Path) -> None:
    path = _write(tmp_path, "AccessionNumber;prob:nodule\nA1;0.8\nA2;0\n")
    table = read_predictions(path, class_names=["normal", "nodule"], key_column="AccessionNumber")
    np.testing.assert_allclose(np.exp(table.rows["A1"].logits), [0.2, 0.8], rtol=1e-12)
    # a probability of 0 has no logarithm: it is floored, and stated as such in the module
    assert table.rows["A2"].logits[1] == pytest.approx(np.log(PROBABILITY_FLOOR))


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("1.5,0.1,0.1", "probability outside [0, 1] in column prob:normal"),
        ("-0.1,0.6,0.5", "probability outside [0, 1] in column prob:normal"),
        ("0.5,0.3,0.3", f"probabilities sum to 1.1, not 1 (tolerance {SUM_TOLERANCE:g})"),
        ("nan,0.5,0.5", "not a finite number in column prob:normal"),
        ("0.5,inf,0.5", "not a finite number in column prob:nodule"),
        ("0.5,abc,0.5", "not a number in column prob:nodule"),
        ("0.5,,0.5", "empty cell in column prob:nodule"),
    ],
)
def test_a_bad_row_is_listed_with_its_line_and_column(tmp_path: Path, row: str, reason: str) -> None:
    path = _write(
        tmp_path, f"StudyInstanceUID,prob:normal,prob:nodule,prob:effusion\nA,0.2,0.3,0.5\nB,{row}\n"
    )
    table = read_predictions(path, class_names=CLASSES, key_column="StudyInstanceUID")
    assert table.bad_rows == ((3, reason),)
    assert list(table.rows) == ["A"]


def test_rows_within_the_tolerance_are_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, "k,prob:normal,prob:nodule,prob:effusion\nA,0.3333,0.3333,0.3333\n")
    table = read_predictions(path, class_names=CLASSES, key_column="k")
    np.testing.assert_allclose(np.exp(table.rows["A"].logits).sum(), 0.9999)


def test_a_key_given_twice_with_different_scores_is_dropped(tmp_path: Path) -> None:
    text = "k,logit:normal,logit:nodule,logit:effusion\nA,1,2,3\nA,1,2,3\nB,0,0,0\nB,0,0,1\n"
    table = read_predictions(_write(tmp_path, text), class_names=CLASSES, key_column="k")
    assert list(table.rows) == ["A"]  # the identical duplicate is one row
    assert [line for line, _ in table.bad_rows] == [4, 5]


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("k,prob:normal,prob:nodule,prob:cat", "column 'prob:cat' names a class the model does not have"),
        ("k,prob:normal,logit:nodule,prob:effusion", "both logit: and prob: columns"),
        ("k,normal,nodule,effusion", "no score column"),
        ("k,prob:normal,prob:nodule", "no column prob:effusion"),
        ("key,prob:normal,prob:nodule,prob:effusion", "no column 'k'"),
        ("k,prob:normal,prob:nodule,prob:nodule", "the column 'prob:nodule' appears 2 times"),
    ],
)
def test_a_file_without_the_needed_columns_is_refused(tmp_path: Path, header: str, message: str) -> None:
    path = _write(tmp_path, f"{header}\nA,0.2,0.3,0.5\n")
    with pytest.raises(DataError, match=r"vendor\.csv") as info:
        read_predictions(path, class_names=CLASSES, key_column="k")
    assert message in str(info.value)


def test_a_file_with_no_usable_row_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "k,prob:normal,prob:nodule,prob:effusion\nA,2,0,0\n")
    with pytest.raises(DataError, match="none of the 1 row of"):
        read_predictions(path, class_names=CLASSES, key_column="k")


def test_a_missing_file_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"data\.predictions"):
        read_predictions(tmp_path / "absent.csv", class_names=CLASSES, key_column="k")


def test_parquet_reads_as_the_same_csv(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    csv = _write(
        tmp_path, "k,site,prob:normal,prob:nodule,prob:effusion\nA,north,0.2,0.3,0.5\nB,south,0.1,0.1,0.8\n"
    )
    parquet = tmp_path / "vendor.parquet"
    pq.write_table(
        pa.table(
            {
                "k": ["A", "B"],
                "site": ["north", "south"],
                "prob:normal": [0.2, 0.1],
                "prob:nodule": [0.3, 0.1],
                "prob:effusion": [0.5, 0.8],
            }
        ),
        parquet,
    )
    a = read_predictions(csv, class_names=CLASSES, key_column="k", columns=["site"])
    b = read_predictions(parquet, class_names=CLASSES, key_column="k", columns=["site"])
    assert list(a.rows) == list(b.rows)
    for key in a.rows:
        assert np.array_equal(a.rows[key].logits, b.rows[key].logits)
        assert a.rows[key].columns == b.rows[key].columns


@given(arrays(np.float64, (4, 3), elements=st.floats(-1e6, 1e6, allow_nan=False)))
def test_what_sitecal_writes_reads_back_bit_for_bit(logits: np.ndarray) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "predictions.csv"
        keys = [f"S-{i:016x}" for i in range(4)]
        # (patient, study) split keys, in memory; written as ranks among the studies
        split_keys = [("hash-c", "hash-1"), ("hash-a", "hash-9"), ("hash-c", "hash-0"), ("hash-b", "hash-5")]
        write_predictions(path, CLASSES, keys, [f"P-{i:016x}" for i in range(4)], split_keys, logits)
        # the clear key column named by the protocol is absent: the file is read as sitecal's own
        table = read_predictions(path, class_names=CLASSES, key_column="StudyInstanceUID")
        text = path.read_text(encoding="utf-8")
    assert table.pseudonymised and table.has_patient
    assert np.array_equal(np.stack([table.rows[k].logits for k in keys]), logits)
    assert [table.rows[k].patient for k in keys] == [f"P-{i:016x}" for i in range(4)]
    assert [table.rows[k].split_rank for k in keys] == [3, 0, 2, 1]
    assert "hash" not in text


def test_a_sitecal_file_without_split_ranks_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "old.csv"
    path.write_text("study_key,patient_key,logit:a,logit:b\nS-1,P-1,0.1,0.2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"split_rank.*earlier sitecal.*sitecal predict"):
        read_predictions(path, class_names=["a", "b"], key_column="StudyInstanceUID")


def test_a_bad_split_rank_makes_its_row_an_exclusion(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(
        "study_key,patient_key,split_rank,logit:a,logit:b\nS-1,P-1,0,0.1,0.2\nS-2,P-2,-3,0.1,0.2\n",
        encoding="utf-8",
    )
    table = read_predictions(path, class_names=["a", "b"], key_column="StudyInstanceUID")
    assert list(table.rows) == ["S-1"]
    assert table.bad_rows == ((3, "split_rank is not a whole number >= 0"),)
