"""A predictions file read into a cohort gives the same cohort, bit for bit, however the reading is done.

The expected values in ``read_scale_expected.json`` were computed by the row-by-row reader that preceded
the columnar one (commit c338341), from the messy files this module writes: bad numbers, empty and
duplicated keys, keys given twice with other scores, missing and unknown labels, short and long rows,
blank rows, quoted line breaks, five encodings and delimiters, probabilities, a file sitecal wrote, a
labels file and a Parquet file. Each case pins the predictions table, the labels, the cohort (studies in
order with their keys, pseudonyms, split keys, subgroup values and the bytes of their logits; exclusions
with their reasons; counts) and the warnings logged. Set ``SITECAL_PIN_READ=1`` to write the file anew
(only when a change of the cohort is intended, and said so in its commit).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sitecal._pseudonym import Pseudonymizer
from sitecal.cohort._from_predictions import cohort_from_predictions, labels_from_predictions
from sitecal.cohort._records import Cohort
from sitecal.cohort.labels import LabelTable, read_labels
from sitecal.cohort.mapping import read_mapping
from sitecal.cohort.predictions_file import PredictionTable, read_predictions
from sitecal.errors import DataError
from sitecal.protocol import SubgroupSettings

EXPECTED = Path(__file__).with_name("read_scale_expected.json")
PIN = os.environ.get("SITECAL_PIN_READ") == "1"
KEY = Pseudonymizer(b"0123456789abcdef" * 4)
CLASSES = ["normal", "nodule", "effusion"]
BANDS = [0.0, 40.0, 60.0, 80.0, 200.0]
HEADER = [
    "StudyInstanceUID",
    "PatientID",
    "label",
    "site",
    "scanner",
    "PatientSex",
    "age",
    "note",
    "logit:normal",
    "logit:nodule",
    "logit:effusion",
]

# (cells, as written) of a vendor file: every oddity a site's export has shown, one or more per row
MESSY_ROWS: list[list[str]] = [
    ["1.2.1", "PAT1", "normal", "Hospital 1", "Scanner A1", "M", "35", "", "0.5", "-1.25", "2"],
    ["1.2.2", "PAT1", "nodule", "Hospital 1", "Scanner A1", "F", "45", "", "1e-3", "0", "-0.0"],
    ["1.2.3", "PAT2", "effusion", "Hospital 1", "Scanner A2", "female", "61", "", " 2.5 ", "1_000", "3"],
    ["  1.2.4 ", " PAT3 ", "  normal ", "  Hospital   1 ", "Scanner A2", " m", "79.9", "", "1", "2", "3"],
    ["", "PAT4", "normal", "Hospital 1", "Scanner A1", "M", "30", "", "1", "2", "3"],  # empty key
    ["1.2.6", "PAT5", "normal", "Hospital 2", "Scanner B1", "M", "50", "", "abc", "2", "3"],
    ["1.2.7", "PAT6", "normal", "Hospital 2", "Scanner B1", "M", "50", "", "1", "", "3"],
    ["1.2.8", "PAT7", "normal", "Hospital 2", "Scanner B1", "M", "50", "", "nan", "2", "3"],
    ["1.2.9", "PAT8", "normal", "Hospital 2", "Scanner B1", "M", "50", "", "1", "-inf", "3"],
    ["1.2.10", "PAT9", "normal", "Hospital 2", "Scanner B1", "M", "50", "", "1e400", "2", "3"],
    ["1.2.11", "PAT10", "", "Hospital 2", "Scanner B2", "F", "20", "", "1", "2", "3"],  # empty label
    ["1.2.12", "PAT10", "2", "Hospital 2", "Scanner B2", "F", "20", "", "1", "2", "3"],  # an index
    ["1.2.13", "PAT11", "07", "Hospital 2", "Scanner B2", "F", "20", "", "1", "2", "3"],  # too large
    ["1.2.14", "PAT12", "²", "Hospital 2", "Scanner B2", "F", "20", "", "1", "2", "3"],
    ["1.2.15", "PAT13", "Nodule", "Hospital 2", "Scanner B2", "F", "20", "", "1", "2", "3"],
    ["1.2.16", "", "001", "Hospital 3", "Scanner C1", "", "", "", "0.1", "0.2", "0.3"],  # no patient
    ["1.2.17", "PAT14", "normal", "Hôpital 3", "Scanner C1", "O", "abc", "", "0.1", "0.2", "0.3"],
    ["1.2.18", "PAT14", "normal", "Hospital 3", "Scanner C1", "X", "-5", "", "0.1", "0.2", "0.3"],
    ["1.2.1", "PAT1", "normal", "Hospital 1", "Scanner A1", "M", "35", "", "0.5", "-1.25", "2"],  # same
    ["1.2.2", "PAT1", "nodule", "Hospital 1", "Scanner A1", "F", "45", "", "1e-3", "0", "1"],  # other
    ["1.2.2", "PAT1", "nodule", "Hospital 1", "Scanner A1", "F", "45", "", "1e-3", "0", "-0.0"],
    ["1.2.3", "PAT2", "nodule", "Hospital 1", "Scanner A2", "female", "61", "", " 2.5 ", "1_000", "3"],
    ["1.2.19", "PAT15", "normal", "Hospital 3", "Scanner C2"],  # short: no scores
    ["1.2.20", "PAT16", "effusion", "Hospital 3", "Scanner C2", "F", "90", "", "4", "5", "6", "x", "y"],
    ["1.2.21", "PAT16", "effusion", "Hospital 3", "Scanner C2", "F", "90", "two\nlines", "٣", "5", "6"],
    ["1.2.22", "PAT17", "nodule", "Hospital 4", "Scanner D1", "F", "55", "a, b; c", "-1e-320", "5", "6"],
    ["1.2.6", "PAT5", "normal", "Hospital 2", "Scanner B1", "M", "50", "", "1", "2", "3"],  # bad first
    ["1.2.23", "PAT18", "normal", "Hospital 4", "Scanner D1", "M", "55", "", "1", "2", "3"],
    ["1.2.23", "PAT19", "normal", "Hospital 4", "Scanner D1", "M", "55", "", "1", "2", "3"],  # other patient
    ["1.2.24", "PAT20", "normal", "Hospital 4", "Scanner D1", "M", "55", "", "1", "2", "3"],
    ["1.2.24", "PAT20", "normal", "Hospital 5", "Scanner D1", "M", "55", "", "1", "2", "3"],  # other column
    ["1.2.25", "PAT21", "normal", "Hospital 4", "Scanner D2", "M", "60", "", "0.30000000000000004", "2", "3"],
    [
        "1.2.26",
        "PAT21",
        "effusion",
        "Hospital 4",
        "Scanner D2",
        "M",
        "60",
        "",
        "1.7976931348623157e308",
        "2",
        "3",
    ],
    ["1.2.27", "PAT22", "normal", "Hospital 4", "Scanner D2", "M", "60", "", "Infinity", "2", "3"],
]
MESSY_EXTRA_LINES = ["", ",,,,,,,,,,", ";;  ;"]  # blank lines and a spreadsheet's empty row, mid-file


def _subgroups(mapping: bool) -> dict[str, SubgroupSettings]:
    return {
        "scanner": SubgroupSettings(column="scanner"),
        "site": SubgroupSettings(column="site", mapping="sites.csv" if mapping else None),
        "sex": SubgroupSettings(column="PatientSex"),
        "age_band": SubgroupSettings(column="age", bands=BANDS),
        "sex_age": SubgroupSettings(intersection=["sex", "age_band"]),
    }


def _csv_text(header: list[str], rows: list[list[str]], delimiter: str, newline: str, extra: bool) -> str:
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator=newline)
    writer.writerow(header)
    for i, row in enumerate(rows):
        writer.writerow(row)
        if extra and i in (3, 9, 17):
            out.write(MESSY_EXTRA_LINES[(i // 7) % 3].replace(",", delimiter) + newline)
    return out.getvalue()


def _vendor(tmp_path: Path, encoding: str, delimiter: str, newline: str) -> Path:
    rows = MESSY_ROWS
    if encoding == "cp1252":  # what cp1252 cannot hold
        rows = [[cell.replace("٣", "3").replace("²", "2") for cell in row] for row in rows]
    text = _csv_text(HEADER, rows, delimiter, newline, extra=True)
    path = tmp_path / "vendor.csv"
    path.write_bytes(text.encode(encoding))
    return path


def _parquet(tmp_path: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [row + [""] * (len(HEADER) - len(row)) for row in MESSY_ROWS]
    columns: dict[str, list[Any]] = {}
    for i, name in enumerate(HEADER):
        cells = [row[i] for row in rows]
        if name.startswith("logit:"):
            values: list[Any] = []
            for cell in cells:
                try:
                    values.append(float(cell))
                except ValueError:
                    values.append(None)
            columns[name] = values
        else:
            columns[name] = [cell or None for cell in cells]
    path = tmp_path / "vendor.parquet"
    pq.write_table(pa.table(columns), path)
    return path


def _mapping(tmp_path: Path) -> Path:
    path = tmp_path / "sites.csv"
    path.write_text("value,group\nHospital 1,North\nhospital 2,North\nHospital 3,South\n", encoding="utf-8")
    return path


def _probabilities(tmp_path: Path, two_class: bool) -> tuple[Path, Path]:
    header = ["AccessionNumber", "site"] + (["prob:nodule"] if two_class else [f"prob:{c}" for c in CLASSES])
    probs = [
        ["0.5", "0.3", "0.2"],
        ["0.2", "0.3", "0.5"],
        ["1.5", "0.1", "0.1"],
        ["-0.1", "0.6", "0.5"],
        ["0.5", "0.3", "0.3"],
        ["0.5", "0.3", "0.2009"],
        ["0.5", "0.3", "0.2011"],
        ["0", "1", "0"],
        ["1e-300", "0.5", "0.5"],
        ["0.1", "", "0.9"],
        ["0.1", "x", "0.9"],
        ["nan", "0.5", "0.5"],
        ["0.3333333333333333", "0.3333333333333333", "0.3333333333333333"],
        ["0.4", "0.4", "0.2"],
    ]
    rows = [[f"A{i % 11}", f"Site {i % 3}", *(p[1:2] if two_class else p)] for i, p in enumerate(probs)]
    path = tmp_path / "probs.csv"
    path.write_text(_csv_text(header, rows, ",", "\n", extra=False), encoding="utf-8")
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "AccessionNumber;label\nA0;normal\nA1;nodule\nA2;nodule\nA3;1\nA4;\nA5;normal\nA5;nodule\n"
        "A6;0\nA7;1\nA8;normal\nA9;nodule\nA10;1\nA99;normal\n;normal\n",
        encoding="utf-8",
    )
    return path, labels


def _sitecal_written(tmp_path: Path) -> Path:
    header = ["study_key", "patient_key", "split_rank", "label", "site", *[f"logit:{c}" for c in CLASSES]]
    rows = [
        ["S-00000000000000a1", "P-00000000000000b1", "3", "normal", "H1", "0.25", "-0.5", "1"],
        ["S-00000000000000a2", "P-00000000000000b1", "1", "nodule", "H1", "0.5", "-0.5", "1"],
        ["S-00000000000000a3", "P-00000000000000b2", "0", "effusion", "H2", "0.75", "-0.5", "1"],
        ["S-00000000000000a4", "", "2", "normal", "H2", "1", "-0.5", "1"],
        ["S-00000000000000a5", "P-00000000000000b3", "x", "normal", "H2", "1", "-0.5", "1"],
        ["S-00000000000000a6", "P-00000000000000b3", "-1", "normal", "H2", "1", "-0.5", "1"],
        ["S-00000000000000a7", "P-00000000000000b3", "1234567890123456", "normal", "H2", "1", "-0.5", "1"],
        ["S-00000000000000a8", "P-00000000000000b3", "٣", "normal", "H2", "1", "-0.5", "1"],
        ["S-00000000000000a9", "P-00000000000000b3", "007", "normal", "H2", "1", "-0.5", "1"],
        ["S-00000000000000a9", "P-00000000000000b3", "7", "normal", "H2", "1", "-0.5", "1"],
        ["S-0000000000000010", "P-00000000000000b4", "5", "", "H2", "1", "-0.5", "1"],
    ]
    path = tmp_path / "predictions.csv"
    path.write_text(_csv_text(header, rows, ",", "\n", extra=False), encoding="utf-8")
    return path


def _random_rows(seed: int, n: int) -> list[list[str]]:
    """A messy vendor file of ``n`` rows drawn with ``random.Random(seed)`` (stable across versions)."""
    rng = random.Random(seed)
    numbers = ["0.5", "-2", "1e-5", "3.25", "-0.0", "17", " 1.5", "2 ", "1_0"]
    bad_numbers = ["", "abc", "nan", "inf", "-Infinity", "1e999", "0x10", "1,5"]
    labels = ["normal", "nodule", "effusion", "0", "1", "2", "", "3", "Normal", "effusion "]
    sites = ["Hospital 1", "Hospital 2", " Hospital  3", "", "Rare site", "hospital 1"]
    scanners = ["Scanner A1", "Scanner A2", "Scanner B1", "Scanner Z9", ""]
    sexes = ["M", "F", "male", "", "O", "?"]
    rows: list[list[str]] = []
    for i in range(n):
        if rows and rng.random() < 0.08:  # a key given again: as it was, or changed
            row = list(rng.choice(rows))
            if rng.random() < 0.5 and len(row) > 10:
                row[8 + rng.randrange(3)] = rng.choice(numbers)
            rows.append(row)
            continue
        key = "" if rng.random() < 0.02 else f"1.2.840.{seed}.{i}"
        patient = "" if rng.random() < 0.1 else f"PAT{rng.randrange(n // 2)}"
        scores = [rng.choice(bad_numbers) if rng.random() < 0.02 else rng.choice(numbers) for _ in range(3)]
        row = [
            key,
            patient,
            rng.choice(labels),
            rng.choice(sites),
            rng.choice(scanners),
            rng.choice(sexes),
            str(rng.randrange(10, 100)) if rng.random() < 0.9 else rng.choice(["", "x", "45.5"]),
            "line\nbreak" if rng.random() < 0.01 else "",
            *scores,
        ]
        if rng.random() < 0.02:
            row = row[: rng.randrange(1, len(row))]
        elif rng.random() < 0.02:
            row += ["extra"]
        rows.append(row)
    return rows


def _logits(array: np.ndarray | None) -> list[Any] | None:
    if array is None:
        return None
    assert isinstance(array, np.ndarray)
    return [array.dtype.str, list(array.shape), array.tobytes().hex()]


def _table(table: PredictionTable) -> dict[str, Any]:
    rows = []
    for key, row in table.rows.items():
        assert row.key == key
        rows.append(
            [
                key,
                row.position,
                _logits(row.logits),
                row.patient,
                row.label,
                list(row.columns.items()),
                row.split_rank,
            ]
        )
    return {
        "rows": rows,
        "bad_rows": [list(r) for r in table.bad_rows],
        "n_rows": table.n_rows,
        "score_kind": table.score_kind,
        "pseudonymised": table.pseudonymised,
        "key_column": table.key_column,
        "has_patient": table.has_patient,
        "numbered_by": table.numbered_by,
        "path": table.path.name,
    }


def _labels(labels: LabelTable) -> dict[str, Any]:
    return {
        "labels": list(labels.labels.items()),
        "bad_rows": [list(r) for r in labels.bad_rows],
        "n_rows": labels.n_rows,
        "numbered_by": labels.numbered_by,
    }


def _cohort(cohort: Cohort) -> dict[str, Any]:
    studies = []
    for s in cohort.studies:
        studies.append(
            [
                s.study_key,
                s.patient_key,
                [str(f) for f in s.files],
                s.relative_path,
                list(s.instance_uids),
                list(s.attributes.items()),
                s.label,
                type(s.label).__name__,
                list(s.sources.items()),
                s.series_key,
                s.series_number,
                s.declared_values,
                _logits(s.logits),
                s.split_key,
                s.study_order,
            ]
        )
    exclusions = [
        [e.stage, e.reason, None if e.path is None else str(e.path), e.key, e.study_uid, e.series_key, e.unit]
        for e in cohort.exclusions
    ]
    summary = cohort.predictions_file
    return {
        "studies": studies,
        "exclusions": exclusions,
        "files_found": cohort.files_found,
        "dicom_instances": cohort.dicom_instances,
        "n_studies_found": cohort.n_studies_found,
        "n_labelled": cohort.n_labelled,
        "attributes": list(cohort.attributes),
        "n_series_found": cohort.n_series_found,
        "n_series_selected": cohort.n_series_selected,
        "predictions_file": None if summary is None else dataclasses.asdict(summary),
        "retrieval": cohort.retrieval,
        "exclusion_counts": cohort.exclusion_counts(),
    }


def _read(
    caplog: pytest.LogCaptureFixture,
    path: Path,
    *,
    key: str,
    subgroups: dict[str, SubgroupSettings],
    classes: list[str] = CLASSES,
    patient_column: str | None = None,
    labels_path: Path | None = None,
    mapping: Path | None = None,
    min_count_shown: int = 2,
) -> dict[str, Any]:
    """The table, labels, cohort and warnings of one predictions file, as plain data."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        table = read_predictions(
            path,
            class_names=classes,
            key_column=key,
            patient_column=patient_column,
            label_column=None if labels_path is not None else "label",
            columns=[s.column for s in subgroups.values() if s.column is not None],
        )
        if labels_path is None:
            labels = labels_from_predictions(table, classes)
        else:
            labels = read_labels(labels_path, key_column=key, label_column="label", class_names=classes)
        cohort = cohort_from_predictions(
            table,
            labels,
            subgroups=subgroups,
            mappings={} if mapping is None else {"site": read_mapping(mapping)},
            key=key,
            pseudonymize=KEY,
            min_count_shown=min_count_shown,
            labels_from_file=labels_path is not None,
        )
    warnings = [r.getMessage().replace(str(path.parent), "<dir>") for r in caplog.records]
    return {
        "table": _table(table),
        "labels": _labels(labels),
        "cohort": _cohort(cohort),
        "warnings": warnings,
    }


