"""Studies from a real Orthanc over DICOMweb: the same numbers as the folder route, a resumable store,
and errors a PACS administrator can act on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydicom
import pytest
import yaml
from tests.conftest import write_demo_protocol
from tests.pacs.orthanc import PASSWORD, USER, running_orthanc

from sitecal.demo import generate_demo
from sitecal.errors import DataError
from sitecal.pacs import retrieve_studies, source_problems
from sitecal.pacs._dicomweb import DicomwebPeer, PacsError
from sitecal.protocol import load_protocol
from sitecal.protocol._pacs import DicomwebSource
from sitecal.run import run_protocol

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pacs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An Orthanc loaded with a generated demo cohort, and a folder of exactly the studies it accepted."""
    root = tmp_path_factory.mktemp("pacs")
    manifest = generate_demo(root / "data", n_studies=120, seed=5)
    accepted = root / "accepted"
    with running_orthanc(root / "orthanc") as server:
        for path in sorted(p for p in manifest.dicom_dir.rglob("*") if p.is_file()):
            if server.upload(path) == "Success":  # not the planted junk, nor a second copy of an instance
                target = accepted / path.relative_to(manifest.dicom_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        credentials = root / "pacs-credentials.yaml"
        credentials.write_text(yaml.safe_dump({"username": USER, "password": PASSWORD}))
        credentials.chmod(0o600)
        yield SimpleNamespace(
            server=server, manifest=manifest, accepted=accepted, credentials=credentials, root=root
        )


def _source(pacs: Any, **changes: Any) -> dict[str, Any]:
    return {"dicomweb": pacs.server.dicomweb, "credentials_file": str(pacs.credentials), **changes}


def _protocol(root: Path, pacs: Any, *, source: dict[str, Any] | None) -> Path:
    cohort = SimpleNamespace(dicom_dir=pacs.accepted, labels_csv=pacs.manifest.labels_csv)
    root.mkdir(parents=True)
    path = write_demo_protocol(root, cohort, n_resamples=100)
    raw = yaml.safe_load(path.read_text())
    raw["evaluation"]["planning"] = {"simulations": 0}
    if source is not None:
        del raw["data"]["dicom_dir"]
        raw["data"]["source"] = source
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _numbers(folder: Path) -> dict[str, Any]:
    document = json.loads((folder / "evaluation.json").read_text())
    del document["protocol"]  # the two protocols differ in their data section, so in their sha256
    return document


def test_the_dicomweb_route_gives_the_folder_routes_numbers(pacs: Any, tmp_path: Path) -> None:
    by_folder = run_protocol(load_protocol(_protocol(tmp_path / "folder", pacs, source=None)), progress=False)
    by_pacs = run_protocol(
        load_protocol(_protocol(tmp_path / "pacs", pacs, source=_source(pacs))), progress=False
    )
    assert _numbers(by_pacs.folder) == _numbers(by_folder.folder)
    record = json.loads((by_pacs.folder / "provenance.json").read_text())["pacs"]
    studies = len(pacs.server.studies())
    assert record["studies_found"] == studies and record["studies_failed"] == 0
    assert record["studies_retrieved_now"] == studies and record["route"] == "dicomweb"
    # no identifier of the cohort and no credential in any file the run wrote, nor in the store's index
    identifiers = set()
    for path in (p for p in pacs.accepted.rglob("*") if p.is_file()):
        ds = pydicom.dcmread(path, stop_before_pixels=True)
        identifiers |= {
            str(ds.get(k, "")) for k in ("StudyInstanceUID", "SOPInstanceUID", "PatientID", "AccessionNumber")
        }
    identifiers.discard("")
    written = [p for p in by_pacs.folder.rglob("*") if p.is_file() and p.suffix != ".png"]
    written.append(load_protocol(tmp_path / "pacs" / "protocol.yaml").pacs_store / "index.json")
    for path in written:
        text = path.read_bytes().decode("latin-1")
        assert PASSWORD not in text, path.name
        assert not [i for i in identifiers if i in text], path.name


def test_a_retrieval_stopped_half_way_fetches_only_what_is_missing(
    pacs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DicomwebSource.model_validate(_source(pacs, max_connections=1))
    total = len(pacs.server.studies())
    fetch = DicomwebPeer.fetch
    calls = {"n": 0}

    def killed_after_40(self: DicomwebPeer, *args: Any) -> bytes:
        calls["n"] += 1
        if calls["n"] > 40:
            raise KeyboardInterrupt  # the operator's Ctrl-C, half-way
        return fetch(self, *args)

    monkeypatch.setattr(DicomwebPeer, "fetch", killed_after_40)
    with pytest.raises(KeyboardInterrupt):
        retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)
    monkeypatch.setattr(DicomwebPeer, "fetch", fetch)
    again = retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)
    summary = again.summary
    # every study has one instance: 40 were complete, the rest are fetched now, nothing twice
    assert summary["studies_from_store"] == 40
    assert summary["studies_retrieved_now"] == total - 40 == summary["instances_fetched"]
    third = retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False).summary
    # a complete store asks only the study search (QIDO-RS, two pages: the answer and an empty one) ...
    assert third["requests"] == 2 and third["instances_fetched"] == 0 and third["studies_from_store"] == total
    # ... and the restart asked, per missing study only, its instance search (two pages) and one retrieval
    assert summary["requests"] - third["requests"] == 3 * (total - 40)
    assert third["objects_sha256"] == summary["objects_sha256"]


