"""A real Orthanc for the PACS tests: Debian's ``orthanc`` with its DICOMweb plugin, on loopback ports the
test picks, with a temporary configuration and storage, stopped at the end.

CI installs ``orthanc`` and ``orthanc-dicomweb`` (``.ci/run``); without them the tests fail with that
instruction rather than skip.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

PLUGIN = Path("/usr/share/orthanc/plugins/libOrthancDicomWeb.so")
USER, PASSWORD = "sitecal", "pacs-test-secret"
AE_TITLE = "ORTHANC"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class TlsFiles:
    """A test authority and a server certificate it signed for 127.0.0.1 (PEM files)."""

    ca: Path
    server_cert: Path
    server_key: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A throw-away authority and a server certificate for 127.0.0.1, made with the openssl command."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, csr = folder / "server.pem", folder / "server.key", folder / "server.csr"
    ext = folder / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run = functools.partial(subprocess.run, check=True, capture_output=True)
    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
         "-days", "2", "-subj", "/CN=sitecal test authority"])  # fmt: skip
    run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
         "-subj", "/CN=127.0.0.1"])  # fmt: skip
    run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", ext])  # fmt: skip
    return TlsFiles(ca, cert, key)


@contextmanager
def tls_proxy(port: int, tls: TlsFiles) -> Iterator[int]:
    """An HTTPS front for ``127.0.0.1:port`` under the test certificate; yields its own port.

    (Debian's Orthanc 1.10 with OpenSSL 3 crashes in its web server's TLS, so the DICOMweb TLS tests
    put this in front of its plain HTTP, as a site's reverse proxy would be.)
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.server_cert, tls.server_key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                client.settimeout(None)
                secure = context.wrap_socket(client, server_side=True)
            except (ssl.SSLError, OSError):  # the client did not trust us: what the tests check
                client.close()
                continue
            backend = socket.create_connection(("127.0.0.1", port))
            threading.Thread(target=relay, args=(secure, backend), daemon=True).start()

    def relay(secure: socket.socket, backend: socket.socket) -> None:
        other = threading.Thread(target=pipe, args=(backend, secure), daemon=True)
        other.start()
        pipe(secure, backend)
        other.join()
        secure.close()
        backend.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@dataclass
class Orthanc:
    http_port: int
    dicom_port: int
    process: subprocess.Popen[bytes]
    folder: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def dicomweb(self) -> str:
        return f"{self.url}/dicom-web"

    def upload(self, path: Path) -> str:
        """POST one file; Orthanc's status ('Success', 'AlreadyStored'), or 'Rejected'."""
        answer = requests.post(
            f"{self.url}/instances",
            data=path.read_bytes(),
            auth=(USER, PASSWORD),
            timeout=30,
        )
        if answer.status_code != 200:
            return "Rejected"
        return str(answer.json().get("Status", "Rejected"))

    def studies(self) -> list[str]:
        answer = requests.get(f"{self.url}/studies", auth=(USER, PASSWORD), timeout=30)
        return list(answer.json())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@contextmanager
def running_orthanc(
    folder: Path, *, modalities: Mapping[str, object] | None = None, tls: TlsFiles | None = None
) -> Iterator[Orthanc]:
    """An Orthanc on free loopback ports; with ``tls``, HTTPS and DICOM TLS under that certificate."""
    binary = shutil.which("Orthanc")
    if binary is None or not PLUGIN.is_file():
        raise RuntimeError(
            "the PACS tests need a real Orthanc: `apt-get install orthanc orthanc-dicomweb` (.ci/run does)"
        )
    storage = folder / "storage"
    storage.mkdir(parents=True)
    http_port, dicom_port = free_port(), free_port()
    config = {
        "Name": "sitecal-test",
        "StorageDirectory": str(storage),
        "IndexDirectory": str(storage),
        "HttpPort": http_port,
        "DicomPort": dicom_port,
        "DicomAet": AE_TITLE,
        "RemoteAccessAllowed": False,
        "AuthenticationEnabled": True,
        "RegisteredUsers": {USER: PASSWORD},
        "Plugins": [str(PLUGIN)],
        "DicomWeb": {"Enable": True, "Root": "/dicom-web/"},
        "DicomModalities": modalities or {},
        "DicomCheckCalledAet": True,
        "UnknownSopClassAccepted": True,
        "HttpTimeout": 30,
    }
    if tls is not None:  # DICOM TLS (Debian's Orthanc 1.10 crashes on HTTPS: see tls_proxy)
        config |= {
            "DicomTlsEnabled": True,
            "DicomTlsCertificate": str(tls.server_cert),
            "DicomTlsPrivateKey": str(tls.server_key),
            "DicomTlsTrustedCertificates": str(tls.ca),
            "DicomTlsRemoteCertificateRequired": False,
        }
    path = folder / "orthanc.json"
    path.write_text(json.dumps(config, indent=1))
    log = open(folder / "orthanc.log", "wb")
    # DCMTK (Orthanc's DICOM layer) leaves Nagle's algorithm on unless TCP_NODELAY is set: each DIMSE
    # answer would then wait about 40 ms for a delayed acknowledgement
    env = {**os.environ, "TCP_NODELAY": "1"}
    process = subprocess.Popen([binary, str(path)], stdout=log, stderr=subprocess.STDOUT, env=env)
    server = Orthanc(http_port, dicom_port, process, folder)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = requests.get(f"{server.url}/system", auth=(USER, PASSWORD), timeout=2)
                if ready.ok:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Orthanc did not start: {(folder / 'orthanc.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield server
    finally:
        server.stop()
        log.close()
