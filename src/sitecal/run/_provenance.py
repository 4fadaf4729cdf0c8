"""What a run folder's ``provenance.json`` records of how the run was made.

:func:`run_provenance` gathers the sha256 of every input (the protocol, the model, the labels, the
predictions file or the network's parts, the dataset manifest), the seeds, the command line, the
device, and how the logits were made: by the model here, read from a predictions file, or from the
network sites' parts.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sitecal import __version__
from sitecal._hash_manifest import FileHashes
from sitecal._pseudonym import Pseudonymizer
from sitecal.cohort import Cohort, parts_record
from sitecal.protocol import LoadedProtocol
from sitecal.provenance import file_sha256, instances_sha256, manifest_sha256, provenance_document
from sitecal.results import Predictions, ProvenanceDocument
from sitecal.run.stages import Analysed, ModelRun, hashed

__all__ = ["run_provenance"]


def run_provenance(
    loaded: LoadedProtocol,
    folder: Path,
    started: datetime,
    cohort: Cohort,
    analysed: Analysed,
    predictions: Predictions,
    model_run: ModelRun | None,
    file_hashes: FileHashes,
    *,
    pseudonymize: Pseudonymizer,
    command_line: Sequence[str] | None,
    device: str,
) -> dict[str, Any]:
    """``provenance.json``: what the run read (sha256s), with what, where, and how the logits were made."""
    protocol = loaded.protocol
    studies = analysed.studies
    sha256: dict[str, Any] = {"protocol": loaded.sha256}
    if model_run is not None:
        sha256["model"] = model_run.sha256
    elif loaded.model_path is not None and loaded.model_path.is_file():
        sha256["model"] = file_sha256(loaded.model_path)  # named by the protocol, not run
    if loaded.labels_path is not None:
        sha256["labels"] = file_sha256(loaded.labels_path)
    parts = (
        parts_record(Path(str(loaded.predictions_path)), pseudonymize=pseudonymize) if loaded.parts else None
    )
    if parts is not None:  # a network's sites' parts: the model was run there, by sitecal predict
        sha256["predictions_parts"] = parts.pop("sha256")
        sha256["model"] = parts["model_sha256"]
    elif loaded.predictions_path is not None:
        sha256["predictions_file"] = file_sha256(loaded.predictions_path)
    if file_hashes:
        sha256["dataset_manifest"] = manifest_sha256(pair for s in studies for pair in hashed(s, file_hashes))
        sha256["instances"] = instances_sha256(uid for s in studies for uid in s.instance_uids)
    model: dict[str, Any] = (
        dict(model_run.record)
        if model_run is not None
        else {
            "name": protocol.model.name,
            **({"version": protocol.model.version} if protocol.model.version else {}),
        }
    )
    document = provenance_document(
        sitecal_version=__version__,
        created_utc=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        command_line=shlex.join(command_line if command_line is not None else sys.argv),
        run_folder=folder.name,
        seeds={"split": protocol.calibration.split.seed, "bootstrap": protocol.evaluation.bootstrap.seed},
        sha256=sha256,
        outputs_sha256={"predictions": file_sha256(folder / "predictions.csv")},
        model=model,
        transforms_sha256=model_run.transforms_sha256 if model_run is not None else None,
        pseudonym_key=pseudonymize.fingerprint,
        device=device if model_run is not None else None,
        logits=(
            {"cached": predictions.n_cached, "computed": predictions.n_computed}
            if model_run is not None
            else None
        ),
    )
    if parts is not None:
        document["network_parts"] = parts
    elif model_run is None:
        document["predictions_file"] = _predictions_file_record(loaded, cohort)
    else:
        document["inference"] = dict(model_run.inference)
    if file_hashes:  # how many files were read, how many remembered unchanged (sitecal._hash_manifest)
        document["file_hashes"] = {"hashed": file_hashes.n_hashed, "reused": file_hashes.n_reused}
    if cohort.retrieval is not None:  # the query and what it returned: counts and hashes, no identifier
        document["pacs"] = dict(cohort.retrieval)
    ProvenanceDocument.from_dict(document, source="provenance.json")  # as `sitecal schema provenance` says
    return document


def _predictions_file_record(loaded: LoadedProtocol, cohort: Cohort) -> dict[str, Any]:
    """How the predictions file was read (the model was not run here), for provenance and the report."""
    from sitecal.cohort.predictions_file import PROBABILITY_FLOOR, SUM_TOLERANCE

    summary = cohort.predictions_file
    assert summary is not None
    data = loaded.protocol.data
    return {
        "model_run_here": False,
        "rows": summary.rows,
        "usable_rows": summary.usable_rows,
        "scores": "probabilities" if summary.score_kind == "prob" else "logits",
        "key": "sitecal study pseudonym" if summary.pseudonymised else data.key,
        "patients": summary.patients,
        "labels": summary.labels,
        "subgroups_from": sorted(
            {
                "DICOM headers" if s.tag else "predictions file columns"
                for s in loaded.protocol.subgroups.values()
                if s.intersection is None
            }
        ),
        "dicom_joined": data.dicom_dir is not None,
        **(
            {"probability_floor": PROBABILITY_FLOOR, "sum_tolerance": SUM_TOLERANCE}
            if summary.score_kind == "prob"
            else {}
        ),
    }
