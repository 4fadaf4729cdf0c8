"""A Parquet file is bounded before any column is read; a CSV file by the same row limit.

Parquet is small on disk and as large as it likes in memory: 8 million rows of one repeated value fit in
5.7 MB, a 400 MB cell of one repeated byte in 14 KB, a 100 KB value referenced by 12,000 rows in 30 KB.
Each is refused from the file's footer (rows, decompressed bytes, bytes per row) or, for a dictionary
value repeated past the byte limit, before it is decoded; ``sitecal check`` says so with exit 2, in
seconds and in the memory of a check of a small file, in a child process whose peak memory is measured.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.security._child import SITECAL_MAIN, peak_mib

from sitecal.cohort._labels_csv import MAX_ROWS
from sitecal.cohort._parquet import MAX_CELL_BYTES
from sitecal.cohort.labels import read_labels
from sitecal.cohort.predictions_file import MAX_PREDICTIONS_BYTES, read_predictions
from sitecal.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLASSES = ["normal", "nodule"]
# A check of a small valid file peaks at about 415 MiB (torch is imported to check the device); reading
# any of the files below would take gigabytes (the 400 MB cell: 1.2 GiB, 5 million rows: 3 GiB)
PEAK_MIB = 700
WALL_S = 60  # each check takes 5 s alone on a 2-core machine; the unbounded reads took 90 s and more
TOO_MANY_ROWS = (
    "the predictions file has 5,000,001 rows, above the limit of 5,000,000 studies a file may hold"
)
BIG_CELL = (
    "holds a cell of more than 131,072 bytes once decompressed (the limit, as for a field of a CSV file)"
)
TOO_MANY_BYTES = (
    "the columns read of the predictions file hold more than 1,073,741,824 bytes once decompressed (the "
    "limit, as for a CSV file)"
)

# Writes the 400 MB cell in its own process: the compressor's buffers would stay in the test's memory
_HUGE_CELL = """
import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq
size = 400 << 20  # zeros: calloc'd pages, never touched until the compressor reads them
offsets, data = np.array([0, size], np.int32), np.zeros(size, np.uint8)
cell = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
table = pa.table({"AccessionNumber": ["A1"], "label": cell, "logit:normal": [0.0], "logit:nodule": [1.0]})
pq.write_table(table, sys.argv[1], compression="zstd", use_dictionary=False, write_statistics=False)
"""


def _protocol(folder: Path, predictions: Path) -> Path:
    protocol = {
        "name": "vendor",
        "intended_use": "A vendor model's calibration, evaluated from its predictions file.",
        "model": {"name": "vendor model", "version": "4.2", "class_names": CLASSES},
        "data": {"predictions": predictions.name, "key": "AccessionNumber", "label_column": "label"},
        "calibration": {
            "method": "temperature",
            "min_group_size": 10,
            "split": {"by": "patient", "fit_fraction": 0.5, "seed": 1},
        },
        "evaluation": {"metrics": ["ece"], "bootstrap": {"n_resamples": 50, "seed": 1, "refit": False}},
        "report": {"output_dir": "reports"},
        "privacy": {"key_file": "key"},
    }
    path = folder / "protocol.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False), encoding="utf-8")
    return path


def _check(folder: Path, predictions: Path) -> tuple[int, str, float, float]:
    """``sitecal check`` in a child process: exit code, stderr, wall seconds, peak RSS in MiB (its VmHWM)."""
    protocol = _protocol(folder, predictions)
    peak = folder / "peak"
    peak.unlink(missing_ok=True)
    with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
        start = time.monotonic()
        child = subprocess.run(
            [sys.executable, "-c", SITECAL_MAIN, str(peak), "check", str(protocol)], stdout=out, stderr=err
        )
        wall = time.monotonic() - start
    return child.returncode, (folder / "stderr").read_text(encoding="utf-8"), wall, peak_mib(peak)


def _refused_by_check(folder: Path, path: Path, *said: str) -> None:
    """``sitecal check`` exits 2 saying each of ``said``, within the time and memory bounds."""
    code, err, wall, peak = _check(folder, path)
    assert code == 2, err
    for text in said:
        assert text in err, (text, err)
    print(f"check: {wall:.1f} s, {peak:.0f} MiB")
    assert wall < WALL_S and peak < PEAK_MIB, (wall, peak)


def _constant_rows(path: Path, n: int) -> Path:
    """``n`` rows of one key, one label and two zero logits: dictionary-encoded, a few hundred KB."""
    zeros = pa.array(np.zeros(n, dtype=np.int32))
    table = pa.table(
        {
            "AccessionNumber": pa.DictionaryArray.from_arrays(zeros, pa.array(["A"])),
            "label": pa.DictionaryArray.from_arrays(zeros, pa.array(["normal"])),
            "logit:normal": pa.array(np.zeros(n)),
            "logit:nodule": pa.array(np.zeros(n)),
        }
    )
    pq.write_table(table, path, compression="zstd")
    return path


@pytest.fixture(scope="module")
def many_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One row more than the default limit, in a file of a few hundred KB."""
    return _constant_rows(tmp_path_factory.mktemp("rows") / "vendor.parquet", MAX_ROWS + 1)


