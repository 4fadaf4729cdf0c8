"""Cohort + model → logits: the DICOM reader, the protocol's transforms, model loading, batched inference."""

from __future__ import annotations

from sitecal.inference._bundle_config import first_line
from sitecal.inference._deploy import GroupTemperatureScaler
from sitecal.inference._export import (
    EXPORT_FORMATS,
    ExportFormat,
    IndexedTemperatureScaler,
    discard_export,
    export_calibrated,
    group_table,
    load_exported,
    round_trip_tolerance,
)
from sitecal.inference._export_methods import IndexedMethodCalibrator
from sitecal.inference._export_onnx import require_onnx
from sitecal.inference._precision import PrecisionCheck
from sitecal.inference._settle import settle_inference
from sitecal.inference._sharded import DEFAULT_SHARD_SIZE, Placement, predict_sharded, scheduler_problem
from sitecal.inference.cache import LogitCache, cache_identity, image_key
from sitecal.inference.models import LoadedModel, architecture_code_sha256, file_sha256, load_model
from sitecal.inference.predict import InferenceResult, predict_files
from sitecal.inference.reader import DicomImageReader, presentation_values
from sitecal.inference.transforms import build_transforms, transform_fingerprint

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "EXPORT_FORMATS",
    "DicomImageReader",
    "ExportFormat",
    "GroupTemperatureScaler",
    "IndexedMethodCalibrator",
    "IndexedTemperatureScaler",
    "InferenceResult",
    "LoadedModel",
    "LogitCache",
    "Placement",
    "PrecisionCheck",
    "architecture_code_sha256",
    "build_transforms",
    "cache_identity",
    "discard_export",
    "export_calibrated",
    "file_sha256",
    "first_line",
    "group_table",
    "image_key",
    "load_exported",
    "load_model",
    "predict_files",
    "predict_sharded",
    "presentation_values",
    "require_onnx",
    "round_trip_tolerance",
    "scheduler_problem",
    "settle_inference",
    "transform_fingerprint",
]
