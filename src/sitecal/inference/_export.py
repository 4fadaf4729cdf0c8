"""The calibrated model in the forms deployment runs: TorchScript, torch.export, ONNX, a MONAI bundle.

:class:`GroupTemperatureScaler` takes group names, which neither TorchScript nor torch.export can carry
(``torch.export`` bakes them in as guards). :class:`IndexedTemperatureScaler` takes the group as an
integer tensor instead: index ``i < len(groups)`` is the i-th group of :func:`group_table` (names sorted),
and ``len(groups)`` is the global temperature, for a group the fit did not see. It returns calibrated
probabilities. :class:`~sitecal.inference.IndexedMethodCalibrator` does the same for any recalibration
method (a :class:`~sitecal.calibration.GroupMethods`). :func:`export_calibrated` writes either in one of
:data:`EXPORT_FORMATS` with the table beside it (``<file>.groups.json``; a bundle holds it in its
configs), loads what it wrote back with the runtime that deploys it (PyTorch, onnxruntime, MONAI's
``ConfigParser``) and checks that its probabilities equal the eager module's on the example input. The
files need no sitecal to load.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from sitecal._io import write_json_atomic
from sitecal.calibration import GroupMethods, GroupTemperatures
from sitecal.errors import DataError
from sitecal.inference import _export_bundle, _export_onnx
from sitecal.inference._export_methods import IndexedMethodCalibrator, method_table

__all__ = [
    "EXPORT_FORMATS",
    "IndexedTemperatureScaler",
    "discard_export",
    "export_calibrated",
    "group_table",
    "load_exported",
    "round_trip_tolerance",
]

ExportFormat = Literal["torchscript", "torch-export", "onnx", "monai-bundle"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("torchscript", "torch-export", "onnx", "monai-bundle")
#: Largest difference allowed between the exported file's probabilities and the eager module's, where
#: the file runs on PyTorch's own kernels (TorchScript, torch.export, the bundle's TorchScript network).
ROUND_TRIP_TOLERANCE = 1e-6
#: The same for ONNX, which runs on onnxruntime's float32 kernels: they sum a convolution in another
#: order than PyTorch's, so the two runtimes' logits differ by float32 rounding, not by the model. On the
#: demo CNN's images both runtimes' logits are 6e-6 from float64's and 7e-6 from each other, which moves a
#: probability by up to 2e-6; 1e-5 allows for that and still refuses a wrong temperature or group.
ONNX_TOLERANCE = 1e-5


def round_trip_tolerance(fmt: str) -> float:
    """The largest difference allowed for ``fmt`` (:data:`ONNX_TOLERANCE` or :data:`ROUND_TRIP_TOLERANCE`)."""
    return ONNX_TOLERANCE if fmt == "onnx" else ROUND_TRIP_TOLERANCE


def group_table(calibration: GroupTemperatures | GroupMethods, **facts: Any) -> dict[str, Any]:
    """The group -> index table written beside an export (``facts``: e.g. ``per``, ``class_names``).

    For :class:`~sitecal.calibration.GroupTemperatures` it lists the temperatures (no ``method`` key: the
    table as it has always been). For :class:`~sitecal.calibration.GroupMethods` it adds ``method``,
    each group's ``sources`` (``own`` or ``global_fallback``), a description of the ``parameters`` the
    model holds in its buffers (the temperatures themselves for ``temperature``) and ``parameters_sha256``
    (of the canonical JSON of ``GroupMethods.to_dict()``).

    >>> from sitecal.calibration import fit_group_temperatures
    >>> import numpy as np
    >>> t = fit_group_temperatures(np.array([[1.0, 0.0]] * 4), [0, 1, 0, 0], ["B", "A", "B", "A"],
    ...                            min_group_size=1)
    >>> table = group_table(t)
    >>> table["groups"], table["global_index"]
    ({'A': 0, 'B': 1}, 2)
    """
    names = sorted(calibration.groups)
    head = {"format": "sitecal.export.groups", "version": 1, **facts}
    index = {"groups": {name: i for i, name in enumerate(names)}, "global_index": len(names)}
    if isinstance(calibration, GroupMethods):
        entries = method_table(calibration)
        body = {"method": entries.pop("method"), **index, **entries}
    else:
        body = {
            **index,
            "temperatures": [calibration.groups[n].temperature for n in names]
            + [calibration.global_fit.temperature],
        }
    return {
        **head,
        **body,
        "input": "group_index: int64 tensor (B,), the index of each row's group; global_index for a group "
        "not in the table",
        "output": "calibrated probabilities (B, C)",
    }


class IndexedTemperatureScaler(nn.Module):
    """``softmax(model(x) / T[group_index])``: the model and its temperatures, the group an integer.

    Parameters
    ----------
    model : torch.nn.Module
        Returns logits (B, C), C >= 2, in eval mode.
    temperatures : GroupTemperatures
        The fitted temperatures (``GroupTemperatures.from_dict`` of ``calibration.json``).
    """

    temperature: torch.Tensor

    def __init__(self, model: nn.Module, temperatures: GroupTemperatures) -> None:
        super().__init__()
        self.model = model
        table = group_table(temperatures)["temperatures"]
        self.register_buffer("temperature", torch.tensor(table, dtype=torch.float64))

    def forward(self, x: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
        """Calibrated probabilities (B, C) of the batch ``x`` whose rows belong to ``group_index``."""
        logits = self.model(x)
        t = self.temperature.to(logits.dtype)[group_index]
        return torch.softmax(logits / t.unsqueeze(1), dim=1)


def _torchscript(module: nn.Module, inputs: tuple[torch.Tensor, ...], path: Path) -> None:
    """Trace ``module`` to TorchScript at ``path``.

    PyTorch 2.13 deprecates TorchScript (use torch.export where the runtime allows); deployments that
    still run it ask for it by name, so its deprecation warning is expected here and silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(module, inputs)  # type: ignore[no-untyped-call]
        torch.jit.save(traced, str(path))


