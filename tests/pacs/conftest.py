"""A real Orthanc for every PACS test module of a worker, loaded with a generated demo cohort."""

from __future__ import annotations

import shutil
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from tests.pacs.orthanc import PASSWORD, USER, free_port, running_orthanc
from tests.pacs.routes import demo_protocol, numbers

from sitecal.demo import generate_demo
from sitecal.protocol import load_protocol
from sitecal.run import RunResult, run_protocol

#: Our AE title as Orthanc knows it (a C-MOVE destination at the move port the fixture picks).
CALLING_AE = "SITECAL"


@pytest.fixture(scope="session")
def pacs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An Orthanc loaded with a generated demo cohort, and a folder of exactly the studies it accepted.

    Orthanc knows ``CALLING_AE`` at ``move_port`` (C-MOVE destination, allowed to query and retrieve).
    """
    root = tmp_path_factory.mktemp("pacs")
    manifest = generate_demo(root / "data", n_studies=120, seed=5)
    accepted = root / "accepted"
    move_port = free_port()
    modalities: dict[str, list[object]] = {CALLING_AE: [CALLING_AE, "127.0.0.1", move_port]}
    with running_orthanc(root / "orthanc", modalities=modalities) as server:
        for path in sorted(p for p in manifest.dicom_dir.rglob("*") if p.is_file()):
            if server.upload(path) == "Success":  # not the planted junk, nor a second copy of an instance
                target = accepted / path.relative_to(manifest.dicom_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        credentials = root / "pacs-credentials.yaml"
        credentials.write_text(yaml.safe_dump({"username": USER, "password": PASSWORD}))
        credentials.chmod(0o600)
        yield SimpleNamespace(
            server=server,
            manifest=manifest,
            accepted=accepted,
            credentials=credentials,
            root=root,
            move_port=move_port,
        )


@pytest.fixture(scope="session")
def folder_run(pacs: Any, tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The folder route's run on the studies Orthanc holds (its run folder: read it, do not change it)."""
    root = tmp_path_factory.mktemp("folder-route")
    return run_protocol(load_protocol(demo_protocol(root / "run", pacs, source=None)), progress=False)


@pytest.fixture(scope="session")
def by_folder(folder_run: RunResult) -> dict[str, Any]:
    """The folder route's evaluation.json on the studies Orthanc holds."""
    return numbers(folder_run.folder)