@pytest.mark.timeout(120)
def test_more_rows_than_the_default_limit_are_refused_from_the_footer(
    many_rows: Path, tmp_path: Path
) -> None:
    assert MAX_ROWS == 5_000_000 and many_rows.stat().st_size < 1 << 20
    _refused_by_check(
        many_rows.parent,
        many_rows,
        f"data.predictions: {many_rows}: {TOO_MANY_ROWS}; is this a predictions file? Check ",
        "evaluate a sample of at most 5,000,000 studies",
    )


@pytest.mark.timeout(30)
def test_a_parquet_labels_file_of_too_many_rows_is_refused_from_its_footer(many_rows: Path) -> None:
    start = time.monotonic()
    with pytest.raises(DataError, match="the labels file has 5,000,001 rows, above the limit of 5,000,000"):
        read_labels(many_rows, key_column="AccessionNumber", label_column="label", class_names=CLASSES)
    assert time.monotonic() - start < 5  # the footer only: reading 5 million rows takes half a minute


@pytest.mark.timeout(30)
def test_the_row_limit_is_exact(tmp_path: Path) -> None:
    path = _constant_rows(tmp_path / "vendor.parquet", 101)
    with pytest.raises(DataError, match="has 101 rows, above the limit of 100 studies"):
        read_predictions(path, class_names=CLASSES, key_column="AccessionNumber", max_rows=100)
    table = read_predictions(path, class_names=CLASSES, key_column="AccessionNumber", max_rows=101)
    assert table.n_rows == 101 and len(table.rows) == 1  # one key repeated with the same scores


@pytest.mark.timeout(120)
def test_a_huge_cell_is_refused_from_the_footer(tmp_path: Path) -> None:
    path = tmp_path / "vendor.parquet"
    subprocess.run([sys.executable, "-c", _HUGE_CELL, str(path)], check=True, timeout=100)
    assert path.stat().st_size < 64 << 10  # 400 MB in 14 KB
    _refused_by_check(
        tmp_path,
        path,
        f"data.predictions: {path}: column 'label' (row group 1) {BIG_CELL}; is this a predictions",
    )


@pytest.mark.timeout(120)
def test_pages_decompressing_past_the_byte_limit_are_refused_from_the_footer(tmp_path: Path) -> None:
    # 4 million 300-byte cells: 1.2 GB once decompressed (above the CSV limit of 1 GiB), 200 KB on disk
    n, width = 4_000_000, 300
    cells = pa.Array.from_buffers(
        pa.string(),
        n,
        [
            None,
            pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int32)),
            pa.py_buffer(np.zeros(n * width, np.uint8)),
        ],
    )
    zeros = pa.array(np.zeros(n, dtype=np.int32))
    table = pa.table(
        {
            "AccessionNumber": pa.DictionaryArray.from_arrays(zeros, pa.array(["A"])),
            "label": cells,
            "logit:normal": pa.array(np.zeros(n)),
            "logit:nodule": pa.array(np.zeros(n)),
        }
    )
    path = tmp_path / "vendor.parquet"
    pq.write_table(
        table, path, compression="zstd", use_dictionary=["AccessionNumber"], write_statistics=False
    )
    del table, cells
    assert path.stat().st_size < 1 << 20 and MAX_PREDICTIONS_BYTES == 1 << 30
    _refused_by_check(
        tmp_path, path, f"data.predictions: {path}: {TOO_MANY_BYTES}; is this a predictions file?"
    )