def _case(name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    vendor: dict[str, tuple[str, str, str]] = {
        "utf8-comma-crlf": ("utf-8", ",", "\r\n"),
        "cp1252-semicolon-lf": ("cp1252", ";", "\n"),
        "utf16-tab-lf": ("utf-16", "\t", "\n"),
        "utf8bom-pipe-cr": ("utf-8-sig", "|", "\r"),
    }
    if name in vendor:
        path = _vendor(tmp_path, *vendor[name])
        return _read(
            caplog,
            path,
            key="StudyInstanceUID",
            patient_column="PatientID",
            subgroups=_subgroups(True),
            mapping=_mapping(tmp_path),
        )
    if name == "utf8-other-breaks":  # line breaks of str.splitlines that do not end a CSV line
        rows = [list(row) for row in MESSY_ROWS]
        rows[0][7], rows[1][3], rows[2][7], rows[5][7] = "a\x0cb", "Hospital\u20281", "x\x85y\x1c", "\x0b"
        path = tmp_path / "vendor.csv"
        path.write_text(_csv_text(HEADER, rows, ",", "\n", extra=True), encoding="utf-8", newline="")
        return _read(
            caplog, path, key="StudyInstanceUID", patient_column="PatientID", subgroups=_subgroups(False)
        )
    if name == "parquet":
        return _read(
            caplog,
            _parquet(tmp_path),
            key="StudyInstanceUID",
            patient_column="PatientID",
            subgroups=_subgroups(False),
        )
    if name in ("probabilities", "probabilities-two-class"):
        two = name.endswith("two-class")
        path, labels = _probabilities(tmp_path, two)
        return _read(
            caplog,
            path,
            key="AccessionNumber",
            subgroups={"site": SubgroupSettings(column="site")},
            classes=["normal", "nodule"] if two else CLASSES,
            labels_path=labels,
            min_count_shown=1,
        )
    if name == "sitecal-written":
        return _read(
            caplog,
            _sitecal_written(tmp_path),
            key="StudyInstanceUID",
            subgroups={"site": SubgroupSettings(column="site")},
            min_count_shown=1,
        )
    raise AssertionError(name)


CASES = [
    "utf8-comma-crlf",
    "utf8-other-breaks",
    "cp1252-semicolon-lf",
    "utf16-tab-lf",
    "utf8bom-pipe-cr",
    "parquet",
    "probabilities",
    "probabilities-two-class",
    "sitecal-written",
]
RANDOM_SEEDS = [1, 2, 3]


def _expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text(encoding="utf-8")) if EXPECTED.exists() else {}


