"""The demo's and the CT demo's evaluations, pinned from fixed predictions.

The model's logits differ in their last bits from one CPU to another, so the pin starts after the model:
a run of each demo hands :func:`sitecal.evaluation.evaluate` its inputs (logits, labels, each study's
patient, subgroup values, the cohort's flow and the protocol), and those inputs are stored here with the
``evaluation.json`` the run wrote and the text of its report. The test evaluates the stored inputs again
and must give the same ``evaluation.json``, byte for byte, and the same report text.

Patients are stored as ranks (:func:`sitecal._split_key.rank_key`), not as the run's split keys: the
split and the resampling follow the keys' sorted order only, which the ranks keep, and a rank names nobody.

Write a demo's pin again (only when a change of numbers is intended, and say why in the commit)::

    mkdir /tmp/pin && cd /tmp/pin && sitecal demo --generate-only && cd -
    python -m tests.e2e.pinned capture demo /tmp/pin/sitecal-demo/demo.yaml

``capture`` runs the protocol with the installed sitecal, checks that the stored inputs give the run's own
``evaluation.json`` before it writes anything, and writes ``tests/e2e/data/NAME/``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sitecal._split_key import rank_key, split_ranks
from sitecal.evaluation import EvaluationData, evaluate
from sitecal.protocol import Protocol
from sitecal.results import write_document

DATA = Path(__file__).resolve().parent / "data"
#: the run-folder documents the report is rendered from, besides evaluation.json
REPORT_DOCUMENTS = ("calibration.json", "provenance.json", "report-context.json", "protocol.yaml")


@dataclass(frozen=True)
class Pinned:
    """One demo's stored evaluation inputs."""

    protocol: Protocol
    data: EvaluationData
    cohort_flow: Mapping[str, Any]
    protocol_sha256: str


def load(name: str) -> Pinned:
    """The stored inputs of ``tests/e2e/data/NAME/``."""
    folder = DATA / name
    meta = json.loads((folder / "inputs.json").read_text())
    with np.load(folder / "inputs.npz", allow_pickle=False) as arrays:
        data = EvaluationData(
            logits=arrays["logits"],
            labels=arrays["labels"],
            patient_keys=np.array([rank_key(int(r)) for r in arrays["patient_ranks"]]),
            study_keys=arrays["study_keys"],
            attributes={a: arrays[f"attribute.{a}"] for a in meta["attributes"]},
            class_names=meta["class_names"],
        )
    raw = yaml.safe_load((folder / "protocol.yaml").read_text(encoding="utf-8"))
    return Pinned(
        protocol=Protocol.model_validate(raw),
        data=data,
        cohort_flow=meta["cohort_flow"],
        protocol_sha256=meta["protocol_sha256"],
    )


def evaluation_bytes(pinned: Pinned, out: Path) -> bytes:
    """Evaluate the stored inputs and write ``evaluation.json`` into ``out``; its bytes."""
    outcome = evaluate(
        pinned.protocol, pinned.data, cohort_flow=pinned.cohort_flow, protocol_sha256=pinned.protocol_sha256
    )
    write_document(out / "evaluation.json", outcome.result)
    return (out / "evaluation.json").read_bytes()


def pinned_evaluation(name: str) -> bytes:
    """The ``evaluation.json`` the run wrote."""
    return gzip.decompress((DATA / name / "evaluation.json.gz").read_bytes())


def report_text(name: str, evaluation: bytes, out: Path) -> str:
    """Render a run folder of the stored documents and ``evaluation`` (unsealed); the report's text."""
    from sitecal.run.stages import render_stored

    out.mkdir(parents=True, exist_ok=True)
    for document in REPORT_DOCUMENTS:
        shutil.copyfile(DATA / name / document, out / document)
    (out / "evaluation.json").write_bytes(evaluation)
    pdf = render_stored(out)
    return subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True
    ).stdout


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """The JSON paths where two parsed documents differ (for a readable failure)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            if key not in a or key not in b:
                yield f"{path}.{key}: only in {'the pin' if key in b else 'the new document'}"
            else:
                yield from differences(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from differences(x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        yield f"{path}: {a!r} (new) != {b!r} (pinned)"


@contextmanager
def _captured_inputs() -> Iterator[dict[str, Any]]:
    """Record what the run hands to ``evaluate``."""
    import sitecal.run.stages as stages

    seen: dict[str, Any] = {}
    original = stages.evaluate

    def recording(protocol: Protocol, data: EvaluationData, **kwargs: Any) -> Any:
        seen.update(protocol=protocol, data=data, **kwargs)
        return original(protocol, data, **kwargs)

    stages.evaluate = recording  # type: ignore[assignment]
    try:
        yield seen
    finally:
        stages.evaluate = original


def capture(name: str, protocol_path: Path) -> None:
    """Run ``protocol_path`` and store its evaluation's inputs, evaluation.json and report text."""
    from sitecal.protocol import load_protocol
    from sitecal.run import run_protocol

    with _captured_inputs() as seen:
        result = run_protocol(load_protocol(protocol_path), progress=False)
    data: EvaluationData = seen["data"]
    folder = DATA / name
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "logits": data.logits,
        "labels": data.labels,
        "patient_ranks": np.array(split_ranks(list(data.patient_keys)), dtype=np.int64),
        "study_keys": np.asarray(data.study_keys, dtype=str),
    } | {f"attribute.{a}": np.asarray(v, dtype=str) for a, v in data.attributes.items()}
    np.savez_compressed(folder / "inputs.npz", **arrays)
    meta = {
        "attributes": list(data.attributes),
        "class_names": list(data.class_names),
        "cohort_flow": seen["cohort_flow"],
        "protocol_sha256": seen["protocol_sha256"],
    }
    (folder / "inputs.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    for document in REPORT_DOCUMENTS:
        shutil.copyfile(result.folder / document, folder / document)
    written = (result.folder / "evaluation.json").read_bytes()
    scratch = folder / "scratch"
    again = evaluation_bytes(load(name), _fresh(scratch))
    if again != written:
        shutil.rmtree(folder)
        sys.exit(f"the stored inputs do not give the run's evaluation.json ({result.folder}): nothing pinned")
    (folder / "evaluation.json.gz").write_bytes(gzip.compress(written, mtime=0))
    (folder / "report.txt").write_text(report_text(name, written, _fresh(scratch)))
    shutil.rmtree(scratch)
    print(f"pinned {name}: verdict {result.verdict}, {len(data.labels)} studies, {folder}")


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "capture":
        sys.exit("usage: python -m tests.e2e.pinned capture NAME PROTOCOL")
    capture(sys.argv[2], Path(sys.argv[3]))
