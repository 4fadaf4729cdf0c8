"""A PACS that misbehaves, against `sitecal check` and `sitecal run`: every case ends in exit 2 with a
message naming what happened, in bounded time and memory, and no credential on the console.

The DICOMweb server is a fake on loopback (``ThreadingHTTPServer`` in a thread of the test) that
answers as told: a body that never ends, one byte at a time, the same page whatever the offset, a page
past the limit, a redirect, a 401 echoing the credentials, JSON nested past Python's limit. The DIMSE
peers are a pynetdicom SCP answering a C-FIND without end, a socket declaring a 2 GiB PDU, and a relay
that passes the association at full speed and then one byte at a time. Where memory is the point,
``sitecal.cli.main`` runs in a child process whose peak RSS is read from ``os.wait4``; elsewhere it runs
here, and the time is measured where it cannot depend on sitecal's imports (by the server, or around
``source_problems``).

Before these bounds (measured on the same fake): an endless body took `sitecal check` to 20.5 GB in
45 s; an ignored offset made the study search ask more than 6,000 pages; one byte every 2 s kept a
request with ``timeout_s: 10`` alive past 100 s; a 401 body echoing the credentials was printed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
import yaml
from tests.conftest import DEMO_PROTOCOL, TEST_PSEUDONYM_KEY
from tests.pacs.orthanc import make_tls_files, tls_proxy
from tests.security._child import SITECAL_MAIN, peak_mib

from sitecal.pacs import source_problems
from sitecal.protocol._pacs import DimseSource

USER, PASSWORD = "reader", "h0stile-Pacs-s3cret"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
#: The deadline of every request in these protocols; each case must end within twice this.
TIMEOUT_S = 2.0
#: Peak RSS allowed to a child (sitecal with torch imported takes about 400 MB on its own).
MAX_RSS_BYTES = 1 << 30
#: A study and an instance the fake lists (a valid UID each).
STUDY, SERIES, SOP = "1.2.826.0.1.3680043.10.1", "1.2.826.0.1.3680043.10.1.1", "1.2.826.0.1.3680043.10.1.1.1"

pytestmark = pytest.mark.timeout(120)


# -- the fake DICOMweb server -----------------------------------------------------------------------
@dataclass
class Fake:
    """What the fake server does (``mode``) and what it saw."""

    mode: str
    redirect_to: str = ""
    requests: list[str] = field(default_factory=list)
    cut_after_s: list[float] = field(default_factory=list)  # how long each endless answer was read
    stop: threading.Event = field(default_factory=threading.Event)

    def cut(self) -> list[float]:
        """``cut_after_s`` once the server has seen the client hang up (a write fails), within 2 s."""
        until = time.monotonic() + 2
        while not self.cut_after_s and time.monotonic() < until:
            time.sleep(0.05)
        return self.cut_after_s


def _study(uid: str) -> dict[str, Any]:
    return {"0020000D": {"vr": "UI", "Value": [uid]}, "00080061": {"vr": "CS", "Value": ["DX"]}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:  # quiet
        return None

    def do_GET(self) -> None:
        fake: Fake = self.server.fake
        fake.requests.append(self.path)
        query = parse_qs(urlsplit(self.path).query)
        probe = query.get("limit") == ["1"]  # `check`'s one-answer search (also the run's preflight)
        mode = fake.mode
        if mode.endswith("_after_probe"):
            mode = "good" if probe else mode.removesuffix("_after_probe")
        getattr(self, f"_{mode}")()

    # answers ---------------------------------------------------------------------------------------
    def _json(self, document: Any, status: int = 200) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/dicom+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _good(self) -> None:
        """A well-behaved server: one study, one instance (the instance answer is endless)."""
        path = urlsplit(self.path).path
        offset = int(parse_qs(urlsplit(self.path).query).get("offset", ["0"])[0])
        if path.endswith("/instances") and offset == 0:
            self._json(
                [{"0020000E": {"vr": "UI", "Value": [SERIES]}, "00080018": {"vr": "UI", "Value": [SOP]}}]
            )
        elif "/instances/" in path:
            self._endless(b"--b\r\nContent-Type: application/dicom\r\n\r\n" + b"\0" * 128 + b"DICM", "b")
        else:
            self._json([_study(STUDY)] if offset == 0 else [])

    def _endless(self, head: bytes = b"[", boundary: str = "") -> None:
        """200 and a body without end (no Content-Length, close-delimited), as fast as the socket takes."""
        self.send_response(200)
        kind = f'multipart/related; type="application/dicom"; boundary={boundary}' if boundary else ""
        self.send_header("Content-Type", kind or "application/dicom+json")
        self.send_header("Connection", "close")
        self.end_headers()
        item = json.dumps(_study("1.2.3.4.5")).encode() + b","
        started = time.monotonic()
        try:
            self.wfile.write(head)
            block = item * (65536 // len(item))
            while not self.server.fake.stop.is_set():
                self.wfile.write(block)
        except OSError:  # the client hung up: what the test waits for
            self.server.fake.cut_after_s.append(time.monotonic() - started)
        self.close_connection = True

    def _trickle(self) -> None:
        """200, a Content-Length of 10 kB, and one byte every 0.25 s (each byte well within timeout_s)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/dicom+json")
        self.send_header("Content-Length", "10000")
        self.end_headers()
        started = time.monotonic()
        try:
            self.wfile.write(b"[")
            self.wfile.flush()
            while not self.server.fake.stop.is_set():
                time.sleep(0.25)
                self.wfile.write(b" ")
                self.wfile.flush()
        except OSError:
            self.server.fake.cut_after_s.append(time.monotonic() - started)
        self.close_connection = True

    def _trickle_headers(self) -> None:
        """The status line, then one header byte every 0.25 s: the answer never gets to its body."""
        started = time.monotonic()
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            while not self.server.fake.stop.is_set():
                self.wfile.write(b"X")
                self.wfile.flush()
                time.sleep(0.25)
        except OSError:
            self.server.fake.cut_after_s.append(time.monotonic() - started)
        self.close_connection = True

    def _ignored_offset(self) -> None:
        """The same page of two studies for every offset."""
        self._json([_study("1.2.3.4.1"), _study("1.2.3.4.2")])

    def _huge_page(self) -> None:
        """A page that declares 100 MiB (past the default 64 MiB) and starts sending it."""
        self.send_response(200)
        self.send_header("Content-Type", "application/dicom+json")
        self.send_header("Content-Length", str(100 << 20))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(b"[" + json.dumps(_study("1.2.3.4.5")).encode() * 1000)
        self.close_connection = True

    def _redirect(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.server.fake.redirect_to)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _echo(self) -> None:
        """401, and a body that repeats the credentials every way it can, with control characters."""
        auth = self.headers.get("Authorization", "")
        body = (
            f"\x1b[31mUnauthorized\x07: you sent '{auth}' = {USER}:{PASSWORD} ({quote(PASSWORD)}) "
            f"Basic {BASIC}\r\nAuthorization: {auth}\r\n"
        ).encode()
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="pacs"')
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _deep(self) -> None:
        """A JSON answer nested 100,000 deep."""
        body = b"[" * 100_000
        self.send_response(200)
        self.send_header("Content-Type", "application/dicom+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def fake_server(mode: str, redirect_to: str = "") -> Iterator[tuple[Fake, int]]:
    """The fake DICOMweb server on a loopback port: (what it saw, its port)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.fake = Fake(mode, redirect_to)  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.fake, server.server_address[1]  # type: ignore[attr-defined]
    finally:
        server.fake.stop.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


# -- the protocol and the child ---------------------------------------------------------------------
def _protocol(tmp_path: Path, source: dict[str, Any]) -> Path:
    """The demo protocol with ``source`` as data.source (timeout_s 2 s, the test's credentials file)."""
    credentials = tmp_path / "pacs.yaml"
    credentials.write_text(yaml.safe_dump({"username": USER, "password": PASSWORD}))
    credentials.chmod(0o600)
    key = tmp_path / "key"
    key.write_text(TEST_PSEUDONYM_KEY + "\n")
    key.chmod(0o600)
    (tmp_path / "labels.csv").write_text(f"StudyInstanceUID,label\n{STUDY},nodule\n")
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["data"] = {
        "source": {"timeout_s": TIMEOUT_S, "credentials_file": str(credentials), **source},
        "labels": "labels.csv",
        "key": "StudyInstanceUID",
        "label_column": "label",
    }
    raw["report"]["output_dir"] = "reports"
    raw["privacy"] = {"key_file": str(key)}
    raw["evaluation"]["planning"] = {"simulations": 0}
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@dataclass(frozen=True)
class Child:
    code: int
    out: str
    err: str
    seconds: float
    peak_rss: int | None  # bytes (a child process only)
    in_child: bool = True  # run in a child process (else in this one, with no peak of its own)


def sitecal(*args: str, kill_after_s: float = 60.0) -> Child:
    """``sitecal.cli.main(args)`` in a child process: its exit code, output, wall time and peak RSS.

    A child past ``kill_after_s`` is killed (exit -9), so that a regression fails the test instead of
    hanging it; so is one past 3 GB (checked every 0.1 s), instead of exhausting the machine.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("SITECAL_PACS_USERNAME", "SITECAL_PACS_PASSWORD", "SITECAL_PACS_TOKEN"):
        env.pop(name, None)
    peak = Path(tempfile.mkdtemp()) / "peak"
    with open(os.devnull, "rb") as stdin, _temp_file() as out, _temp_file() as err:
        started = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-c", SITECAL_MAIN, str(peak), *args],
            stdin=stdin,
            stdout=out,
            stderr=err,
            env=env,
        )
        done = threading.Event()
        threading.Thread(target=_watch, args=(child.pid, done, started + kill_after_s), daemon=True).start()
        _, status, _ = os.wait4(child.pid, 0)
        done.set()
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        mib = peak_mib(peak)  # the child's own VmHWM: wait4's ru_maxrss carries pytest's memory over exec
        return Child(
            child.returncode,
            out.read().decode(),
            err.read().decode(),
            seconds,
            None if mib != mib else int(mib * (1 << 20)),
        )


def _watch(pid: int, done: threading.Event, kill_at: float) -> None:
    while not done.wait(0.1):
        try:
            rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return
        if time.monotonic() > kill_at or rss > 3 << 30:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            return


@contextlib.contextmanager
def _temp_file() -> Iterator[Any]:
    import tempfile

    with tempfile.TemporaryFile() as f:
        yield f


def assert_refused(child: Child, *said: str) -> None:
    """Exit 2, each of ``said`` on stderr, no credential on the console, bounded memory."""
    console = child.out + child.err
    assert child.code == 2, (child.code, child.err[-2000:])
    for text in said:
        assert text in child.err, (text, child.err[-2000:])
    for secret in (PASSWORD, BASIC, BASIC.rstrip("="), quote(PASSWORD)):
        assert secret not in console
    assert "Traceback" not in console
    if child.in_child:  # a child that did not report its peak did not finish its main
        assert child.peak_rss is not None and child.peak_rss < MAX_RSS_BYTES, child.peak_rss


@pytest.fixture
def here(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``sitecal.cli.main(args)`` in this process (where time and memory are measured elsewhere)."""
    from sitecal.cli import main

    for name in ("SITECAL_PACS_USERNAME", "SITECAL_PACS_PASSWORD", "SITECAL_PACS_TOKEN"):
        monkeypatch.delenv(name, raising=False)

    def call(*args: str) -> Child:
        started = time.monotonic()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Child(code, out, err, time.monotonic() - started, None, in_child=False)

    return call


def _url(port: int, scheme: str = "http") -> dict[str, str]:
    return {"dicomweb": f"{scheme}://127.0.0.1:{port}/dicom-web"}


# -- DICOMweb: where memory is the point, in a child process ---------------------------------------
@pytest.mark.slow  # a child process: sitecal's imports take most of its 10 s
@pytest.mark.parametrize("command", ["check", "run"])
def test_an_endless_body_is_cut_at_the_answer_limit(tmp_path: Path, command: str) -> None:
    # run: its own study search, after preflight's one-answer search was answered well
    mode = "endless" if command == "check" else "endless_after_probe"
    with fake_server(mode) as (fake, port):
        protocol = _protocol(tmp_path, _url(port))
        child = sitecal(command, str(protocol), *(["--no-progress"] if command == "run" else []))
        cut = fake.cut()
    assert_refused(
        child,
        f"QIDO-RS study search: 127.0.0.1:{port} sent more than data.source.limits.answer_mib (64 MiB) "
        "in one answer; the request was stopped.",
    )
    assert len(cut) == 1 and cut[0] < 2 * TIMEOUT_S, cut


@pytest.mark.slow
def test_an_endless_instance_is_cut_at_the_instance_limit_and_excludes_its_study(tmp_path: Path) -> None:
    with fake_server("good") as (fake, port):
        source = {**_url(port), "limits": {"instance_mib": 2}}
        child = sitecal("run", str(_protocol(tmp_path, source)), "--no-progress")
        cut = fake.cut()
    assert_refused(child, "no study could be analysed")
    assert len(cut) == 1 and cut[0] < 2 * TIMEOUT_S, cut
    (log,) = (tmp_path / "reports").glob("*/run.log")
    assert (
        f"WADO-RS instance retrieval: 127.0.0.1:{port} sent more than data.source.limits.instance_mib "
        "(2 MiB)" in log.read_text()
    )
    store = next((tmp_path / "reports" / ".sitecal-pacs").iterdir())
    assert not list((store / "incoming").iterdir())  # the partial instance is not left behind
    assert not list((store / "files").rglob("*.dcm"))


# -- DICOMweb: in this process (the time is measured by the server) -----------------------------------
@pytest.mark.parametrize("mode", ["trickle", "trickle_headers"])
def test_a_trickling_server_is_cut_at_the_deadline(tmp_path: Path, here: Any, mode: str) -> None:
    with fake_server(mode) as (fake, port):
        child = here("check", str(_protocol(tmp_path, _url(port))))
        cut = fake.cut()
    assert_refused(
        child,
        f"QIDO-RS study search: 127.0.0.1:{port} did not complete its answer within data.source.timeout_s "
        "(2 s, the limit on each request from start to end); the request was stopped.",
    )
    # cut at the deadline (the server sees it at its next byte, 0.25 s later), well within twice it
    assert len(cut) == 1 and TIMEOUT_S - 0.3 < cut[0] < 2 * TIMEOUT_S, cut
    assert "XXXX" not in child.err  # urllib3's complaint about the unfinished headers, quoting them


def test_a_server_ignoring_the_offset_stops_the_search_at_the_second_page(tmp_path: Path, here: Any) -> None:
    with fake_server("ignored_offset") as (fake, port):
        child = here("run", str(_protocol(tmp_path, _url(port))), "--no-progress")
    assert_refused(
        child,
        "QIDO-RS study search: page 2 (offset 2) brought no match not already seen: the server sent a page "
        "again (it may ignore the QIDO-RS offset parameter)",
    )
    assert len(fake.requests) == 3  # preflight's one-answer search, then pages 1 and 2


def test_a_search_of_too_many_pages_stops_at_the_page_limit(tmp_path: Path, here: Any) -> None:
    with fake_server("ignored_offset") as (fake, port):
        source = {**_url(port), "limits": {"pages": 1}}
        child = here("run", str(_protocol(tmp_path, source)), "--no-progress")
    assert_refused(
        child, "QIDO-RS study search: the server sent 1 pages and has not finished (data.source.limits.pages)"
    )
    assert len(fake.requests) == 2


def test_a_page_declaring_more_than_the_limit_is_refused_before_it_is_read(tmp_path: Path, here: Any) -> None:
    with fake_server("huge_page") as (_, port):
        child = here("check", str(_protocol(tmp_path, _url(port))))
    assert_refused(child, "sent more than data.source.limits.answer_mib (64 MiB) in one answer")


def test_json_nested_past_the_interpreters_limit_is_a_malformed_answer(tmp_path: Path, here: Any) -> None:
    with fake_server("deep") as (_, port):
        child = here("check", str(_protocol(tmp_path, _url(port))))
    assert_refused(child, "QIDO-RS study search: the server's answer could not be read (RecursionError).")


def test_a_redirect_to_another_host_is_refused(tmp_path: Path, here: Any) -> None:
    elsewhere = "http://pacs-elsewhere.example/dicom-web/studies?AccessionNumber=A1"
    with fake_server("redirect", elsewhere) as (fake, port):
        child = here("check", str(_protocol(tmp_path, _url(port))))
    assert_refused(
        child,
        f"QIDO-RS study search: 127.0.0.1:{port} answered HTTP 302 with a redirect to another host "
        "(pacs-elsewhere.example); sitecal follows no redirect",
        "Set data.source.dicomweb to the service's own URL.",
    )
    assert "AccessionNumber" not in child.err and len(fake.requests) == 1


def test_a_redirect_from_https_to_plain_http_is_refused(tmp_path: Path, here: Any) -> None:
    files = make_tls_files(tmp_path / "tls")
    with fake_server("redirect") as (fake, port), tls_proxy(port, files) as https:
        fake.redirect_to = f"http://127.0.0.1:{port}/dicom-web/studies"
        source = {**_url(https, "https"), "tls": {"ca_file": str(files.ca)}}
        child = here("check", str(_protocol(tmp_path, source)))
    assert_refused(child, f"127.0.0.1:{https} answered HTTP 302 with a redirect to plain http")
    assert len(fake.requests) == 1  # the plain-http URL was never asked


def test_a_401_echoing_the_credentials_shows_none_of_them(tmp_path: Path, here: Any) -> None:
    with fake_server("echo") as (_, port):
        child = here("check", str(_protocol(tmp_path, _url(port))))
    assert_refused(
        child,
        "QIDO-RS study search: HTTP 401 Unauthorized: \"[31mUnauthorized : you sent 'Basic <hidden>' = "
        '<hidden>:<hidden> (<hidden>) Basic <hidden>"; the server refused the credentials',
    )
    assert "\x1b" not in child.err and "\x07" not in child.err
    assert USER not in child.err  # the username goes too (it names the account)


# -- DIMSE ------------------------------------------------------------------------------------------
def _dimse_source(port: int, **changes: Any) -> dict[str, Any]:
    return {"dimse": {"host": "127.0.0.1", "port": port, "ae_title": "HOSTILE"}, **changes}


def _dimse(port: int, **changes: Any) -> DimseSource:
    """The source of :func:`_dimse_source` as the protocol reads it (for ``source_problems``, timed)."""
    return DimseSource.model_validate(_dimse_source(port, timeout_s=TIMEOUT_S, **changes))


@contextlib.contextmanager
def endless_find_scp() -> Iterator[int]:
    """A pynetdicom SCP answering every C-FIND with pending answers without end."""
    from pydicom.dataset import Dataset
    from pynetdicom import AE, evt
    from pynetdicom.sop_class import (
        StudyRootQueryRetrieveInformationModelFind,
        StudyRootQueryRetrieveInformationModelGet,
    )

    stop = threading.Event()

    def answers(event: Any) -> Iterator[tuple[int, Any]]:
        n = 0
        while not stop.is_set():
            n += 1
            ds = Dataset()
            ds.QueryRetrieveLevel = "STUDY"
            ds.StudyInstanceUID = f"1.2.3.4.{n}"
            yield 0xFF00, ds

    ae = AE(ae_title="HOSTILE")
    ae.add_supported_context(StudyRootQueryRetrieveInformationModelFind)
    ae.add_supported_context(StudyRootQueryRetrieveInformationModelGet)  # offered by `check`
    server = ae.start_server(("127.0.0.1", 0), block=False, evt_handlers=[(evt.EVT_C_FIND, answers)])
    try:
        yield server.server_address[1]
    finally:
        stop.set()
        server.shutdown()


def test_a_c_find_without_end_stops_at_the_match_limit(tmp_path: Path, here: Any) -> None:
    with endless_find_scp() as port:
        source = _dimse_source(port, limits={"matches": 500})
        child = here("check", str(_protocol(tmp_path, source)))
        started = time.monotonic()
        (problem,) = source_problems(_dimse(port, limits={"matches": 500}), Path)
        seconds = time.monotonic() - started
    said = (
        "C-FIND (study level): HOSTILE sent more than data.source.limits.matches (500) answers; the "
        "association was aborted."
    )
    assert_refused(child, said)
    assert said in problem and seconds < 2 * TIMEOUT_S


@contextlib.contextmanager
def huge_pdu_peer() -> Iterator[int]:
    """A socket answering the association request with a PDU that declares 2 GiB, then zeros."""
    stop = threading.Event()

    def flood(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(struct.pack(">BBL", 0x02, 0, 0x7FFF_FFFF))  # A-ASSOCIATE-AC of 2 GiB
            while not stop.is_set():
                conn.sendall(b"\0" * 65536)

    with _serving(flood, stop) as port:
        yield port


@contextlib.contextmanager
def _serving(handle: Any, stop: threading.Event) -> Iterator[int]:
    """A loopback listener handing each connection to ``handle`` on a thread of its own; its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        listener.close()


def test_a_pdu_longer_than_announced_is_refused_unread(tmp_path: Path, here: Any) -> None:
    with huge_pdu_peer() as port:
        child = here("check", str(_protocol(tmp_path, _dimse_source(port))))
    assert_refused(
        child,
        f"association: HOSTILE at 127.0.0.1:{port} sent a PDU of 2147483647 bytes, more than the 1048576 it "
        "was allowed; the association was aborted.",
    )


@contextlib.contextmanager
def trickling_relay(target: int) -> Iterator[int]:
    """A relay to ``target`` that passes the association at full speed, then the answers one byte a 0.25 s.

    It trickles once the client has sent more than its first PDU (the association request).
    """
    stop = threading.Event()

    def relay(client: socket.socket) -> None:
        backend = socket.create_connection(("127.0.0.1", target))
        trickle = threading.Event()
        threading.Thread(target=requests_, args=(client, backend, trickle), daemon=True).start()
        answers(backend, client, trickle)

    def requests_(client: socket.socket, backend: socket.socket, trickle: threading.Event) -> None:
        seen = bytearray()
        with contextlib.suppress(OSError):
            while not stop.is_set() and (data := client.recv(65536)):
                seen += data
                if len(seen) >= 6 and len(seen) > 6 + struct.unpack(">L", seen[2:6])[0]:
                    trickle.set()
                backend.sendall(data)
        _shut(client, backend)
        client.close()

    def answers(backend: socket.socket, client: socket.socket, trickle: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set() and (data := backend.recv(65536)):
                if not trickle.is_set():
                    client.sendall(data)
                    continue
                for i in range(len(data)):
                    if stop.wait(0.25):
                        break
                    client.sendall(data[i : i + 1])
        _shut(client, backend)
        backend.close()

    with _serving(relay, stop) as port:
        yield port


def _shut(*sockets: socket.socket) -> None:
    for end in sockets:
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


def test_a_c_find_answer_trickled_is_cut_at_the_deadline(tmp_path: Path, here: Any) -> None:
    with endless_find_scp() as port, trickling_relay(port) as relay:
        started = time.monotonic()
        problems = source_problems(_dimse(relay), Path)
        seconds = time.monotonic() - started
        child = here("check", str(_protocol(tmp_path, _dimse_source(relay))))
    said = (
        f"C-FIND (study level): HOSTILE at 127.0.0.1:{relay} sent no complete answer within 2 s; the "
        "association was aborted. Check that the PACS is well, or raise data.source.timeout_s."
    )
    assert problems == [f"data.source: {said}"] and seconds < 2 * TIMEOUT_S
    assert_refused(child, said)
