"""``resolved.json``: what a run records of where its protocol's paths were taken from, read back on no
trust (sealed, well formed, absolute)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sitecal._seal import COMPLETE, write_seal
from sitecal.errors import DataError, SealError
from sitecal.run._resolved import RESOLVED, Resolved, read_resolved

KEY = b"k" * 32


def _record(protocol_file: object) -> dict[str, object]:
    return {"format": "sitecal resolved paths", "version": 1, "protocol_file": protocol_file}


def test_the_record_round_trips(tmp_path: Path) -> None:
    record = Resolved(tmp_path / "site" / "demo.yaml")
    assert Resolved.from_dict(json.loads(json.dumps(record.to_dict())), tmp_path) == record


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([], "not a record sitecal 'sitecal resolved paths' version 1"),
        ({**_record("/a/demo.yaml"), "version": 2}, "not a record sitecal"),
        (_record("site/demo.yaml"), "protocol_file: expected an absolute path"),
        (_record(7), "protocol_file: expected an absolute path"),
        (_record("/a/\0/demo.yaml"), "protocol_file: expected an absolute path"),
        (_record("/" + "a" * 5000), "protocol_file: expected an absolute path"),
    ],
)
def test_a_record_no_run_writes_is_refused_naming_the_file(
    tmp_path: Path, document: object, expected: str
) -> None:
    with pytest.raises(DataError, match="^" + re.escape(f"{tmp_path / RESOLVED}: {expected}")):
        Resolved.from_dict(document, tmp_path / RESOLVED)


def test_read_back_against_the_seal_before_the_key_is_known(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    write_seal(folder, KEY, state=COMPLETE)
    assert read_resolved(folder) is None  # an older run: no record in its seal
    (folder / RESOLVED).write_text(json.dumps(_record(str(tmp_path / "demo.yaml"))))
    assert read_resolved(folder) is None  # an added file is the seal's check to refuse, not a record
    write_seal(folder, KEY, state=COMPLETE)
    recorded = read_resolved(folder)
    assert recorded is not None and recorded.protocol_file == tmp_path / "demo.yaml"
    (folder / RESOLVED).write_text(json.dumps(_record(str(tmp_path / "other.yaml"))))
    with pytest.raises(SealError, match="^" + re.escape(f"{folder / RESOLVED}: missing, or edited")):
        read_resolved(folder)
    (folder / RESOLVED).write_bytes(b"\xff not json")
    write_seal(folder, KEY, state=COMPLETE)
    with pytest.raises(DataError, match="^" + re.escape(f"{folder / RESOLVED}: not JSON")):
        read_resolved(folder)


def _older_run(tmp_path: Path, output_dir: str) -> Path:
    """A run folder as an earlier sitecal left it: its protocol.yaml sealed, no resolved.json."""
    from tests.conftest import DEMO_PROTOCOL

    text = DEMO_PROTOCOL.read_text(encoding="utf-8").replace(
        "output_dir: ../reports", f"output_dir: {output_dir}"
    )
    assert f"output_dir: {output_dir}" in text
    folder = tmp_path / "site" / "reports" / "demo-20260101T000000Z"
    folder.mkdir(parents=True)
    (folder / "protocol.yaml").write_text(text, encoding="utf-8")
    write_seal(folder, KEY, state=COMPLETE)
    return folder


def test_an_older_run_finds_its_protocol_s_folder_from_output_dir(tmp_path: Path) -> None:
    from sitecal.run._resolved import run_protocol_of

    loaded = run_protocol_of(_older_run(tmp_path, "reports"))
    assert loaded.path == (tmp_path / "site" / "protocol.yaml").resolve()
    with pytest.raises(DataError, match=r"report\.output_dir leads out of the protocol's folder.*--protocol"):
        run_protocol_of(_older_run(tmp_path / "b", "../reports"))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("http://pacs.example.org/dicom-web", "plain http sends studies and credentials in clear"),
        ("https://user@pacs.example.org/dicom-web", "no user, query or fragment"),
        ("dimse://PACS@host", "expected dimse://AE_TITLE@host:port"),
        ("dimse://A_TITLE_OF_MORE_THAN_16@host:104", "expected dimse://AE_TITLE@host:port"),
        ("dimse://PACS@host:70000", "port"),
    ],
)
def test_an_archive_named_on_the_command_line_is_checked_as_send_to_is(text: str, reason: str) -> None:
    from sitecal.errors import InputError
    from sitecal.run._send import parse_destination

    with pytest.raises(InputError, match=re.escape(f"--to {text!r}")) as refused:
        parse_destination(text)
    assert reason in str(refused.value)
    assert parse_destination("https://pacs.example.org/dicom-web/").dicomweb == (
        "https://pacs.example.org/dicom-web"
    )
    dimse = parse_destination("dimse://ORTHANC@127.0.0.1:4242")
    assert (dimse.dimse.ae_title, dimse.dimse.host, dimse.dimse.port) == ("ORTHANC", "127.0.0.1", 4242)
