"""A study whose fetch fails transiently is asked again after a pause; any other failure is an exclusion.

No PACS here: a scripted peer fails as it is told. (The routes' own transient failures are named in
``_dicomweb._transient`` and ``DimsePeer._lost``; a real Orthanc under load answered an image-level C-FIND
of a study it had just listed with no instance, for one study in about one retrieval in ten with the CPUs
busy.)
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import requests
from tqdm import tqdm

from sitecal.pacs import retrieve
from sitecal.pacs._dicomweb import _transient
from sitecal.pacs._http import DeadlinePassed, Redirected, TooLarge
from sitecal.pacs._peer import PacsError, StudyRef
from sitecal.pacs._store import InstanceStore
from sitecal.protocol._pacs import DicomwebSource

SOURCE = DicomwebSource.model_validate({"dicomweb": "https://pacs.example/dicom-web", "max_connections": 2})


class ScriptedPeer:
    """Fails each study's first fetches as ``script`` says (a list of errors per UID), then stores it."""

    route = "scripted"

    def __init__(self, studies: list[str], script: dict[str, list[PacsError]]) -> None:
        self.studies, self.script = studies, {k: list(v) for k, v in script.items()}
        self.asked: list[str] = []
        self.requests = self.connections = 0
        self._lock = threading.Lock()

    def __enter__(self) -> ScriptedPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def find_studies(self, filters: Iterable[dict[str, str]]) -> list[StudyRef]:
        return [StudyRef(uid) for uid in sorted(self.studies)]

    def fetch_study(self, study: StudyRef, store: InstanceStore) -> int:
        with self._lock:
            self.asked.append(study.study_uid)
            errors = self.script.get(study.study_uid) or []
            error = errors.pop(0) if errors else None
        if error is not None:
            raise error
        store.put(study.study_uid + ".1", study.study_uid.encode())
        store.complete_study(study.study_uid, [study.study_uid + ".1"])
        return 1

    def probe(self) -> None:
        return None

    def describe(self) -> str:
        return "scripted"


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(retrieve, "RETRY_PAUSES_S", (0.01, 0.02))
    monkeypatch.setattr(retrieve.time, "sleep", slept.append)
    return slept


def _run(peer: ScriptedPeer, tmp_path: Path) -> retrieve.Retrieval:
    store = InstanceStore(tmp_path / "store")
    store.files.mkdir(parents=True)
    return retrieve._retrieve(peer, SOURCE, store, Path, False)


def test_a_transient_failure_is_asked_again_and_the_study_retrieved(tmp_path: Path, pauses: list) -> None:
    busy = PacsError("the PACS lists no instance for this study", transient=True)
    peer = ScriptedPeer(["1.1", "1.2", "1.3"], {"1.2": [busy, busy]})
    out = _run(peer, tmp_path)
    assert out.failed == () and len(out.files) == 3
    assert sorted(peer.asked) == ["1.1", "1.2", "1.2", "1.2", "1.3"]
    assert pauses == [0.01, 0.02]
    assert out.summary["studies_failed"] == 0 and out.summary["studies_asked_again"] == 1  # one study, twice
    assert out.summary["studies_retrieved_now"] == 3


def test_a_study_failing_every_time_is_excluded_with_its_last_reason(tmp_path: Path, pauses: list) -> None:
    first = PacsError("WADO-RS instance retrieval: HTTP 503 Service Unavailable", transient=True)
    last = PacsError("WADO-RS instance retrieval: cannot connect to pacs.example", transient=True)
    peer = ScriptedPeer(["1.1", "1.2"], {"1.1": [first, first, last]})
    out = _run(peer, tmp_path)
    assert out.failed == (("1.1", f"not retrieved from the PACS: {last}"),)
    assert peer.asked.count("1.1") == 3 and peer.asked.count("1.2") == 1
    assert out.summary["studies_failed"] == 1 and out.summary["studies_retrieved_now"] == 1
    assert out.summary["studies_asked_again"] == 1


