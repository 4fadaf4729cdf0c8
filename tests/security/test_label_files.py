"""Labels files as sites have them: encodings, delimiters, broken quoting, huge fields, hostile cells.

Each one either reads correctly or ends in a DataError naming the file and line, never a traceback, a
hang or silently lost rows; no reason, message or log line carries the text of a cell.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
import os
from pathlib import Path

import pytest

from sitecal._pseudonym import Pseudonymizer
from sitecal.cohort import ScanResult, build_cohort
from sitecal.cohort.labels import read_labels
from sitecal.cohort.scan import InstanceHeader
from sitecal.errors import DataError

CLASSES = ["normal", "nodule", "effusion"]
UNKNOWN = "label is not one of the class names [normal, nodule, effusion] or an index 0..2"
PLANTED = "DOE^JANE MRN7777777 nodule"
KEY = "StudyInstanceUID"
LOGGER = "sitecal.cohort"  # labels and its CSV reader, sitecal.cohort._labels_csv


def _read(path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    return read_labels(path, key_column=KEY, label_column="label", class_names=CLASSES, **kwargs)  # type: ignore[arg-type]


def _error(path: Path, **kwargs: object) -> str:
    with pytest.raises(DataError) as info:
        _read(path, **kwargs)
    return str(info.value)


def _log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER)]


# --- encodings --------------------------------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("bom", "codec"), [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")]
)
def test_utf16_with_bom_as_excel_writes_unicode_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bom: bytes, codec: str
) -> None:
    # Excel's "Unicode Text": UTF-16 LE with a BOM, tab-separated, CRLF
    path = tmp_path / "labels.txt"
    path.write_bytes(bom + "StudyInstanceUID\tlabel\r\n1.2.3\tnodule\r\n1.2.4\t2\r\n".encode(codec))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        table = _read(path)
    assert table.labels == {"1.2.3": 1, "1.2.4": 2}
    assert table.bad_rows == ()
    assert _log(caplog) == [f"{path}: read as UTF-16 (with BOM), delimiter tab"]


@pytest.mark.timeout(10)
def test_utf8_with_bom_does_not_rename_the_first_column(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "labels.csv"
    path.write_bytes(codecs.BOM_UTF8 + b"StudyInstanceUID,label\n1.2.3,normal\n")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        table = _read(path)
    assert table.labels == {"1.2.3": 0}
    assert _log(caplog) == [f"{path}: read as UTF-8 (with BOM), delimiter ','"]


@pytest.mark.timeout(10)
def test_latin1_file_is_read_as_windows_1252(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # é in a column value and in a class name: a wrong decoding would fail to match the class
    path = tmp_path / "labels.csv"
    text = "StudyInstanceUID,label,site\n1.2.3,épanchement,Hôpital Sainte-Anne\n1.2.4,normal,Créteil\n"
    path.write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        table = read_labels(path, key_column=KEY, label_column="label", class_names=["normal", "épanchement"])
    assert table.labels == {"1.2.3": 1, "1.2.4": 0}
    assert _log(caplog) == [f"{path}: read as Windows-1252/Latin-1, delimiter ','"]


@pytest.mark.timeout(10)
def test_windows_1252_punctuation_is_read(tmp_path: Path) -> None:
    # 0x92 is a right single quote in Windows-1252 and a control character in Latin-1
    path = tmp_path / "labels.csv"
    path.write_bytes(b"StudyInstanceUID,label,note\n1.2.3,nodule,reader\x92s note\n")
    assert _read(path).labels == {"1.2.3": 1}


@pytest.mark.timeout(10)
def test_utf16_without_bom_is_refused_with_the_encodings_tried(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_bytes("StudyInstanceUID,label\n1.2.3,nodule\n".encode("utf-16-le"))
    assert _error(path) == (
        f"{path}: the labels file is not text in UTF-8 or Windows-1252/Latin-1. "
        "Save it as UTF-8 (in Excel: 'CSV UTF-8'), or as Parquet."
    )


@pytest.mark.timeout(10)
def test_bytes_undefined_in_windows_1252_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_bytes(b"StudyInstanceUID,label\n1.2.3,\x81\x8d\x90\n")
    assert _error(path) == (
        f"{path}: the labels file is not text in UTF-8 or Windows-1252/Latin-1. "
        "Save it as UTF-8 (in Excel: 'CSV UTF-8'), or as Parquet."
    )


@pytest.mark.timeout(10)
def test_broken_utf16_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_bytes(codecs.BOM_UTF16_LE + "StudyInstanceUID,label\n".encode("utf-16-le") + b"\x00\xd8")
    assert _error(path) == (
        f"{path}: the labels file is not text in UTF-16 (with BOM). "
        "Save it as UTF-8 (in Excel: 'CSV UTF-8'), or as Parquet."
    )


@pytest.mark.timeout(10)
def test_a_spreadsheet_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_bytes(b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00" + bytes(range(256)))
    assert "is not text in UTF-8 or Windows-1252/Latin-1" in _error(path)


# --- delimiters ------------------------------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("delimiter", "name"), [(";", "';'"), ("\t", "tab"), ("|", "'|'"), (",", "','")])
def test_delimiter_is_detected_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, delimiter: str, name: str
) -> None:
    path = tmp_path / "labels.csv"
    rows = [["StudyInstanceUID", "label", "note"], ["1.2.3", "nodule", "a, b; c"], ["1.2.4", "0", ""]]
    quoted = [[f'"{cell}"' if delimiter in cell else cell for cell in row] for row in rows]
    path.write_text("".join(delimiter.join(row) + "\n" for row in quoted), encoding="utf-8")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        table = _read(path)
    assert table.labels == {"1.2.3": 1, "1.2.4": 0}
    assert _log(caplog) == [f"{path}: read as UTF-8, delimiter {name}"]


@pytest.mark.timeout(10)
def test_the_delimiter_that_finds_the_columns_wins_over_the_sniffed_one(tmp_path: Path) -> None:
    # a one-line sample sniffs as ',' (the Sniffer's preference); ';' finds both named columns
    path = tmp_path / "labels.csv"
    path.write_text("Study,Instance;StudyInstanceUID;label\nx;1.2.3;effusion\n", encoding="utf-8")
    assert _read(path).labels == {"1.2.3": 2}


@pytest.mark.timeout(10)
def test_missing_column_names_the_columns_and_the_delimiter(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("uid;diagnosis\n1.2.3;nodule\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}: no column 'StudyInstanceUID' (columns: uid, diagnosis; delimiter ';'). "
        "Set data.key_column in the protocol to the right column."
    )
    path.write_text(f"{KEY};diagnosis\n1.2.3;nodule\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}: no column 'label' (columns: StudyInstanceUID, diagnosis; delimiter ';'). "
        "Set data.label_column in the protocol to the right column."
    )


@pytest.mark.timeout(10)
def test_a_file_without_header_does_not_echo_its_first_row(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("1.2.840.113619.2.55.3,DOE^JANE,nodule\n1.2.840.113619.2.55.4,ROE^RICHARD,normal\n")
    assert _error(path) == (
        f"{path}: no column 'StudyInstanceUID' (the first line holds values, not column names; "
        "delimiter ','). Set data.key_column in the protocol to the right column and give the file a header "
        "row naming the columns."
    )


@pytest.mark.timeout(10)
def test_a_named_column_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("StudyInstanceUID,label,label\n1.2.3,normal,nodule\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}: the column 'label' appears 2 times in the header. "
        "Rename or remove the extra ones, so that data.label_column names one column."
    )


# --- quoting ---------------------------------------------------------------------------------------------


def _ten_lines(line_3: str, line_7: str = "1.2.7,normal") -> str:
    rows = [
        "StudyInstanceUID,label",
        "1.2.2,normal",
        line_3,
        "1.2.4,nodule",
        "1.2.5,normal",
        "1.2.6,effusion",
    ]
    return "\n".join([*rows, line_7, "1.2.8,normal", "1.2.9,nodule", "1.2.10,normal"]) + "\n"


def _unclosed(path: Path, line: int) -> str:
    return (
        f'{path}: line {line}: a quote (") opens here and is never closed; the rows after it would be lost. '
        "Fix the quoting."
    )


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("line_3", "line_7"),
    [
        ('1.2.3,"nodule', "1.2.7,normal"),  # open to the end of the file
        ('1.2.3,"nodule', '1.2.7,"normal"'),  # closed by the next quote, text after it
        ('1.2.3,"nodule', '1.2.7,normal"'),  # closed cleanly by a stray quote: the label holds 5 lines
        ('"1.2.3,nodule', '1.2.7",normal'),  # in the key column
    ],
)
def test_unclosed_quote_on_line_3_of_10_is_reported_at_its_line(
    tmp_path: Path, line_3: str, line_7: str
) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(_ten_lines(line_3, line_7), encoding="utf-8")
    assert _error(path) == _unclosed(path, 3)


@pytest.mark.timeout(10)
def test_unclosed_quote_in_a_note_column_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    lines = [
        "StudyInstanceUID,label,note",
        "1.2.2,normal,",
        '1.2.3,nodule,"seen',
        "1.2.4,nodule,",
        '1.2.5,normal,x"',
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _error(path) == _unclosed(path, 3)


@pytest.mark.timeout(10)
def test_unclosed_quote_on_the_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(_ten_lines("1.2.3,normal").rstrip("\n") + ',"x', encoding="utf-8")
    assert _error(path) == _unclosed(path, 10)


@pytest.mark.timeout(10)
def test_unclosed_quote_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text('StudyInstanceUID,"label\n1.2.3,nodule\n1.2.4,"normal"\n', encoding="utf-8")
    assert _error(path) == _unclosed(path, 1)


@pytest.mark.timeout(20)
def test_unclosed_quote_before_a_long_file_is_still_a_quote_error(tmp_path: Path) -> None:
    # the open field passes the csv module's field limit long before the end of the file
    path = tmp_path / "labels.csv"
    rows = "".join(f"1.2.{i},normal\n" for i in range(20_000))
    path.write_text(f'StudyInstanceUID,label\n1.2.1,"nodule\n{rows}', encoding="utf-8")
    assert _error(path) == _unclosed(path, 2)


@pytest.mark.timeout(10)
def test_text_after_a_closing_quote_is_located(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text('StudyInstanceUID,label\n1.2.3,nodule\n1.2.4,"normal" x\n', encoding="utf-8")
    assert _error(path) == (
        f'{path}: line 3: text follows a closing quote (") in the same field. '
        'Fix the quoting: a field that holds a quote is quoted as a whole, its quotes doubled ("").'
    )


@pytest.mark.timeout(10)
def test_a_multi_line_note_is_kept_and_lines_stay_right(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    text = 'StudyInstanceUID,label,note\n1.2.3,nodule,"seen twice\nrepeat ""CT"" advised"\n1.2.4,cat,\n'
    path.write_text(text, encoding="utf-8")
    table = _read(path)
    assert table.labels == {"1.2.3": 1}
    assert table.bad_rows == ((4, UNKNOWN),)


# --- size ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_131_kb_field_is_reported_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(f"StudyInstanceUID,label\n1.2.3,nodule\n1.2.4,{'x' * 134_000}\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}: line 3: a field of more than 131072 characters; is this a labels file? Check data.labels."
    )


@pytest.mark.timeout(10)
def test_file_above_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("StudyInstanceUID,label\n" + "1.2.3,nodule\n" * 10, encoding="utf-8")
    assert _error(path, max_bytes=100) == (
        f"{path}: the labels file has more than 100 bytes (the limit); is this a labels file? "
        "Check data.labels: a labels file holds one short row per study."
    )
    assert _read(path, max_bytes=path.stat().st_size).labels == {"1.2.3": 1}


@pytest.mark.timeout(10)
def test_a_fifo_and_dev_zero_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "labels.csv"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.csv"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero, tmp_path):
        assert _error(path) == (
            f"{path}: the labels file is not a regular file (a folder, pipe or device). "
            "Point data.labels at a CSV or Parquet file."
        )


@pytest.mark.timeout(10)
@pytest.mark.parametrize("content", [b"", b"\n\n  \n", codecs.BOM_UTF8, codecs.BOM_UTF16_LE])
def test_empty_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "labels.csv"
    path.write_bytes(content)
    assert _error(path) == (
        f"{path}: the labels file is empty. It needs a header row naming the columns "
        "(StudyInstanceUID, label) and one row per study."
    )


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "text", ["StudyInstanceUID,label", "StudyInstanceUID,label\r\n", "StudyInstanceUID,label\n,,\n"]
)
def test_header_only(tmp_path: Path, text: str) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(text, encoding="utf-8")
    assert _error(path) == f"{path}: the labels file has a header but no rows."


# --- label cells -----------------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_only_ascii_digits_are_indices(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    cells = ["²", "１", "٢", "0", "02", "3", "9" * 5000, "-1", "1.0", ""]
    path.write_text("StudyInstanceUID,label\n" + "".join(f"1.2.{i},{c}\n" for i, c in enumerate(cells)))
    table = _read(path)
    assert table.labels == {"1.2.3": 0, "1.2.4": 2}
    assert table.bad_rows == (
        (2, UNKNOWN),
        (3, UNKNOWN),
        (4, UNKNOWN),
        (7, UNKNOWN),
        (8, UNKNOWN),
        (9, UNKNOWN),
        (10, UNKNOWN),
        (11, "empty label"),
    )


def _hostile_labels(path: Path) -> None:
    path.write_text(
        "StudyInstanceUID,label\n"
        f"1.2.840.7777777.1,{PLANTED}\n"  # a name and an MRN typed into the label
        "1.2.840.7777777.2,nodule\n"
        "1.2.840.7777777.2,normal\n"  # the same key twice, different labels
        ",nodule\n"
        "1.2.840.7777777.3,²\n"
        "1.2.840.7777777.4,effusion\n",  # a label without a study
        encoding="utf-8",
    )


@pytest.mark.timeout(10)
def test_cell_text_and_keys_reach_no_reason_and_no_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "labels.csv"
    _hostile_labels(path)
    with caplog.at_level(logging.INFO, logger="sitecal"):
        table = _read(path)
        scan = ScanResult(
            root=tmp_path,
            files_found=1,
            instances=(
                InstanceHeader(
                    path=tmp_path / "a.dcm",
                    values={"SOPInstanceUID": "9.1", KEY: "1.2.840.7777777.9", "PatientID": "MRN1"},
                ),
            ),
            exclusions=(),
        )
        cohort = build_cohort(scan, table, subgroups={}, key=KEY, pseudonymize=Pseudonymizer(b"k" * 32))
    assert table.bad_rows == (
        (2, UNKNOWN),
        (4, "key labelled twice with different labels"),
        (5, "empty StudyInstanceUID"),
        (6, UNKNOWN),
    )
    written = [str(dataclasses.asdict(e)) for e in cohort.exclusions]
    for text in written + [r.getMessage() for r in caplog.records]:
        for secret in (PLANTED, "DOE", "MRN7777777", "7777777", "²"):
            assert secret not in text
    label_rows = [(e.key, e.reason) for e in cohort.exclusions if e.key and e.key.startswith("line ")]
    assert label_rows == [
        ("line 2", f"unusable label row: {UNKNOWN}"),
        ("line 4", "unusable label row: key labelled twice with different labels"),
        ("line 5", "unusable label row: empty StudyInstanceUID"),
        ("line 6", f"unusable label row: {UNKNOWN}"),
    ]


@pytest.mark.timeout(10)
def test_bad_rows_are_counted_on_the_console(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "labels.csv"
    _hostile_labels(path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _read(path)
    assert _log(caplog) == [
        f"{path}: 4 of 6 label rows cannot be used and are excluded ({UNKNOWN}: 2; key labelled twice with "
        "different labels: 1; empty StudyInstanceUID: 1), e.g. line 2."
    ]


@pytest.mark.timeout(10)
def test_labels_matching_no_study_say_to_check_the_key(caplog: pytest.LogCaptureFixture) -> None:
    from sitecal.cohort import LabelTable

    values = {"SOPInstanceUID": "9.1", KEY: "1.1", "AccessionNumber": "A1"}
    header = InstanceHeader(path=Path("/d/a.dcm"), values=values)
    scan = ScanResult(root=Path("/d"), files_found=1, instances=(header,), exclusions=())
    labels = LabelTable(labels={"1.1": 0, "1.2": 1}, bad_rows=(), n_rows=2)
    with caplog.at_level(logging.WARNING, logger="sitecal.cohort._build"):
        build_cohort(scan, labels, subgroups={}, key="AccessionNumber", pseudonymize=Pseudonymizer(b"k" * 32))
    assert [r.getMessage() for r in caplog.records if r.name == "sitecal.cohort._build"] == [
        "none of the 2 keys in the labels file matches the AccessionNumber of any of the 1 study found: "
        "check data.key and data.key_column in the protocol, and that the labels belong to these studies."
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sitecal.cohort._build"):
        build_cohort(scan, labels, subgroups={}, key=KEY, pseudonymize=Pseudonymizer(b"k" * 32))
    assert caplog.records == []


@pytest.mark.timeout(10)
def test_rows_of_bare_delimiters_are_skipped_not_taken_for_the_header(tmp_path: Path) -> None:
    # spreadsheets write ,,, or ;;; above and below a table
    path = tmp_path / "labels.csv"
    path.write_text(",,\nStudyInstanceUID;label\n1.2.3;nodule\n;;\n1.2.4;normal\n", encoding="utf-8")
    table = _read(path)
    assert table.labels == {"1.2.3": 1, "1.2.4": 0}
    assert (table.n_rows, table.bad_rows) == (2, ())
