"""The calibrated model as a MONAI bundle: the network as TorchScript, the calibration a step after it.

The folder has MONAI's standard layout (https://docs.monai.io/en/stable/mb_specification.html)::

    configs/metadata.json    version, changelog, network_data_format, sitecal_calibration
    configs/inference.json   network_def (models/model.ts), preprocessing, calibration, calibrate, infer
    models/model.ts          the network alone, traced to TorchScript: image -> logits

``inference.json`` holds the temperatures in clear and applies them after the network::

    "calibrate": "$lambda logits, group_index: torch.softmax(logits / T[group_index], dim=1)"
    "infer":     "$lambda image, group_index: @calibrate(@network(image), group_index)"

A recalibration method other than temperature scaling (a group table with ``method``) is a traced map
``(logits, group_index) -> probabilities`` in ``models/calibration.ts`` (its parameters in the file's
buffers, their sha256 in the table), and ``calibrate`` loads it::

    "calibrate": "$torch.jit.load(@bundle_root + '/models/calibration.ts', map_location=@device).eval()"

so that MONAI's own :class:`monai.bundle.ConfigParser` loads it with PyTorch and MONAI alone (no sitecal,
no network class to import): ``parser.get_parsed_content("infer")(image, group_index)`` gives calibrated
probabilities. The network is TorchScript because a site's network class (the demo's included) may live
in a package the deployment does not have; ``models/model.ts`` is also what a MONAI bundle without a
``network_def`` class names, so sitecal reads the folder back as ``model.format: monai_bundle`` (the
network alone, to validate again). ``preprocessing`` is the protocol's transform chain after sitecal's
DICOM reader (presentation values), for reference: reading DICOM as sitecal does needs sitecal.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from sitecal._io import write_text_atomic

__all__ = ["CALIBRATION_FILE", "bundle_metadata", "inference_config", "load_bundle", "write_bundle_configs"]

#: A method's map beyond temperatures, traced to TorchScript, relative to the bundle folder.
CALIBRATION_FILE = "models/calibration.ts"

#: The JSON schema MONAI's own bundles name (a URL in the file; nothing here fetches it).
_SCHEMA = (
    "https://github.com/Project-MONAI/MONAI-extra-test-data/releases/download/0.8.1/meta_schema_20240725.json"
)
_GLOBAL = {True: "(one global temperature)", False: "(one global fit)"}
_CALIBRATE = (
    "$lambda logits, group_index: torch.softmax(logits / torch.tensor(@calibration#temperatures, "
    "dtype=logits.dtype, device=logits.device)[group_index].unsqueeze(1), dim=1)"
)


def inference_config(table: Mapping[str, Any], preprocessing: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``configs/inference.json``: the TorchScript network, then the calibration (``table``: group table)."""
    method = table.get("method")
    if method is None or method == "temperature":
        calibration: dict[str, Any] = {
            "method": "temperature",
            "per": table.get("per"),
            "groups": dict(table["groups"]),
            "global_index": table["global_index"],
            "temperatures": list(table["temperatures"]),
        }
        calibrate = _CALIBRATE
    else:
        calibration = {
            "method": method,
            "per": table.get("per"),
            "groups": dict(table["groups"]),
            "global_index": table["global_index"],
            "sources": dict(table["sources"]),
            "parameters": f"{CALIBRATION_FILE}: {table['parameters']}",
            "parameters_sha256": table["parameters_sha256"],
        }
        calibrate = f"$torch.jit.load(@bundle_root + '/{CALIBRATION_FILE}', map_location=@device).eval()"
    return {
        "imports": ["$import torch"],
        "bundle_root": ".",
        "device": "$torch.device('cpu')",
        "network_def": "$torch.jit.load(@bundle_root + '/models/model.ts', map_location=@device)",
        "network": "$@network_def.eval()",
        "class_names": list(table.get("class_names", [])),
        "preprocessing": {
            "_target_": "Compose",
            "transforms": [
                {"_target_": str(step["name"]), **dict(step.get("args") or {})} for step in preprocessing
            ]
            + [{"_target_": "EnsureType", "data_type": "tensor", "track_meta": False}],
        },
        "calibration": calibration,
        "calibrate": calibrate,
        "infer": "$lambda image, group_index: @calibrate(@network(image), group_index)",
    }


