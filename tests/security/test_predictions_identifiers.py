"""The identifier policy of a predictions file: its subgroup columns, its cells, its numbers.

A vendor's file is named and filled by whoever exported it: a subgroup column may be ``PATIENTNAME`` or
``mrn``; a free column (a ward, a site) may hold a name typed where a group should be, a NUL or a
terminal escape; a score may be written in Arabic-Indic digits. Columns named like identifiers are refused
when the protocol is validated; a free column whose entries look like identifiers needs a mapping; control
characters never reach an output; only ASCII digits are numbers.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.conftest import VERDICT_EXIT, without_data_uris

from sitecal._io import CONTROL_CHARACTERS, csv_cell, write_csv_atomic
from sitecal._pseudonym import Pseudonymizer
from sitecal.cli import main
from sitecal.cohort import (
    MAX_FREE_COLUMN_VALUES,
    LabelTable,
    ScanResult,
    build_cohort,
    check_subgroup_columns,
)
from sitecal.cohort._cells import ascii_float, identifier_shape
from sitecal.cohort._from_predictions import cohort_from_predictions, labels_from_predictions
from sitecal.cohort.attributes import attribute_value, normalise_text
from sitecal.cohort.mapping import read_mapping
from sitecal.cohort.predictions_file import PredictionTable, read_predictions
from sitecal.cohort.scan import InstanceHeader
from sitecal.errors import DataError
from sitecal.protocol import SubgroupSettings
from sitecal.protocol._base import column_name_key, refused_column

PSEUDONYMIZE = Pseudonymizer(b"k" * 32)
PLANTED = "DOE^JANE"
N_ROWS, N_PLANTED = 300, 50
# every control character that must not reach an output, and a letter on each side of it
CONTROLS = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0), 0x61C, 0x200E, 0x200F, 0x202E, 0x2066]]


def _vendor_rows(ward_of: Callable[[int], str]) -> list[list[str]]:
    """A two-class vendor file's rows: key, label, ward (``ward_of(i)``), two logits; seeded."""
    rng = np.random.default_rng(35)
    rows = []
    for i in range(N_ROWS):
        y = int(rng.random() < 0.4)
        z = rng.normal(size=2)
        z[y] += 1.0
        rows.append(
            [f"ACC{i:05d}", ["normal", "nodule"][y], ward_of(i), repr(float(z[0])), repr(float(z[1]))]
        )
    return rows


HEADER = ["AccessionNumber", "label", "ward", "logit:normal", "logit:nodule"]


def _planted_ward(i: int) -> str:
    """DOE^JANE in 50 rows (past any min_count_shown), North and South in the others."""
    return PLANTED if i % 6 == 0 else ("North" if i % 2 else "South")


def _protocol(folder: Path, predictions: str, subgroups: dict) -> Path:
    protocol = {
        "name": "vendor",
        "intended_use": "A vendor model's calibration, evaluated from its predictions file.",
        "model": {"name": "vendor model", "version": "4.2", "class_names": ["normal", "nodule"]},
        "data": {"predictions": predictions, "key": "AccessionNumber", "label_column": "label"},
        "subgroups": subgroups,
        "calibration": {
            "method": "temperature",
            "min_group_size": 10,
            "split": {"by": "patient", "fit_fraction": 0.5, "seed": 1},
        },
        "evaluation": {
            "metrics": ["ece", "nll"],
            "bootstrap": {"n_resamples": 50, "seed": 1, "refit": False},
            "planning": {"simulations": 0},
        },
        "report": {"output_dir": "reports"},
        "privacy": {"key_file": "key"},
    }
    path = folder / "protocol.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False), encoding="utf-8")
    return path


def _write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