def test_a_study_that_cannot_be_fetched_is_an_exclusion_and_the_retrieval_goes_on(
    pacs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DicomwebSource.model_validate(_source(pacs))
    fetch = DicomwebPeer.fetch
    refused: list[str] = []

    def one_fails(self: DicomwebPeer, study: Any, series: str, sop: str) -> bytes:
        if not refused or refused[0] == study.study_uid:
            refused[:1] = [study.study_uid]
            raise PacsError(
                "WADO-RS instance retrieval: HTTP 503 Service Unavailable; the server failed the request."
            )
        return fetch(self, study, series, sop)

    monkeypatch.setattr(DicomwebPeer, "fetch", one_fails)
    result = retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)
    assert [uid for uid, _ in result.failed] == refused
    assert result.failed[0][1] == (
        "not retrieved from the PACS: WADO-RS instance retrieval: HTTP 503 Service Unavailable; the server "
        "failed the request."
    )
    assert result.summary["studies_failed"] == 1
    assert result.summary["studies_retrieved_now"] == len(pacs.server.studies()) - 1


def test_check_names_a_wrong_password_and_a_stopped_server(pacs: Any, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({"username": USER, "password": "not-the-password"}))
    wrong.chmod(0o600)
    (problem,) = source_problems(
        DicomwebSource.model_validate(_source(pacs, credentials_file=str(wrong))), Path
    )
    assert problem.startswith("data.source: QIDO-RS study search: HTTP 401 Unauthorized")
    assert "the server refused the credentials: check SITECAL_PACS_USERNAME" in problem
    assert "not-the-password" not in problem
    open_to_all = tmp_path / "open.yaml"
    open_to_all.write_text(yaml.safe_dump({"username": USER, "password": PASSWORD}))
    open_to_all.chmod(0o644)
    (problem,) = source_problems(
        DicomwebSource.model_validate(_source(pacs, credentials_file=str(open_to_all))), Path
    )
    assert "readable by others (mode 644)" in problem and "chmod 600" in problem
    assert source_problems(DicomwebSource.model_validate(_source(pacs)), Path) == []
    with running_orthanc(tmp_path / "stopped") as other:
        url = other.dicomweb
    (problem,) = source_problems(DicomwebSource.model_validate(_source(pacs, dicomweb=url)), Path)
    assert (
        "cannot connect to 127.0.0.1" in problem and "Check that the DICOMweb service is running" in problem
    )


def test_a_query_that_matches_nothing_says_so(pacs: Any, tmp_path: Path) -> None:
    source = _source(pacs, query={"study_dates": ["1990-01-01", "1990-12-31"]})
    loaded = load_protocol(_protocol(tmp_path / "empty", pacs, source=source))
    with pytest.raises(DataError) as caught:
        run_protocol(loaded, progress=False)
    message = str(caught.value)
    assert message.startswith("data.source: no study could be analysed")
    assert (
        "The PACS query returned no study: check data.source.query (dates, modalities, worklist)." in message
    )