def bundle_metadata(
    table: Mapping[str, Any],
    *,
    example_shape: Sequence[int],
    source: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``configs/metadata.json``: the source bundle's metadata (or a new one) with the calibration added.

    The version is the source's (else the table's ``model_version``, else ``0.0.0``) with the build label
    ``+sitecal.<first 8 hex digits of the calibration's sha256>``: a calibrated model is not the
    provider's next release, and two calibrations get two versions (a method's: of its
    ``parameters_sha256``).
    """
    meta: dict[str, Any] = copy.deepcopy(dict(source)) if source else {"schema": _SCHEMA}
    method = table.get("method", "temperature")
    action, adjective = (
        ("temperature scaling", "temperature-scaled")
        if method == "temperature"
        else (f"{method} recalibration", f"{method}-recalibrated")
    )
    version = _calibrated_version(str(meta.get("version") or table.get("model_version") or "0.0.0"), table)
    per = table.get("per")
    changelog = (
        f"{action} {f'per {per}' if per else _GLOBAL[method == 'temperature']} added after the network "
        f"by sitecal {table.get('sitecal_version', '')}".rstrip()
        + (f", from the validation run {table['run']}" if table.get("run") else "")
    )
    meta |= {
        "version": version,
        "changelog": {version: changelog, **dict(meta.get("changelog") or {})},
        "monai_version": _version("monai"),
        "pytorch_version": torch.__version__.split("+")[0],
        "numpy_version": _version("numpy"),
        "name": f"{meta.get('name') or table.get('model_name') or 'model'} ({adjective} "
        f"{f'per {per}' if per else 'globally'})",
        "network_data_format": _network_data_format(meta, table, example_shape),
        "sitecal_calibration": {
            **{k: v for k, v in table.items() if k not in ("format", "version", "input", "output")},
            "network": "models/model.ts: the network alone (TorchScript), image -> logits",
            "applied_in": "configs/inference.json: calibrate (after the network"
            + ("" if method == "temperature" else f"; {CALIBRATION_FILE}")
            + "), infer (both)",
        },
    }
    return meta


def _calibrated_version(base: str, table: Mapping[str, Any]) -> str:
    """``base`` with the build label ``+sitecal.<first 8 hex digits of the calibration's sha256>``.

    The digest is of the groups and the temperatures (a method's: its ``parameters_sha256``); a ``base``
    that already has a build label gets the digest appended with a dot.
    """
    method = table.get("method", "temperature")
    fitted = table["temperatures"] if method == "temperature" else table["parameters_sha256"]
    digest = hashlib.sha256(json.dumps([table["groups"], fitted], sort_keys=True).encode()).hexdigest()[:8]
    return f"{base}{'.' if '+' in base else '+'}sitecal.{digest}"


def _network_data_format(
    meta: Mapping[str, Any], table: Mapping[str, Any], example_shape: Sequence[int]
) -> dict[str, Any]:
    """The bundle's inputs (the source's image, or one of ``example_shape``; the group index) and output."""
    class_names = list(table.get("class_names", []))
    image = (meta.get("network_data_format") or {}).get("inputs", {}).get("image") or {
        "type": "image",
        "format": "magnitude",
        "num_channels": int(example_shape[1]),
        "spatial_shape": [int(n) for n in example_shape[2:]],
        "dtype": "float32",
        "value_range": [],
        "is_patch_data": False,
        "channel_def": {"0": "image"},
    }
    return {
        "inputs": {
            "image": image,
            "group_index": {
                "type": "tensor",
                "format": "index",
                "num_channels": 1,
                "spatial_shape": [],
                "dtype": "int64",
                "value_range": [0, table["global_index"]],
                "is_patch_data": False,
                "channel_def": {},
                "description": "one per image: the index of its group in sitecal_calibration.groups, "
                "or sitecal_calibration.global_index for a group not listed",
            },
        },
        "outputs": {
            "pred": {
                "type": "probabilities",
                "format": "classes",
                "num_channels": len(class_names),
                "spatial_shape": [len(class_names)],
                "dtype": "float32",
                "value_range": [0, 1],
                "is_patch_data": False,
                "channel_def": {str(i): name for i, name in enumerate(class_names)},
            }
        },
    }


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def write_bundle_configs(folder: Path, inference: Mapping[str, Any], metadata: Mapping[str, Any]) -> Path:
    """Write ``configs/inference.json`` and ``configs/metadata.json``; return the metadata's path.

    Keys keep their order (the changelog newest first, the config in the order it runs).
    """
    for name, document in (("inference.json", inference), ("metadata.json", metadata)):
        write_text_atomic(folder / "configs" / name, json.dumps(document, indent=2, allow_nan=False) + "\n")
    return folder / "configs" / "metadata.json"


def load_bundle(folder: Path) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The bundle's ``infer`` as MONAI's :class:`~monai.bundle.ConfigParser` builds it from the folder."""
    from monai.bundle import ConfigParser

    parser = ConfigParser()
    parser.read_meta(str(folder / "configs" / "metadata.json"))
    parser.read_config(str(folder / "configs" / "inference.json"))
    parser["bundle_root"] = str(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load: TorchScript is deprecated
        warnings.simplefilter("ignore", FutureWarning)
        # resolving infer resolves network, which loads models/model.ts: under the filter
        infer: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = parser.get_parsed_content("infer")
    return infer