def test_a_lasting_failure_is_not_asked_again(tmp_path: Path, pauses: list) -> None:
    refused = PacsError("C-GET: 1 of 3 instances did not arrive")
    busy = PacsError("C-GET: the PACS aborted the association instead of answering", transient=True)
    peer = ScriptedPeer(["1.1", "1.2", "1.3"], {"1.1": [refused], "1.3": [busy]})
    out = _run(peer, tmp_path)
    assert [uid for uid, _ in out.failed] == ["1.1"]  # 1.3 came on the second asking
    assert peer.asked.count("1.1") == 1 and peer.asked.count("1.3") == 2
    assert pauses == [0.01] and out.summary["studies_asked_again"] == 1


def test_a_fatal_failure_stops_the_retrieval_instead_of_excluding_the_study(
    tmp_path: Path, pauses: list
) -> None:
    moved = PacsError("WADO-RS instance retrieval: pacs.example answered HTTP 302", fatal=True)
    peer = ScriptedPeer(["1.1", "1.2", "1.3"], {"1.1": [moved]})
    with pytest.raises(PacsError, match="answered HTTP 302"):
        _run(peer, tmp_path)
    assert pauses == []


def test_nothing_failing_pauses_never(tmp_path: Path, pauses: list) -> None:
    out = _run(ScriptedPeer(["1.1", "1.2"], {}), tmp_path)
    assert pauses == [] and out.summary["studies_asked_again"] == 0 and len(out.files) == 2


def test_the_progress_bar_reaches_100_percent_once_at_the_end_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a study is counted once settled: fetched, failed for good (1.3), or failed after the last pause (1.4)
    monkeypatch.setattr(retrieve, "RETRY_PAUSES_S", (0.01, 0.02))
    monkeypatch.setattr(retrieve, "tqdm", functools.partial(tqdm, mininterval=0))  # a frame per update
    written: list[str] = []  # the console's stderr up to each pause, then up to the end
    monkeypatch.setattr(retrieve.time, "sleep", lambda s: written.append(capsys.readouterr().err))
    busy = PacsError("the PACS lists no instance for this study", transient=True)
    refused = PacsError("C-GET: 1 of 3 instances did not arrive")
    script = {"1.2": [busy, busy], "1.3": [refused], "1.4": [busy] * 3}
    peer = ScriptedPeer(["1.1", "1.2", "1.3", "1.4"], script)
    store = InstanceStore(tmp_path / "store")
    store.files.mkdir(parents=True)
    out = retrieve._retrieve(peer, SOURCE, store, Path, True)
    written.append(capsys.readouterr().err)
    assert len(written) == 3 and [uid for uid, _ in out.failed] == ["1.3", "1.4"]
    before_the_end, text = "".join(written[:-1]), "".join(written)
    assert "100%" not in before_the_end and "4/4" not in before_the_end
    assert text.count("\n") == 1 and text.endswith("\n")  # the bar closed once: one line
    frames = [f for f in re.split(r"[\r\n]", text) if f]
    assert all(f.startswith("Retrieving:") for f in frames)
    assert "100%" in frames[-1] and "4/4" in frames[-1]


def _http_error(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    return requests.HTTPError(response=response)


@pytest.mark.parametrize(
    ("exc", "asked_again"),
    [
        (requests.exceptions.ConnectionError("reset by peer"), True),
        (requests.exceptions.ChunkedEncodingError("cut short"), True),
        (_http_error(503), True),
        (_http_error(502), True),
        (_http_error(401), False),
        (_http_error(404), False),
        (_http_error(500), False),
        (requests.exceptions.ReadTimeout("slow"), False),
        (requests.exceptions.SSLError("untrusted"), False),
        (ConnectionResetError(), True),
        (OSError("disk"), False),
        (TooLarge(1 << 20, "answer_mib"), False),  # it would send as much again
        (DeadlinePassed(60), False),  # and take as long again
        (Redirected(302, "plain http"), False),
    ],
)
def test_which_http_failures_are_asked_again(exc: Any, asked_again: bool) -> None:
    assert _transient(exc) is asked_again