Calibrated = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def load_exported(path: Path, fmt: str) -> Calibrated:
    """What :func:`export_calibrated` wrote, loaded as deployment loads it: ``(image, group_index) -> probs``.

    TorchScript with ``torch.jit.load``, torch.export with ``torch.export.load(...).module()``, ONNX with
    onnxruntime (CPU), a MONAI bundle folder with :class:`monai.bundle.ConfigParser` (its ``infer``).
    Only for files sitecal wrote: ``torch.export.load`` unpickles (see :mod:`sitecal.inference.models`).
    """
    path = Path(path)
    if fmt == "onnx":
        return _export_onnx.load_onnx(path)
    if fmt == "monai-bundle":
        return _export_bundle.load_bundle(path)
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loaded: Calibrated = torch.jit.load(str(path))  # type: ignore[no-untyped-call]
        return loaded
    return torch.export.load(str(path)).module()


def _write(
    fmt: str,
    module: IndexedTemperatureScaler | IndexedMethodCalibrator,
    inputs: tuple[torch.Tensor, torch.Tensor],
    path: Path,
) -> None:
    if fmt == "torchscript":
        _torchscript(module, inputs, path)
    elif fmt == "torch-export":
        batch = torch.export.Dim("batch", min=1)
        program = torch.export.export(module, inputs, dynamic_shapes=({0: batch}, {0: batch}))
        torch.export.save(program, str(path))
    elif fmt == "onnx":
        _export_onnx.export_onnx(module, inputs, path)
    else:  # monai-bundle: the network alone; the configs apply the calibration after it
        (path / "models").mkdir(parents=True, exist_ok=True)
        _torchscript(module.model, inputs[:1], path / "models" / "model.ts")
        if isinstance(module, IndexedMethodCalibrator):  # a map beyond temperatures: its own file
            logits = module.model(inputs[0])
            _torchscript(module.calibration, (logits, inputs[1]), path / _export_bundle.CALIBRATION_FILE)