# ---- columns named like identifiers ---------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("column", "what"),
    [
        ("patient_name", "a personal name"),
        ("PATIENTNAME", "a personal name"),
        ("Patient Name", "a personal name"),
        ("mrn", "a medical record number"),
        ("MRN", "a medical record number"),
        ("Medical Record Number", "a medical record number"),
        ("patient-mrn", "a medical record number"),
        ("accession", "an accession number"),
        ("Accession Number", "an accession number"),
        ("DOB", "a date"),
        ("Date of Birth", "a date"),
        ("patient.birth.date", "a date"),
        ("E-Mail", "a phone number or e-mail address"),
        ("Telephone", "a phone number or e-mail address"),
        ("home address", "an address"),
        ("Study Instance UID", "a UID"),
        ("sop_instance_uid", "a UID"),
        ("SSN", "a national or insurance number"),
        ("national_id", "a national or insurance number"),
        ("name", "a personal name"),
        ("ID", "a patient or study ID"),
        (
            "referring_physician_name",
            "the DICOM tag ReferringPhysicianName, which holds a person's name (VR PN)",
        ),
    ],
)
def test_a_column_named_like_an_identifier_is_refused_by_check(
    column: str, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the file is never read: the protocol is refused first, before any long work
    protocol = _protocol(tmp_path, "vendor.csv", {"who": {"column": column}})
    assert main(["check", str(protocol)]) == 2
    err = capsys.readouterr().err
    assert f"subgroups.who.column: column '{column}' is named like {what}: it cannot be a subgroup" in err
    assert "Fix the protocol and run 'sitecal check' again." in err


@pytest.mark.timeout(10)
def test_a_mapping_does_not_make_an_identifier_column_a_subgroup(tmp_path: Path) -> None:
    protocol = _protocol(tmp_path, "vendor.csv", {"who": {"column": "Accession Number", "mapping": "m.csv"}})
    assert main(["check", str(protocol)]) == 2


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "column", ["ward", "site", "hospital", "scanner", "site_id", "fluid", "Study Description"]
)
def test_a_column_of_groups_is_not_refused_by_its_name(column: str) -> None:
    assert refused_column(column) is None


@pytest.mark.timeout(10)
def test_column_names_are_compared_without_case_and_separators() -> None:
    assert {column_name_key(c) for c in ["Patient Name", "patient_name", "PATIENT-NAME", "patient.name"]} == {
        "patientname"
    }


# ---- free columns: entries that look like identifiers ----------------------------------------------


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ("DOE^JANE", "a personal name"),
        ("Doe, Jane", "a personal name"),
        ("Jane Doe", "a personal name"),
        ("Ana de Souza", "a personal name"),
        ("MRN 7777777", "a long number (an ID, a phone number or a date)"),
        ("555-123-4567", "a long number (an ID, a phone number or a date)"),
        ("19650304", "a long number (an ID, a phone number or a date)"),
        ("1965-03-04", "a date"),
        ("4/3/65", "a date"),
        ("4 Mar 1965", "a date"),
        ("March 4, 1965", "a date"),
        ("1.2.840.10008.5.1", "a UID"),
        ("jane@example.org", "an e-mail address"),
        ("North", None),
        ("Site A", None),
        ("Ward 7", None),
        ("Northgate General Hospital", None),
        ("Ysio Demo", None),
        ("CT-2", None),
        ("40–59", None),
    ],
)
def test_identifier_shapes(value: str, shape: str | None) -> None:
    assert identifier_shape(value) == shape


def _table(tmp_path: Path, wards: list[str]) -> PredictionTable:
    path = _write_csv(tmp_path / "vendor.csv", _vendor_rows(lambda i: wards[i % len(wards)]))
    return read_predictions(
        path,
        class_names=["normal", "nodule"],
        key_column="AccessionNumber",
        label_column="label",
        columns=["ward"],
    )


@pytest.mark.timeout(10)
@pytest.mark.parametrize("planted", ["DOE^JANE", "Doe, Jane", "Jane Doe", "19650304", "jane@example.org"])
def test_a_free_column_holding_an_identifier_needs_a_mapping(planted: str, tmp_path: Path) -> None:
    table = _table(tmp_path, ["North", "South", planted])
    with pytest.raises(DataError) as raised:
        check_subgroup_columns(table, {"ward": SubgroupSettings(column="ward")})
    message = str(raised.value)
    assert "subgroups.ward.column: column 'ward' holds an entry shaped like" in message
    assert (
        "Give subgroups.ward a mapping file (mapping: <file>.csv, with the columns value and group)"
        in message
    )
    assert planted not in message and "Jane" not in message and "JANE" not in message
    # with a mapping, or with bands, the column's values are never shown as they are
    check_subgroup_columns(table, {"ward": SubgroupSettings(column="ward", mapping="wards.csv")})