@pytest.mark.timeout(60)
def test_a_value_repeated_past_the_byte_limit_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    # one 100 KB value (below the cell limit) in every one of 12,000 rows: 1.2 GB decoded, 30 KB on disk,
    # and its column chunk 100 KB decompressed (a dictionary page and indices): the footer cannot tell
    n, size = 12_000, 100_000
    value = pa.Array.from_buffers(
        pa.string(),
        1,
        [None, pa.py_buffer(np.array([0, size], np.int32)), pa.py_buffer(np.full(size, 120, np.uint8))],
    )
    table = pa.table(
        {
            "AccessionNumber": pa.array([f"A{i}" for i in range(n)]),
            "label": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), value),
            "logit:normal": pa.array(np.zeros(n)),
            "logit:nodule": pa.array(np.zeros(n)),
        }
    )
    path = tmp_path / "vendor.parquet"
    pq.write_table(table, path, compression="zstd")
    assert path.stat().st_size < 64 << 10
    assert pq.ParquetFile(path).metadata.row_group(0).column(1).total_uncompressed_size < 200_000
    _refused_by_check(tmp_path, path, f"data.predictions: {path}: {TOO_MANY_BYTES}")


@pytest.mark.timeout(30)
def test_a_huge_cell_among_small_ones_is_refused_when_its_row_group_is_read(tmp_path: Path) -> None:
    # 2,000 rows, one of them 200 KB: 100 bytes a row on average, so the footer passes it
    n = 2_000
    keys = [f"A{i}" for i in range(n)]
    keys[1234] = "K" * 200_000
    table = pa.table(
        {"AccessionNumber": keys, "logit:normal": pa.array(np.zeros(n)), "logit:nodule": pa.array(np.ones(n))}
    )
    path = tmp_path / "vendor.parquet"
    pq.write_table(table, path, use_dictionary=False)
    with pytest.raises(DataError) as raised:
        read_predictions(path, class_names=CLASSES, key_column="AccessionNumber")
    assert str(raised.value) == (
        f"{path}: column 'AccessionNumber' (row group 1) {BIG_CELL}; is this a predictions file? Check "
        "data.predictions."
    )
    assert "KKKK" not in str(raised.value)


@pytest.mark.timeout(30)
def test_a_column_not_used_is_never_read(tmp_path: Path) -> None:
    # a note column of 1 MB cells: not a column the protocol names, so neither its size nor its cells count
    n = 20
    table = pa.table(
        {
            "AccessionNumber": [f"A{i}" for i in range(n)],
            "note": ["x" * (1 << 20)] * n,
            "logit:normal": pa.array(np.zeros(n)),
            "logit:nodule": pa.array(np.ones(n)),
        }
    )
    path = tmp_path / "vendor.parquet"
    pq.write_table(table, path, use_dictionary=False)
    table = read_predictions(path, class_names=CLASSES, key_column="AccessionNumber")
    assert len(table.rows) == n and table.bad_rows == ()
    with pytest.raises(DataError, match=re.escape(f"column 'note' (row group 1) {BIG_CELL}")):
        read_predictions(path, class_names=CLASSES, key_column="AccessionNumber", columns=["note"])


def test_the_cell_limit_is_the_csv_field_limit() -> None:
    assert MAX_CELL_BYTES == csv.field_size_limit() == 131_072


@pytest.mark.timeout(30)
def test_a_csv_predictions_file_of_more_rows_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vendor.csv"
    path.write_text(
        "AccessionNumber,logit:normal,logit:nodule\n" + "".join(f"A{i},0,1\n" for i in range(101)),
        encoding="utf-8",
    )
    with pytest.raises(DataError) as raised:
        read_predictions(path, class_names=CLASSES, key_column="AccessionNumber", max_rows=100)
    assert str(raised.value) == (
        f"{path}: the predictions file has more than 100 rows, above the limit of 100 studies a file may "
        "hold; is this a predictions file? Check data.predictions, or evaluate a sample of at most 100 "
        "studies (or one site's studies at a time)."
    )
    assert (
        len(read_predictions(path, class_names=CLASSES, key_column="AccessionNumber", max_rows=101).rows)
        == 101
    )


@pytest.mark.timeout(30)
def test_a_csv_labels_file_of_more_rows_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(
        "AccessionNumber,label\n" + "".join(f"A{i},normal\n" for i in range(101)), encoding="utf-8"
    )
    kwargs = {"key_column": "AccessionNumber", "label_column": "label", "class_names": CLASSES}
    with pytest.raises(
        DataError, match="the labels file has more than 100 rows, above the limit of 100 studies"
    ):
        read_labels(path, max_rows=100, **kwargs)  # type: ignore[arg-type]
    assert len(read_labels(path, max_rows=101, **kwargs).labels) == 101  # type: ignore[arg-type]