def export_calibrated(
    model: nn.Module,
    calibration: GroupTemperatures | GroupMethods,
    path: Path,
    *,
    fmt: ExportFormat,
    example: torch.Tensor,
    facts: Mapping[str, Any] | None = None,
    source_metadata: Mapping[str, Any] | None = None,
    preprocessing: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Write the calibrated model to ``path`` and its group table beside it; load it back and check it.

    Parameters
    ----------
    model : torch.nn.Module
        Returns logits (B, C), C >= 2, in eval mode.
    calibration : GroupTemperatures or GroupMethods
        The fitted temperatures (:class:`IndexedTemperatureScaler`), or any fitted recalibration method
        with one fit per group (:class:`~sitecal.inference.IndexedMethodCalibrator`; a bundle then holds
        the map as ``models/calibration.ts``).
    path : pathlib.Path
        The file to write (``torchscript``, ``torch-export``, ``onnx``), or the bundle folder
        (``monai-bundle``: new or empty), created; an existing file is replaced.
    fmt : {"torchscript", "torch-export", "onnx", "monai-bundle"}
        ``onnx`` needs the extra ``sitecal[onnx]`` (onnx, onnxscript, onnxruntime).
    example : torch.Tensor
        An input batch (B >= 2) the model is traced or exported with and checked on: the file, loaded
        back (:func:`load_exported`), must give the eager module's probabilities within
        :func:`round_trip_tolerance` (1e-6; 1e-5 for ONNX) for every group index, the global one included.
    facts : mapping, optional
        Written into the group table (:func:`group_table`), e.g. ``per``, ``class_names``; a bundle's
        metadata also reads ``model_name``, ``model_version``, ``sitecal_version`` and ``run``.
    source_metadata : mapping, optional
        ``monai-bundle``: the metadata of the bundle the model came from, which the new one starts from
        (copied; nothing in it is run).
    preprocessing : sequence of mapping
        ``monai-bundle``: the protocol's transforms (``{"name", "args"}``), written as the bundle's
        ``preprocessing``.

    Returns
    -------
    pathlib.Path
        The group table: ``<path>.groups.json``, or the bundle's ``configs/metadata.json`` (its
        ``sitecal_calibration``).

    Raises
    ------
    DataError
        An unknown format, onnx not installed, a model the format cannot capture (with the exporter's
        reason), or a file whose probabilities differ from the eager module's (the file is removed).
    """
    if fmt not in EXPORT_FORMATS:
        raise DataError(f"--format {fmt!r}: give one of {', '.join(EXPORT_FORMATS)}.")
    if fmt == "onnx":
        _export_onnx.require_onnx()
    module = _indexed(model, calibration)
    n_slots = len(calibration.groups) + 1  # every group's index and the global one, cycled over the batch
    groups = torch.arange(example.shape[0], dtype=torch.int64) % n_slots
    path = Path(path)
    table = group_table(calibration, **dict(facts or {}))
    _make_room(path, fmt)
    with torch.no_grad():
        expected = module(example, groups)
        _write_or_refuse(fmt, module, (example, groups), path)
        if fmt == "monai-bundle":
            written = _export_bundle.write_bundle_configs(
                path,
                _export_bundle.inference_config(table, preprocessing),
                _export_bundle.bundle_metadata(
                    table, example_shape=tuple(example.shape), source=source_metadata
                ),
            )
        got = load_exported(path, fmt)(example, groups)
    _check_round_trip(path, fmt, got, expected)
    if fmt == "monai-bundle":
        return written
    written = path.with_name(path.name + ".groups.json")
    write_json_atomic(written, table)
    return written


def _indexed(
    model: nn.Module, calibration: GroupTemperatures | GroupMethods
) -> IndexedTemperatureScaler | IndexedMethodCalibrator:
    """The model with its calibration, taking the group as an index, in eval mode."""
    if isinstance(calibration, GroupMethods):
        return IndexedMethodCalibrator(model, calibration).eval()
    return IndexedTemperatureScaler(model, calibration).eval()


def _make_room(path: Path, fmt: str) -> None:
    """Create the bundle folder (refusing one that is not empty), or the file's parent folder."""
    if fmt == "monai-bundle":
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise DataError(f"{path}: exists and is not an empty folder: give a new folder for the bundle.")
        path.mkdir(parents=True, exist_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)


def _write_or_refuse(
    fmt: str,
    module: IndexedTemperatureScaler | IndexedMethodCalibrator,
    inputs: tuple[torch.Tensor, torch.Tensor],
    path: Path,
) -> None:
    """Write ``module`` as ``fmt``; DataError with the exporter's reason (and nothing left) when it cannot."""
    try:
        _write(fmt, module, inputs, path)
    except (RuntimeError, TypeError, ValueError) as exc:
        # what the exporters raise for what they cannot capture
        discard_export(path)
        raise DataError(
            f"{path}: PyTorch could not write the model as {fmt} ({type(exc).__name__}: "
            f"{_first_line(exc)}). Try another format."
        ) from None


def _check_round_trip(path: Path, fmt: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    """Remove the export and raise DataError when its probabilities are not the eager module's."""
    gap = float((got.double() - expected.double()).abs().max())
    if not gap <= round_trip_tolerance(fmt):
        discard_export(path)
        raise DataError(
            f"{path}: the {fmt} file's probabilities differ from the model's by {gap:.2g} (more than "
            f"{round_trip_tolerance(fmt):g}); it was removed. Try another format."
        )


def discard_export(path: Path) -> None:
    """Remove an export that failed its check (the file or bundle folder, and its ``.groups.json``).

    So that no unchecked model stays to be deployed.
    """
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    path.with_name(path.name + ".groups.json").unlink(missing_ok=True)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else "no message"