@pytest.mark.timeout(10)
def test_a_free_column_of_many_values_needs_a_mapping(tmp_path: Path) -> None:
    wards = [f"Ward {i}" for i in range(MAX_FREE_COLUMN_VALUES + 1)]
    table = _table(tmp_path, wards)
    with pytest.raises(
        DataError, match=r"column 'ward' holds 21 distinct entries, more than the 20 a column"
    ):
        check_subgroup_columns(table, {"ward": SubgroupSettings(column="ward")})
    # at the limit, the column is shown (its rare values pooled, as every subgroup's)
    check_subgroup_columns(
        _table(tmp_path, wards[:MAX_FREE_COLUMN_VALUES]), {"ward": SubgroupSettings(column="ward")}
    )


@pytest.mark.timeout(10)
def test_the_cohort_refuses_a_free_column_holding_an_identifier(tmp_path: Path) -> None:
    table = _table(tmp_path, ["North", "South", PLANTED])
    with pytest.raises(DataError, match="column 'ward' holds an entry shaped like a personal name"):
        cohort_from_predictions(
            table,
            labels_from_predictions(table, ["normal", "nodule"]),
            subgroups={"ward": SubgroupSettings(column="ward")},
            mappings={},
            key="AccessionNumber",
            pseudonymize=PSEUDONYMIZE,
            min_count_shown=5,
            labels_from_file=False,
        )


def _pdf_text(pdf: Path) -> str:
    return subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout


def _outputs(folder: Path) -> dict[str, str]:
    """Every file of a run folder as text: text files as read (bytes leniently), the PDF through poppler,
    and report.dcm as its header's elements and its encapsulated PDF's text.

    Compressed binary content (the PDF's streams, PNG figures) is not searched as bytes: a three-letter
    name occurs in a megabyte of compressed bytes by chance (about once in 16 million positions).
    """
    import pydicom

    binary = {".pdf", ".dcm", ".png", ".parquet"}
    texts = {
        str(p.relative_to(folder)): without_data_uris(p.read_bytes().decode("latin-1"))
        for p in folder.rglob("*")
        if p.is_file() and p.suffix not in binary
    }
    for pdf in folder.glob("*.pdf"):
        texts[f"{pdf.name} (pdftotext)"] = _pdf_text(pdf)
    for dcm in folder.glob("*.dcm"):
        ds = pydicom.dcmread(dcm)
        inner = folder / f".{dcm.stem}-encapsulated.pdf"
        inner.write_bytes(bytes(ds.EncapsulatedDocument))
        texts[f"{dcm.name} (encapsulated PDF, pdftotext)"] = _pdf_text(inner)
        inner.unlink()
        del ds.EncapsulatedDocument
        texts[f"{dcm.name} (header)"] = str(ds)
    return texts


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_name_held_by_50_studies_reaches_no_output(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name of 50 studies (past min_count_shown) in a free column: refused; mapped, shown as unmapped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    rows = _vendor_rows(_planted_ward)
    assert sum(row[2] == PLANTED for row in rows) == N_PLANTED
    _write_csv(tmp_path / "vendor.csv", rows)
    # the same rows as Parquet, their wards carrying a NUL, an escape and a right-to-left override
    dirty = {"North": "North\x00", "South": "\x1bSouth\u202e", PLANTED: PLANTED + "\x07"}
    columns = list(zip(*[[*row[:2], dirty[row[2]], *row[3:]] for row in rows], strict=True))
    table = pa.table({name: list(cells) for name, cells in zip(HEADER, columns, strict=True)})
    table = table.set_column(3, "logit:normal", pa.array([float(v) for v in columns[3]]))
    table = table.set_column(4, "logit:nodule", pa.array([float(v) for v in columns[4]]))
    pq.write_table(table, tmp_path / "vendor.parquet")

    protocol = _protocol(tmp_path, "vendor.csv", {"ward": {"column": "ward", "label": "Ward"}})
    assert main(["evaluate", str(protocol), "--no-progress"]) == 2
    refused = capfd.readouterr()
    assert "subgroups.ward.column: column 'ward' holds an entry shaped like a personal name (not shown)" in (
        refused.err
    )

    # a mapping shows the site's group names only (its names carry control characters too)
    (tmp_path / "wards.csv").write_text(
        "value,group\nNorth,North\x0bwing\nSouth,South wing\x1b\n", encoding="utf-8"
    )
    protocol = _protocol(
        tmp_path, "vendor.parquet", {"ward": {"column": "ward", "mapping": "wards.csv", "label": "Ward"}}
    )
    assert main(["check", str(protocol)]) == 0
    code = main(["evaluate", str(protocol), "--no-progress"])
    out, err = capfd.readouterr()
    runs = sorted((tmp_path / "reports").glob("vendor-*"), key=lambda p: p.stat().st_mtime_ns)
    folder = runs[-1]
    evaluation = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    assert code == VERDICT_EXIT[evaluation["verdict"]], err

    channels = {"stdout": refused.out, "stderr": refused.err, "stdout (run)": out, "stderr (run)": err}
    for run in runs:
        channels.update({f"{run.name}/{name}": text for name, text in _outputs(run).items()})
    leaks = [where for where, text in channels.items() if "DOE" in text or "JANE" in text]
    assert not leaks
    cohort = (folder / "cohort.csv").read_text(encoding="utf-8")
    assert "North wing" in cohort and "South wing" in cohort and "unmapped" in cohort
    controls = [
        where
        for where, text in channels.items()
        if where.endswith((".csv", ".json", "(pdftotext)", ".svg", ".log"))
        and (
            CONTROL_CHARACTERS.search(text.replace("\n", "").replace("\x0c", ""))
            or re.search(r"\\u00[01][0-9a-f]|\\u007f|\\u202e", text)
        )
    ]
    assert not controls


@pytest.mark.timeout(60)
def test_check_refuses_a_free_column_holding_an_identifier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_csv(tmp_path / "vendor.csv", _vendor_rows(_planted_ward))
    protocol = _protocol(tmp_path, "vendor.csv", {"ward": {"column": "ward"}})
    assert main(["check", str(protocol)]) == 2
    err = capsys.readouterr().err
    assert (
        "subgroups.ward.column: column 'ward' holds an entry shaped like a personal name (not shown)" in err
    )
    assert "DOE" not in err


# ---- control characters ----------------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("control", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_a_control_character_is_replaced_where_a_value_enters_the_cohort(control: str) -> None:
    assert normalise_text(f"CT{control}01") == "CT 01"
    assert attribute_value("StationName", {"StationName": f"{control}CT01{control}"}) == "CT01"
    assert attribute_value("Manufacturer", {"Manufacturer": f"ACME{control}"}) == "ACME"


@pytest.mark.timeout(10)
def test_a_nul_in_a_header_value_reaches_no_cohort_value(tmp_path: Path) -> None:
    instances = tuple(
        InstanceHeader(
            path=Path(f"/dicom/{i}.dcm"),
            values={
                "SOPInstanceUID": f"9.{i}",
                "StudyInstanceUID": f"1.{i}",
                "PatientID": f"p{i}",
                "InstitutionName": "North\x00gate\x1b[2J",
            },
        )
        for i in range(6)
    )
    cohort = build_cohort(
        ScanResult(root=Path("/dicom"), files_found=6, instances=instances, exclusions=()),
        LabelTable(labels={f"1.{i}": 0 for i in range(6)}, bad_rows=(), n_rows=6),
        subgroups={"site": SubgroupSettings(tag="InstitutionName")},
        key="StudyInstanceUID",
        pseudonymize=PSEUDONYMIZE,
    )
    assert {study.attributes["site"] for study in cohort.studies} == {"North gate [2J"}


@pytest.mark.timeout(10)
def test_a_mapping_s_group_names_lose_their_control_characters(tmp_path: Path) -> None:
    path = tmp_path / "wards.csv"
    path.write_text("value,group\nNorth\x00,North\x0bwing\u202e\n", encoding="utf-8")
    mapping = read_mapping(path)
    assert dict(mapping.groups) == {"North": "North wing"}
    assert mapping.group("North") == "North wing"


@pytest.mark.timeout(10)
def test_the_csv_writer_replaces_every_control_character(tmp_path: Path) -> None:
    cells = [f"a{c}b" for c in CONTROLS] + ["\x00=1", "=\x00", "\r=1", "plain"]
    path = tmp_path / "t.csv"
    write_csv_atomic(path, ["h\x00", *[f"c{i}" for i in range(len(cells) - 1)]], [cells])
    text = path.read_text(encoding="utf-8")
    assert not CONTROL_CHARACTERS.search(text.replace("\n", ""))
    assert text.count("\n") == 2  # no cell broke a row
    with path.open(newline="", encoding="utf-8") as handle:
        header, row = list(csv.reader(handle))
    assert header[0] == "h\ufffd"
    assert row[: len(CONTROLS)] == ["a\ufffdb"] * len(CONTROLS)
    # a control character in front of '=' no longer hides a formula, and one after it keeps the escape
    assert row[len(CONTROLS) :] == ["\ufffd=1", "'=\ufffd", "\ufffd=1", "plain"]
    assert csv_cell(-1.5) == -1.5 and csv_cell("-1.25") == "-1.25"


# ---- numbers: ASCII digits only ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0.25", 0.25),
        ("-1.5e3", -1500.0),
        (".5", 0.5),
        ("7.", 7.0),
        (" 7 ", 7.0),
        ("٠.٥", None),  # Arabic-Indic
        ("۰.۵", None),  # Extended Arabic-Indic (Persian)
        ("０.５", None),  # full width
        ("०.५", None),  # Devanagari
        ("1_000", None),
        ("1 000", None),
        ("0x10", None),
        ("1,5", None),
        ("", None),
        ("\u00a01", None),
    ],
)
def test_only_ascii_digits_are_numbers(text: str, number: float | None) -> None:
    assert ascii_float(text) == number


