"""Studies from a real Orthanc over DICOMweb: the same numbers as the folder route, a resumable store,
and errors a PACS administrator can act on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.pacs.orthanc import PASSWORD, USER, running_orthanc
from tests.pacs.routes import demo_protocol, leaks, numbers
from tqdm import tqdm

from sitecal.errors import DataError
from sitecal.pacs import retrieve_studies, source_problems
from sitecal.pacs._dicomweb import DicomwebPeer, PacsError
from sitecal.protocol import load_protocol
from sitecal.protocol._pacs import DicomwebSource
from sitecal.run import run_protocol

pytestmark = pytest.mark.slow


def _source(pacs: Any, **changes: Any) -> dict[str, Any]:
    return {"dicomweb": pacs.server.dicomweb, "credentials_file": str(pacs.credentials), **changes}


def test_the_dicomweb_route_gives_the_folder_routes_numbers(
    pacs: Any, by_folder: dict[str, Any], tmp_path: Path
) -> None:
    by_pacs = run_protocol(
        load_protocol(demo_protocol(tmp_path / "pacs", pacs, source=_source(pacs))), progress=False
    )
    record = json.loads((by_pacs.folder / "provenance.json").read_text())["pacs"]
    assert record["studies_failed"] == 0, record["failures"]  # why, before the numbers differ
    assert numbers(by_pacs.folder) == by_folder
    studies = len(pacs.server.studies())
    assert record["studies_found"] == studies and record["studies_failed"] == 0
    assert record["studies_retrieved_now"] == studies and record["route"] == "dicomweb"
    # no identifier of the cohort and no credential in any file the run wrote, nor in the store's index
    store = load_protocol(tmp_path / "pacs" / "protocol.yaml").pacs_store
    assert leaks(pacs.accepted, [by_pacs.folder, store / "index.json"], PASSWORD) == []


def test_a_retrieval_stopped_half_way_fetches_only_what_is_missing(
    pacs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DicomwebSource.model_validate(_source(pacs, max_connections=1))
    total = len(pacs.server.studies())
    fetch = DicomwebPeer.fetch
    calls = {"n": 0}

    def killed_after_40(self: DicomwebPeer, *args: Any) -> str:
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


def test_ctrl_c_stops_the_retrieval_without_fetching_the_queued_studies(
    pacs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DicomwebSource.model_validate(_source(pacs, max_connections=2))
    fetch = DicomwebPeer.fetch
    calls = {"n": 0}

    def counted(self: DicomwebPeer, *args: Any) -> str:
        calls["n"] += 1
        return fetch(self, *args)

    class InterruptedBar(tqdm):  # type: ignore[misc]  # the operator presses Ctrl-C after the first study
        def update(self, n: float | None = 1) -> bool | None:
            raise KeyboardInterrupt

    monkeypatch.setattr(DicomwebPeer, "fetch", counted)
    monkeypatch.setattr("sitecal.pacs.retrieve.progress_bar", lambda **options: InterruptedBar(**options))
    with pytest.raises(KeyboardInterrupt):
        retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)
    # the first study, the two in flight when the main thread stopped, and at most one more per connection:
    # a thread that finishes between the first study's end and the cancel takes the next study, as
    # ThreadPoolExecutor does (on a loaded machine this happens); never the other 100+ queued studies
    assert 1 <= calls["n"] <= 1 + 2 * source.max_connections < len(pacs.server.studies())


def test_a_study_that_cannot_be_fetched_is_an_exclusion_and_the_retrieval_goes_on(
    pacs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DicomwebSource.model_validate(_source(pacs))
    fetch = DicomwebPeer.fetch
    refused: list[str] = []

    def one_fails(self: DicomwebPeer, study: Any, series: str, sop: str, store: Any) -> str:
        if not refused or refused[0] == study.study_uid:
            refused[:1] = [study.study_uid]
            raise PacsError(
                "WADO-RS instance retrieval: HTTP 503 Service Unavailable; the server failed the request."
            )
        return fetch(self, study, series, sop, store)

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
    loaded = load_protocol(demo_protocol(tmp_path / "empty", pacs, source=source))
    with pytest.raises(DataError) as caught:
        run_protocol(loaded, progress=False)
    message = str(caught.value)
    assert message.startswith("data.source: no study could be analysed")
    assert (
        "The PACS query returned no study: check data.source.query (dates, modalities, worklist)." in message
    )


def test_monitoring_studies_from_the_pacs_gives_the_folder_routes_windows(
    pacs: Any, folder_run: Any, tmp_path: Path
) -> None:
    """``sitecal monitor`` with data.source: the studies retrieved, dated by StudyDate, as from the folder."""
    from sitecal.run.monitoring import monitor_protocol

    documents = {}
    for route, source in (("folder", None), ("pacs", _source(pacs))):
        path = demo_protocol(tmp_path / route, pacs, source=source)
        raw = yaml.safe_load(path.read_text())
        raw["monitoring"] = {
            "baseline": str(folder_run.folder),
            "window": "quarter",
            "output_dir": str(tmp_path / route / "monitoring"),
        }
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        result = monitor_protocol(load_protocol(path), progress=False)
        documents[route] = result.document
        assert leaks(pacs.accepted, [result.folder], PASSWORD) == []
    by_folder, by_pacs = documents["folder"], documents["pacs"]
    assert len(by_pacs.windows) > 10
    assert sum(w.n_studies for w in by_pacs.windows if w.attribute == "overall") == len(pacs.server.studies())
    assert [w.to_dict() for w in by_pacs.windows] == [w.to_dict() for w in by_folder.windows]
    assert by_pacs.alerts == by_folder.alerts and by_pacs.verdict == by_folder.verdict
