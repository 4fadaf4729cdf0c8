"""report.dcm back to the archive: STOW-RS after the run, C-STORE with ``sitecal send``, each found back in
a real Orthanc by a query with its PDF byte for byte; a refused send is recorded and named."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pydicom
import pytest
import requests
import yaml
from tests.pacs.orthanc import AE_TITLE, PASSWORD, USER, Orthanc, running_orthanc
from tests.pacs.routes import demo_protocol

from sitecal.cli import main
from sitecal.protocol import load_protocol
from sitecal.run import RunResult, run_protocol

pytestmark = pytest.mark.slow


def _found_pdf(server: Orthanc, report: Path) -> bytes:
    """The PDF of the report Orthanc holds, found by a QIDO-RS search for the report's document ID."""
    ds = pydicom.dcmread(report)
    found = requests.get(
        f"{server.dicomweb}/instances",
        params={"StudyID": str(ds.StudyID), "SOPClassUID": str(ds.SOPClassUID)},
        auth=(USER, PASSWORD),
        timeout=30,
    )
    found.raise_for_status()
    (item,) = found.json()
    assert item["00080018"]["Value"] == [str(ds.SOPInstanceUID)]
    (orthanc_id,) = requests.post(
        f"{server.url}/tools/lookup", data=str(ds.SOPInstanceUID), auth=(USER, PASSWORD), timeout=30
    ).json()
    pdf = requests.get(f"{server.url}/instances/{orthanc_id['ID']}/pdf", auth=(USER, PASSWORD), timeout=30)
    pdf.raise_for_status()
    requests.delete(f"{server.url}/instances/{orthanc_id['ID']}", auth=(USER, PASSWORD), timeout=30)
    return pdf.content


def _rewrite(path: Path, **report: Any) -> None:
    raw = yaml.safe_load(path.read_text())
    raw["report"].update(report)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def test_the_report_goes_back_by_stow_after_the_run_and_by_c_store_with_send(
    pacs: Any, folder_run: RunResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_orthanc(tmp_path / "archive") as archive:
        stow = {"dicomweb": archive.dicomweb, "credentials_file": str(pacs.credentials), "after_run": True}
        path = demo_protocol(tmp_path / "run", pacs, source=None, send_to=stow)
        result = run_protocol(load_protocol(path), progress=False)
        assert result.sent is not None and result.sent["outcome"] == "stored"
        report = result.folder / "report.dcm"
        assert _found_pdf(archive, report) == (result.folder / "report.pdf").read_bytes()
        # sitecal send with a protocol naming a DIMSE archive: C-STORE
        dimse = {"dimse": {"host": "127.0.0.1", "port": archive.dicom_port, "ae_title": AE_TITLE}}
        other = tmp_path / "dimse.yaml"
        shutil.copyfile(path, other)
        _rewrite(other, send_to=dimse)
        assert main(["send", str(result.folder), "--protocol", str(other)]) == 0
        assert _found_pdf(archive, report) == (result.folder / "report.pdf").read_bytes()
        # and with the run's own protocol (relative paths from the protocol's folder): STOW-RS again
        assert main(["send", str(result.folder)]) == 0
        assert _found_pdf(archive, report) == (result.folder / "report.pdf").read_bytes()
    said = capsys.readouterr().out
    where = f"{AE_TITLE}@127.0.0.1:{archive.dicom_port}"
    assert f"Sent:    report.dcm to {where} by C-STORE: status 0x0000, stored" in said
    records = json.loads((result.folder / "sent.json").read_text())
    assert [(r["how"], r["outcome"]) for r in records] == [
        ("STOW-RS", "stored"),
        ("C-STORE", "stored"),
        ("STOW-RS", "stored"),
    ]
    assert records[1]["answer"] == "status 0x0000, stored"
    assert {r["report_sha256"] for r in records} == {hashlib.sha256(report.read_bytes()).hexdigest()}
    ds = pydicom.dcmread(report)
    for uid in (ds.SOPInstanceUID, ds.StudyInstanceUID, ds.SeriesInstanceUID):
        assert str(uid) not in (result.folder / "sent.json").read_text()
    assert PASSWORD not in (result.folder / "run.log").read_text()


def test_a_send_the_archive_refuses_is_recorded_and_named(
    pacs: Any, folder_run: RunResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run-copy"
    shutil.copytree(folder_run.folder, folder)
    protocol = tmp_path / "protocol.yaml"
    protocol.write_text((folder / "protocol.yaml").read_text())
    with running_orthanc(tmp_path / "stopped") as stopped:
        port = stopped.dicom_port
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({"username": USER, "password": "not-the-password"}))
    wrong.chmod(0o600)
    with running_orthanc(tmp_path / "archive") as archive:
        _rewrite(protocol, send_to={"dicomweb": archive.dicomweb, "credentials_file": str(wrong)})
        assert main(["send", str(folder), "--protocol", str(protocol)]) == 2
        refused = capsys.readouterr().err
        _rewrite(protocol, send_to={"dimse": {"host": "127.0.0.1", "port": port, "ae_title": AE_TITLE}})
        assert main(["send", str(folder), "--protocol", str(protocol)]) == 2
        stopped_said = capsys.readouterr().err
        assert requests.get(f"{archive.url}/instances", auth=(USER, PASSWORD), timeout=30).json() == []
        # a protocol that sends after the run is refused by check (and so by run) before any work
        _rewrite(
            protocol,
            send_to={"dicomweb": archive.dicomweb, "credentials_file": str(wrong), "after_run": True},
        )
        assert main(["check", str(protocol)]) == 2
        checked = capsys.readouterr().err
    assert "  report.send_to: QIDO-RS study search: HTTP 401 Unauthorized" in checked
    assert "sitecal: error: report.send_to: report.dcm not sent. STOW-RS: HTTP 401 Unauthorized" in refused
    assert "not-the-password" not in refused
    assert f"cannot connect to {AE_TITLE} at 127.0.0.1:{port}" in stopped_said
    records = json.loads((folder / "sent.json").read_text())
    assert [(r["how"], r["outcome"]) for r in records] == [
        ("STOW-RS", "not stored"),
        ("C-STORE", "not stored"),
    ]
    assert records[0]["reason"].startswith("STOW-RS: HTTP 401 Unauthorized")
    log = (folder / "run.log").read_text()
    assert "report.dcm not sent to" in log and "not-the-password" not in log


def test_a_run_without_an_archive_is_sent_where_to_says(
    folder_run: RunResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose protocol names no archive (the demo's): --to names one; without it, exit 2 saying so."""
    folder = tmp_path / "run-copy"
    shutil.copytree(folder_run.folder, folder)
    assert load_protocol(folder / "protocol.yaml").protocol.report.send_to is None
    assert main(["send", str(folder)]) == 2
    assert "report.send_to is not set: name the archive with --to" in capsys.readouterr().err
    assert main(["send", str(folder), "--to", "ftp://archive.example.org"]) == 2
    assert "--to 'ftp://archive.example.org': " in capsys.readouterr().err
    with running_orthanc(tmp_path / "archive") as archive:
        to = f"dimse://{AE_TITLE}@127.0.0.1:{archive.dicom_port}"
        assert main(["send", str(folder), "--to", to]) == 0
        assert _found_pdf(archive, folder / "report.dcm") == (folder / "report.pdf").read_bytes()
    assert (
        f"Sent:    report.dcm to {AE_TITLE}@127.0.0.1:{archive.dicom_port} by C-STORE"
        in capsys.readouterr().out
    )
    records = json.loads((folder / "sent.json").read_text())
    assert [(r["how"], r["outcome"]) for r in records] == [("C-STORE", "stored")]
