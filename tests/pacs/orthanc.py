"""A real Orthanc for the PACS tests: Debian's ``orthanc`` with its DICOMweb plugin, on loopback ports the
test picks, with a temporary configuration and storage, stopped at the end.

CI installs ``orthanc`` and ``orthanc-dicomweb`` (``.ci/run``); without them the tests fail with that
instruction rather than skip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
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
            f"{self.url}/instances", data=path.read_bytes(), auth=(USER, PASSWORD), timeout=30
        )
        if answer.status_code != 200:
            return "Rejected"
        return str(answer.json().get("Status", "Rejected"))

    def studies(self) -> list[str]:
        return list(requests.get(f"{self.url}/studies", auth=(USER, PASSWORD), timeout=30).json())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@contextmanager
def running_orthanc(folder: Path, *, modalities: dict[str, list[object]] | None = None) -> Iterator[Orthanc]:
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
                if requests.get(f"{server.url}/system", auth=(USER, PASSWORD), timeout=2).ok:
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
