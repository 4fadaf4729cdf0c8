"""Retrieval throughput from a real Orthanc by each route, with one connection against several.

Starts Debian's Orthanc (``apt-get install orthanc orthanc-dicomweb``) on loopback ports with a temporary
storage, loads a generated demo cohort, and retrieves every study into an empty store by DICOMweb
(QIDO-RS + WADO-RS), by C-GET and by C-MOVE, with ``max_connections`` 1 and 4. It prints studies per
second and the speed-up of 4 connections over 1 on the same route (the baseline, measured in the same
run) and the requests each used, and says how many distinct object sets the retrievals stored.

Orthanc runs with ``TCP_NODELAY=1`` (see README: without it each DIMSE answer waits about 40 ms); pass
``--nagle`` to measure it as Debian starts it. Run from the repository root::

    python benchmarks/bench_pacs.py                  # 400 studies, under a minute on 2 cores
    python benchmarks/bench_pacs.py --studies 1000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' Orthanc harness

from tests.pacs.orthanc import AE_TITLE, PASSWORD, USER, free_port, running_orthanc

from sitecal.demo import generate_demo
from sitecal.pacs import retrieve_studies
from sitecal.protocol._pacs import DicomwebSource, DimseSource


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--nagle", action="store_true", help="leave Orthanc's Nagle algorithm on")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cohort = generate_demo(root / "data", n_studies=args.studies, seed=3)
        move_port = free_port()
        if args.nagle:
            os.environ["TCP_NODELAY"] = "0"
        with running_orthanc(
            root / "orthanc", modalities={"SITECAL": ["SITECAL", "127.0.0.1", move_port]}
        ) as server:
            if args.nagle:
                os.environ.pop("TCP_NODELAY")
            files = sorted(p for p in cohort.dicom_dir.rglob("*") if p.is_file())
            stored = sum(server.upload(p) == "Success" for p in files)
            n = len(server.studies())
            print(f"Orthanc 1.10 on loopback: {n} studies ({stored} instances); 2 cores shared with Orthanc")
            credentials = root / "credentials.yaml"
            credentials.write_text(f"username: {USER}\npassword: {PASSWORD}\n")
            credentials.chmod(0o600)
            peer = {"host": "127.0.0.1", "port": server.dicom_port, "ae_title": AE_TITLE}
            routes = {
                "DICOMweb": lambda c: DicomwebSource(
                    dicomweb=server.dicomweb, credentials_file=str(credentials), max_connections=c
                ),
                "C-GET": lambda c: DimseSource.model_validate({"dimse": peer, "max_connections": c}),
                "C-MOVE": lambda c: DimseSource.model_validate(
                    {"dimse": peer, "max_connections": c, "retrieve": "move", "move_port": move_port}
                ),
            }
            print(f"{'route':<9}{'conn':>5}{'seconds':>9}{'studies/s':>11}{'vs 1 conn':>11}{'requests':>10}")
            digests = set()
            for name, make in routes.items():
                base = None
                for connections in (1, 4):
                    store = root / f"store-{name}-{connections}"
                    started = time.perf_counter()
                    result = retrieve_studies(make(connections), store=store, resolve=Path, progress=False)
                    seconds = time.perf_counter() - started
                    summary = result.summary
                    assert summary["studies_retrieved_now"] == n and not result.failed
                    digests.add(summary["objects_sha256"])
                    base = base or seconds
                    print(
                        f"{name:<9}{connections:>5}{seconds:>9.2f}{n / seconds:>11.0f}"
                        f"{base / seconds:>10.2f}x{summary['requests']:>10}"
                    )
            print(
                f"{len(digests)} distinct objects_sha256 over the 6 retrievals: the connections never "
                "change the bytes; each route stores its instances as it received them (WADO-RS as the "
                "server sent them, DIMSE as pynetdicom built them)."
            )


if __name__ == "__main__":
    main()