@pytest.mark.timeout(10)
def test_a_score_in_other_digits_is_an_unusable_row_named_by_its_column(tmp_path: Path) -> None:
    path = tmp_path / "vendor.csv"
    path.write_text(
        "AccessionNumber,prob:nodule\nA1,0.25\nA2,٠.٥\nA3,０.５\nA4,1_0\nA5,inf\nA6, 0.5 \n",
        encoding="utf-8",
    )
    table = read_predictions(path, class_names=["normal", "nodule"], key_column="AccessionNumber")
    assert sorted(table.rows) == ["A1", "A6"]
    assert table.bad_rows == (
        (3, "not a number in column prob:nodule"),
        (4, "not a number in column prob:nodule"),
        (5, "not a number in column prob:nodule"),
        (6, "not a finite number in column prob:nodule"),
    )
    assert np.exp(table.rows["A6"].logits).tolist() == [0.5, 0.5]


@pytest.mark.timeout(10)
def test_an_age_or_a_banded_value_in_other_digits_is_unknown() -> None:
    assert attribute_value("PatientAge", {"PatientAge": "٤٥Y"}) == "unknown"
    assert attribute_value("PatientAge", {"PatientAge": "045Y"}) == "45"
    assert (
        attribute_value("PatientAge", {"StudyDate": "٢٠٢٠٠١٠١", "PatientBirthDate": "19700101"}) == "unknown"
    )
    assert attribute_value("age", {"age": "٤٥"}, [0, 40, 60]) == "unknown"
    assert attribute_value("age", {"age": "45"}, [0, 40, 60]) == "40–59"
