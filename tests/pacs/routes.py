"""The demo protocol over the studies Orthanc holds, by the folder or by a PACS route, and its numbers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydicom
import yaml
from tests.conftest import write_demo_protocol


def demo_protocol(root: Path, pacs: Any, *, source: dict[str, Any] | None, **report: Any) -> Path:
    """The demo protocol over the accepted studies: from the folder, or from ``source``."""
    cohort = SimpleNamespace(dicom_dir=pacs.accepted, labels_csv=pacs.manifest.labels_csv)
    root.mkdir(parents=True)
    path = write_demo_protocol(root, cohort, n_resamples=100)
    raw = yaml.safe_load(path.read_text())
    raw["evaluation"]["planning"] = {"simulations": 0}
    raw["report"].update(report)
    if source is not None:
        del raw["data"]["dicom_dir"]
        raw["data"]["source"] = source
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def numbers(folder: Path) -> dict[str, Any]:
    """``evaluation.json`` without the protocol's hash (the routes' protocols differ in their data)."""
    document = json.loads((folder / "evaluation.json").read_text())
    del document["protocol"]
    return document


def leaks(cohort: Path, written: list[Path], *secrets: str) -> list[str]:
    """Files (or files under folders) of ``written`` that hold an identifier of ``cohort`` or a secret.

    The identifiers: every StudyInstanceUID, SOPInstanceUID, PatientID and AccessionNumber of the
    cohort's files. PNG figures are skipped (compressed; they draw no text from the headers).
    """
    identifiers = set(secrets)
    for path in (p for p in cohort.rglob("*") if p.is_file()):
        ds = pydicom.dcmread(path, stop_before_pixels=True)
        identifiers |= {
            str(ds.get(k, "")) for k in ("StudyInstanceUID", "SOPInstanceUID", "PatientID", "AccessionNumber")
        }
    identifiers.discard("")
    files = [f for w in written for f in ([w] if w.is_file() else sorted(w.rglob("*"))) if f.is_file()]
    return [
        f.name
        for f in files
        if f.suffix != ".png" and any(i in f.read_bytes().decode("latin-1") for i in identifiers)
    ]
