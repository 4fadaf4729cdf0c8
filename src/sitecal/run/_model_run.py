"""The predict stage: the model run here on a cohort's studies, and what provenance records of the run.

:func:`predict` (cohort + model → :class:`~sitecal.results.Predictions` and a :class:`ModelRun`) runs the
model in this process, or shard by shard on Dask workers; :func:`file_hashes_of` and :func:`hashed` give
the files' sha256s that key the logit cache and make the dataset manifest.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sitecal._hash_manifest import FileHashes, HashManifest, hash_files
from sitecal._pseudonym import Pseudonymizer
from sitecal._text import plural
from sitecal.cohort import Cohort, Study
from sitecal.errors import DataError
from sitecal.protocol import LoadedProtocol
from sitecal.results import Predictions

if TYPE_CHECKING:
    from monai.transforms import Compose

    from sitecal.inference import InferenceResult, LoadedModel, LogitCache, Placement

__all__ = ["SHARD_PARTS", "ModelRun", "file_hashes_of", "hashed", "predict"]

logger = logging.getLogger(__name__)

#: Where sharded inference writes its parts (under the protocol's output folder) until they are merged.
SHARD_PARTS = ".sitecal-shards"


@dataclass(frozen=True)
class ModelRun:
    """What provenance records of a model run here."""

    sha256: str
    record: Mapping[str, Any]
    transforms_sha256: str
    file_hashes: FileHashes
    #: how the logits were computed: batch size, precision and its check, and the Dask shards if any
    inference: Mapping[str, Any] = field(default_factory=dict)


def predict(
    loaded: LoadedProtocol,
    cohort: Cohort,
    pseudonymize: Pseudonymizer,
    *,
    device: str = "cpu",
    progress: bool = True,
    placement: Placement | None = None,
) -> tuple[Predictions, ModelRun]:
    """Cohort + model → logits of every study the model could read (the others in ``failures``).

    With ``placement`` the model runs shard by shard on Dask workers
    (:mod:`sitecal.inference._sharded`), giving the same logits.
    """
    from sitecal.inference import (
        LogitCache,
        build_transforms,
        cache_identity,
        image_key,
        load_model,
        predict_files,
        transform_fingerprint,
    )

    protocol = loaded.protocol
    if loaded.model_path is None:
        raise DataError(f"{loaded.path}: model.path is not given, so the model cannot be run here.")
    _check_run_size(cohort, protocol.inputs.max_pixels_per_run)
    model = load_model(protocol.model, loaded.model_path)
    transforms = build_transforms(
        protocol.inputs.transforms, voi=protocol.inputs.voi, max_values=protocol.inputs.max_pixels_per_image
    )
    transforms_sha256 = transform_fingerprint(protocol.inputs.transforms, protocol.inputs.voi)
    file_hashes = file_hashes_of(  # cache keys and the dataset manifest
        cohort, progress=progress, manifest=HashManifest(loaded.hash_manifest_path, pseudonymize.key)
    )
    n_classes = len(protocol.model.class_names)
    volume = protocol.inputs.kind == "volume"
    cache_dir = loaded.logit_cache_dir
    identity = cache_identity(model.identity(), transforms_sha256=transforms_sha256)
    cache = LogitCache(cache_dir, identity, n_classes, secret=pseudonymize.key) if cache_dir else None
    items = [list(s.files) if volume else s.path for s in cohort.studies]
    keys = [image_key(pseudonymize, hashed(s, file_hashes)) for s in cohort.studies]
    if placement is not None:
        inference = _predict_sharded(
            loaded,
            model,
            transforms,
            items,
            keys,
            identity_sha256=_canonical_sha256(identity),
            cache=cache,
            placement=placement,
            device=device,
            progress=progress,
        )
    else:
        inference = predict_files(
            model,
            items,
            transforms,
            n_classes=n_classes,
            batch_size=protocol.inputs.batch_size,
            num_workers=protocol.inputs.num_workers,
            device=device,
            progress=progress,
            cache=cache,
            keys=keys,
            precision=protocol.inputs.precision,
            precision_tolerance=protocol.inputs.precision_tolerance,
        )
    logger.info("logits: %d from the cache, %d computed", inference.n_cached, inference.n_computed)
    return _predictions(cohort, protocol.model.class_names, inference), ModelRun(
        sha256=model.sha256,
        record=model.record(),
        transforms_sha256=transforms_sha256,
        file_hashes=file_hashes,
        inference=_inference_record(inference, placement),
    )


def _predict_sharded(
    loaded: LoadedProtocol,
    model: LoadedModel,
    transforms: Compose,
    items: Sequence[Path | Sequence[Path]],
    keys: Sequence[str],
    *,
    identity_sha256: str,
    cache: LogitCache | None,
    placement: Placement,
    device: str,
    progress: bool,
) -> InferenceResult:
    """The logits computed shard by shard on Dask workers, in one batch size and one precision.

    The batch size and the precision are settled here once, on this process's device, for every shard.
    """
    from sitecal.inference import predict_sharded, settle_inference

    protocol = loaded.protocol
    n_classes = len(protocol.model.class_names)
    assert loaded.model_path is not None
    size, check = settle_inference(  # once for every shard: one batch size, one precision
        model,
        items,
        transforms,
        n_classes=n_classes,
        batch_size=protocol.inputs.batch_size,
        precision=protocol.inputs.precision,
        tolerance=protocol.inputs.precision_tolerance,
        device="cuda:0" if device == "cuda" else device,
    )
    return predict_sharded(
        model=protocol.model,
        model_path=loaded.model_path,
        model_sha256=model.sha256,
        inputs=protocol.inputs,
        items=items,
        keys=keys,
        n_classes=n_classes,
        identity_sha256=identity_sha256,
        cache=cache,
        parts_dir=loaded.output_root / SHARD_PARTS,
        placement=placement,
        batch_size=size,
        precision_check=check,
        device=device,
        progress=progress,
    )


def _predictions(cohort: Cohort, class_names: Sequence[str], inference: InferenceResult) -> Predictions:
    """The logits of the studies the model read, in float64, with the reason for each it could not."""
    ok = [cohort.studies[i] for i in inference.ok]
    return Predictions(
        class_names=tuple(class_names),
        study_keys=tuple(s.study_key for s in ok),
        patient_keys=tuple(s.patient_key for s in ok),
        logits=inference.logits.astype(np.float64),
        source="model",
        failures=tuple((cohort.studies[i].study_key, reason) for i, reason in inference.failures),
        n_cached=inference.n_cached,
        n_model_failed=inference.n_model_failed,
        n_non_finite=inference.n_non_finite,
    )


def _inference_record(inference: InferenceResult, placement: Placement | None) -> dict[str, Any]:
    """How the logits were computed, for provenance: batch size, precision, and the Dask shards if any."""
    return {
        "batch_size": inference.batch_size,
        "precision": inference.precision_check.to_dict(),
        "dask": None
        if placement is None
        else {
            "cluster": "existing scheduler" if placement.scheduler else "LocalCluster",
            "workers": placement.n_workers,
            "shard_size": placement.shard_size,
        },
    }


def _check_run_size(cohort: Cohort, limit: int) -> None:
    """Stop before inference when the studies to analyse declare more pixel values than ``limit``."""
    total = sum(s.declared_values for s in cohort.studies)
    if total > limit:
        n = len(cohort.studies)
        raise DataError(
            f"the {n} {plural(n, 'study', 'studies')} to analyse {plural(n, 'declares', 'declare')} "
            f"{total:,} pixel values in all, more than "
            f"inputs.max_pixels_per_run ({limit:,}). Nothing was inferred. Raise inputs.max_pixels_per_run "
            "in the protocol if this is the cohort you mean to validate, or narrow data.dicom_dir."
        )


def _canonical_sha256(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_hashes_of(cohort: Cohort, *, progress: bool, manifest: HashManifest | None = None) -> FileHashes:
    """sha256 of every file a study of the cohort is analysed on (read once, in 1 MiB chunks).

    With ``manifest``, a file unchanged since a run hashed it is not read again
    (:mod:`sitecal._hash_manifest`).
    """
    hashes = hash_files(
        (path for s in cohort.studies for path in s.files), manifest=manifest, progress=progress
    )
    logger.info("file hashes: %d from the manifest, %d computed", hashes.n_reused, hashes.n_hashed)
    return hashes


def hashed(study: Study, file_hashes: Mapping[Path, str]) -> list[tuple[str, str]]:
    """The study's ``(SOPInstanceUID, file sha256)`` pairs."""
    return [(uid, file_hashes[path]) for uid, path in zip(study.instance_uids, study.files, strict=True)]