def _check(name: str, got: Any, *, digest: bool = False) -> None:
    plain = json.loads(json.dumps(got))
    value: Any = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest() if digest else plain
    if PIN:
        expected = _expected()
        expected[name] = value
        EXPECTED.write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return
    assert value == _expected()[name]


@pytest.mark.parametrize("name", CASES)
def test_a_messy_file_reads_into_the_pinned_cohort(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _check(name, _case(name, tmp_path, caplog))


def _random_case(seed: int, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    path = tmp_path / "vendor.csv"
    path.write_text(_csv_text(HEADER, _random_rows(seed, 600), ",", "\n", extra=False), encoding="utf-8")
    return _read(
        caplog,
        path,
        key="StudyInstanceUID",
        patient_column="PatientID",
        subgroups=_subgroups(False),
        min_count_shown=3,
    )


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_a_random_messy_file_reads_into_the_pinned_cohort(
    seed: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _check(f"random-{seed}", _random_case(seed, tmp_path, caplog), digest=True)


# Files that cannot be read: the error each gives (the folder replaced by <dir>)
BROKEN = {
    "empty": "",
    "header-only": "StudyInstanceUID,logit:normal,logit:nodule,logit:effusion\n",
    "blank-rows-only": "StudyInstanceUID,logit:normal,logit:nodule,logit:effusion\n,,,\n\n;;\n",
    "no-usable-row": "StudyInstanceUID,logit:normal,logit:nodule,logit:effusion\n,1,2,3\nA,x,2,3\nB,1,,3\n",
    "quote-in-header": 'StudyInstanceUID,"logit:normal\nlogit:nodule,logit:effusion\nA,1,2,3\n',
    "quote-never-closed": "StudyInstanceUID,logit:normal,logit:nodule,logit:effusion\n"
    + "".join(f"K{i},1,2,3\n" for i in range(40))
    + 'K40,1,"2,3\n'
    + "".join(f"K{i},1,2,3\n" for i in range(41, 60)),
    "text-after-quote": "StudyInstanceUID,logit:normal,logit:nodule,logit:effusion\n"
    + "".join(f"K{i},1,2,3\n" for i in range(40))
    + 'K40,1,"2"x,3\n'
    + "".join(f"K{i},1,2,3\n" for i in range(41, 60)),
    "rows-swallowed": "StudyInstanceUID,logit:normal,logit:nodule,logit:effusion,note\n"
    + "".join(f"K{i},1,2,3,\n" for i in range(30))
    + 'K30,1,2,3,"open\nK31,1,2,3,\nK32,1,2,3,"\n'
    + "".join(f"K{i},1,2,3,\n" for i in range(33, 50)),
    "no-score-column": "StudyInstanceUID,score\nA,1\n",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_file_gives_the_pinned_error(name: str, tmp_path: Path) -> None:
    path = tmp_path / "vendor.csv"
    path.write_text(BROKEN[name], encoding="utf-8", newline="")
    with pytest.raises(DataError) as raised:
        read_predictions(path, class_names=CLASSES, key_column="StudyInstanceUID")
    _check(f"error-{name}", str(raised.value).replace(str(tmp_path), "<dir>"))


@pytest.mark.parametrize(("chunk_rows", "block_chars"), [(1, 1), (2, 7), (3, 64), (5, 1 << 20)])
def test_the_cohort_does_not_depend_on_chunks_or_blocks(
    chunk_rows: int,
    block_chars: int,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sitecal.cohort import _labels_csv, _prediction_rows

    monkeypatch.setattr(_prediction_rows, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(_labels_csv, "_BLOCK_CHARS", block_chars)
    for name in CASES:
        folder = tmp_path / name
        folder.mkdir()
        _check(name, _case(name, folder, caplog))
    for seed in RANDOM_SEEDS:
        folder = tmp_path / f"random-{seed}"
        folder.mkdir()
        _check(f"random-{seed}", _random_case(seed, folder, caplog), digest=True)
    for name in sorted(BROKEN):
        (tmp_path / name).mkdir()
        test_a_broken_file_gives_the_pinned_error(name, tmp_path / name)


def test_lines_are_split_as_stringio_splits_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from sitecal.cohort import _labels_csv

    rng = random.Random(5)
    pieces = ["a", "bc", ",", '"', "\n", "\r", "\r\n", "\n\r", " ", "é", "\x0c", "\u2028", "\x85"]
    for block_chars in (1, 3, 16, 1 << 20):
        monkeypatch.setattr(_labels_csv, "_BLOCK_CHARS", block_chars)
        for _ in range(300):
            text = "".join(rng.choice(pieces[: rng.choice([9, 10, 13])]) for _ in range(rng.randrange(60)))
            assert list(_labels_csv._lines(text)) == io.StringIO(text, newline="").readlines()


def test_probabilities_in_bulk_are_those_of_each_row(tmp_path: Path) -> None:
    """Scores checked and turned into logits a column at a time equal those of one row at a time."""
    from sitecal.cohort._prediction_rows import scores

    rng = np.random.default_rng(11)
    n = 3000
    probs = rng.dirichlet([0.3, 1.0, 2.0], n)
    probs[::7] *= 1.0 + rng.uniform(-2e-3, 2e-3, (len(probs[::7]), 1))  # sums about the tolerance
    probs[::13, 0] = 0.0
    probs[5::17, 1] = rng.choice([-1e-9, 1.0 + 1e-12, np.nan, np.inf], len(probs[5::17]))
    header = "StudyInstanceUID,prob:normal,prob:nodule,prob:effusion\n"
    lines = [f"K{i},{','.join(repr(float(v)) for v in row)}" for i, row in enumerate(probs)]
    path = tmp_path / "probs.csv"
    path.write_text(header + "\n".join(lines) + "\n", encoding="utf-8")
    table = read_predictions(path, class_names=CLASSES, key_column="StudyInstanceUID")
    bad = dict(table.bad_rows)
    for i, line in enumerate(lines):
        alone = scores(line.split(","), [1, 2, 3], ["prob:normal", "prob:nodule", "prob:effusion"], "prob")
        if isinstance(alone, str):
            assert bad[i + 2] == alone
        else:
            assert table.rows[f"K{i}"].logits.tobytes() == alone.tobytes()
    assert 0 < len(bad) < n
