"""Studies from a real Orthanc over DIMSE (C-FIND, then C-GET or C-MOVE): the folder route's numbers,
a resumable retrieval, a partial C-MOVE, and association errors a PACS administrator can act on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydicom
import pytest
from pydicom.uid import generate_uid
from pypdf import PdfReader
from tests.pacs.conftest import CALLING_AE
from tests.pacs.orthanc import AE_TITLE, free_port, running_orthanc
from tests.pacs.routes import demo_protocol, leaks, numbers

from sitecal.pacs import retrieve_studies, source_problems
from sitecal.pacs._dimse import DimsePeer
from sitecal.protocol import load_protocol
from sitecal.protocol._pacs import DimseSource
from sitecal.run import run_protocol

pytestmark = pytest.mark.slow


def _source(pacs: Any, **changes: Any) -> dict[str, Any]:
    peer = {"host": "127.0.0.1", "port": pacs.server.dicom_port, "ae_title": AE_TITLE}
    return {"dimse": peer, "calling_ae": CALLING_AE, "timeout_s": 20, **changes}


def _move(pacs: Any, **changes: Any) -> dict[str, Any]:
    return _source(pacs, retrieve="move", move_port=pacs.move_port, **changes)


@pytest.mark.parametrize("route", ["get", "move"])
def test_the_dimse_routes_give_the_folder_routes_numbers(
    pacs: Any, by_folder: dict[str, Any], tmp_path: Path, route: str
) -> None:
    source = _source(pacs) if route == "get" else _move(pacs)
    loaded = load_protocol(demo_protocol(tmp_path / "run", pacs, source=source))
    by_pacs = run_protocol(loaded, progress=False)
    record = json.loads((by_pacs.folder / "provenance.json").read_text())["pacs"]
    assert record["studies_failed"] == 0, record["failures"]  # why, before the numbers differ
    assert numbers(by_pacs.folder) == by_folder
    studies = len(pacs.server.studies())
    assert (record["route"], record["studies_found"], record["studies_retrieved_now"]) == (
        "dimse",
        studies,
        studies,
    )
    assert record["service"] == f"{AE_TITLE}@127.0.0.1:{pacs.server.dicom_port} (C-FIND, C-{route.upper()})"
    # one association for the query and one a worker: never more than max_connections fetching at once
    assert 2 <= record["connections"] <= 1 + 4
    # the study search, then per study an image-level C-FIND and one study-level retrieval; a study asked
    # again after a transient failure (a PACS still indexing answers "no instance" for a moment: seen once
    # on a loaded machine) costs its failed request(s) again, one or two, and is counted as asked again
    again = record["studies_asked_again"]
    assert 1 + 2 * studies + again <= record["requests"] <= 1 + 2 * (studies + again)
    assert leaks(pacs.accepted, [by_pacs.folder, loaded.pacs_store / "index.json"]) == []
    # the report's Data section says where the studies came from and what the query returned
    text = " ".join(" ".join(p.extract_text() for p in PdfReader(by_pacs.report_pdf).pages).split())
    assert (
        f"The studies were retrieved by DIMSE from the PACS {record['service']}, with the query of "
        f"data.source (no filter). It matched {studies} studies: {studies} retrieved in this run and 0 from "
        "the local store of an earlier retrieval; none failed." in text
    )
    assert "Every instance retrieved from the PACS for the query's studies is read." in text


def test_a_dimse_retrieval_stopped_half_way_fetches_only_what_is_missing(
    pacs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DimseSource.model_validate(_source(pacs, max_connections=1))
    total = len(pacs.server.studies())
    retrieve = DimsePeer._retrieve
    calls = {"n": 0}

    def killed_after_40(self: DimsePeer, *args: Any) -> str:
        calls["n"] += 1
        if calls["n"] > 40:
            raise KeyboardInterrupt  # the operator's Ctrl-C, half-way
        return retrieve(self, *args)

    monkeypatch.setattr(DimsePeer, "_retrieve", killed_after_40)
    with pytest.raises(KeyboardInterrupt):
        retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)
    monkeypatch.setattr(DimsePeer, "_retrieve", retrieve)
    summary = retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False).summary
    assert summary["studies_from_store"] == 40
    assert summary["studies_retrieved_now"] == total - 40 == summary["instances_fetched"]
    third = retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False).summary
    # a complete store asks one study-level C-FIND on one association ...
    assert (third["requests"], third["connections"], third["instances_fetched"]) == (1, 1, 0)
    # ... and the restart asked, per missing study only, its image-level C-FIND and one C-GET
    assert summary["requests"] - third["requests"] == 2 * (total - 40)
    assert third["objects_sha256"] == summary["objects_sha256"]


def _three_instance_study(pacs: Any, folder: Path) -> list[Path]:
    """Three instances of one new study (copies of a demo image with their own UIDs)."""
    first = sorted(p for p in pacs.accepted.rglob("*.dcm"))[0]
    study, series = generate_uid(), generate_uid()
    paths = []
    for n in range(3):
        ds = pydicom.dcmread(first)
        ds.StudyInstanceUID, ds.SeriesInstanceUID = study, series
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
        ds.InstanceNumber = n + 1
        paths.append(folder / f"im{n}.dcm")
        ds.save_as(paths[-1], enforce_file_format=True)
    return paths


@pytest.mark.parametrize("route", ["get", "move"])
def test_a_partial_retrieval_names_how_many_failed_and_the_rerun_fetches_the_rest(
    pacs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    move_port = free_port()
    modalities: dict[str, list[object]] = {CALLING_AE: [CALLING_AE, "127.0.0.1", move_port]}
    (tmp_path / "study").mkdir()
    paths = _three_instance_study(pacs, tmp_path / "study")
    refused = str(pydicom.dcmread(paths[1]).SOPInstanceUID)
    on_store = DimsePeer._on_store

    def refuse_one(self: DimsePeer, event: Any) -> int:
        if str(event.request.AffectedSOPInstanceUID) == refused:
            return 0xA700  # our storage SCP is out of resources for this one
        return on_store(self, event)

    with running_orthanc(tmp_path / "orthanc", modalities=modalities) as server:
        assert [server.upload(p) for p in paths] == ["Success"] * 3
        peer = {"host": "127.0.0.1", "port": server.dicom_port, "ae_title": AE_TITLE}
        settings: dict[str, Any] = {"dimse": peer, "calling_ae": CALLING_AE}
        if route == "move":
            settings |= {"retrieve": "move", "move_port": move_port}
        source = DimseSource.model_validate(settings)
        monkeypatch.setattr(DimsePeer, "_on_store", refuse_one)
        first = retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)
        monkeypatch.setattr(DimsePeer, "_on_store", on_store)
        again = retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)
    ((_, reason),) = first.failed
    # Orthanc goes on after a failed C-GET sub-operation and counts it; it ends a C-MOVE at the first one
    said, arrived = {
        "get": (
            "reports 1 of 3 sub-operations failed, status 0xB000 (sub-operations complete, one or more "
            "failures)",
            2,
        ),
        "move": ("answered status 0xC000 (unable to process)", 1),
    }[route]
    assert reason == (
        f"not retrieved from the PACS: C-{route.upper()}: {3 - arrived} of 3 instances did not arrive (the "
        f"PACS {said}). {arrived} arrived, so the PACS reaches sitecal: its log says why the others failed "
        "(often a transfer syntax it cannot send, or a sub-operation it stopped after a failure)."
    )
    assert first.summary["studies_failed"] == 1 and first.files == frozenset()
    # the rerun asks for the missing instances only, one image-level request each
    assert (again.summary["studies_retrieved_now"], again.summary["instances_fetched"]) == (1, 3 - arrived)
    assert again.summary["requests"] == 1 + 1 + (3 - arrived)
    assert len(again.files) == 3 and again.failed == ()


def test_check_names_a_wrong_ae_title_an_unknown_caller_and_a_stopped_server(
    pacs: Any, tmp_path: Path
) -> None:
    assert source_problems(DimseSource.model_validate(_source(pacs)), Path) == []
    assert source_problems(DimseSource.model_validate(_move(pacs)), Path) == []
    wrong = _source(pacs)
    wrong["dimse"] = {**wrong["dimse"], "ae_title": "NOT-ORTHANC"}
    (problem,) = source_problems(DimseSource.model_validate(wrong), Path)
    assert problem == (
        f"data.source: association: NOT-ORTHANC at 127.0.0.1:{pacs.server.dicom_port} rejected the "
        "association permanently: called AE title not recognised (reason 7, from the PACS (service user)). "
        "Check data.source.dimse.ae_title: it must be the PACS's own AE title."
    )
    (problem,) = source_problems(DimseSource.model_validate(_source(pacs, calling_ae="STRANGER")), Path)
    assert problem == (
        f"data.source: C-FIND (study level): {AE_TITLE} aborted the association instead of answering. "
        "The PACS may not allow STRANGER (data.source.calling_ae) this request: ask its administrator to "
        "register the AE title for query and retrieval."
    )
    with running_orthanc(tmp_path / "stopped") as other:
        port = other.dicom_port
    stopped = _source(pacs)
    stopped["dimse"] = {**stopped["dimse"], "port": port}
    (problem,) = source_problems(DimseSource.model_validate(stopped), Path)
    assert problem.startswith(
        f"data.source: association: cannot connect to {AE_TITLE} at 127.0.0.1:{port} (connection refused: "
        f"nothing listens on port {port})."
    )
    assert "Check that the PACS is running and that data.source.dimse names its host and DICOM" in problem
