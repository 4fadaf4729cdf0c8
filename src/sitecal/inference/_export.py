"""The calibrated model in the forms deployment runs: TorchScript and torch.export, the group an integer.

:class:`GroupTemperatureScaler` takes group names, which neither TorchScript nor torch.export can carry
(``torch.export`` bakes them in as guards). :class:`IndexedTemperatureScaler` takes the group as an
integer tensor instead: index ``i < len(groups)`` is the i-th group of :func:`group_table` (names sorted),
and ``len(groups)`` is the global temperature, for a group the fit did not see. It returns calibrated
probabilities. :func:`export_calibrated` writes the model in either format with the table beside it
(``<file>.groups.json``), loads the file back and checks that its probabilities equal the eager module's
on the example input; the saved files need only PyTorch to load.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from sitecal._io import write_json_atomic
from sitecal.calibration import GroupTemperatures
from sitecal.errors import DataError

__all__ = ["EXPORT_FORMATS", "IndexedTemperatureScaler", "export_calibrated", "group_table"]

EXPORT_FORMATS = ("torchscript", "torch-export")
#: Largest difference allowed between the exported file's probabilities and the eager module's.
ROUND_TRIP_TOLERANCE = 1e-6


def group_table(temperatures: GroupTemperatures, **facts: Any) -> dict[str, Any]:
    """The group -> index table written beside an export (``facts``: e.g. ``per``, ``class_names``).

    >>> from sitecal.calibration import fit_group_temperatures
    >>> import numpy as np
    >>> t = fit_group_temperatures(np.array([[1.0, 0.0]] * 4), [0, 1, 0, 0], ["B", "A", "B", "A"],
    ...                            min_group_size=1)
    >>> table = group_table(t)
    >>> table["groups"], table["global_index"]
    ({'A': 0, 'B': 1}, 2)
    """
    names = sorted(temperatures.groups)
    return {
        "format": "sitecal.export.groups",
        "version": 1,
        **facts,
        "groups": {name: i for i, name in enumerate(names)},
        "global_index": len(names),
        "temperatures": [temperatures.groups[n].temperature for n in names]
        + [temperatures.global_fit.temperature],
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


def _torchscript(module: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor], path: Path) -> Any:
    """Trace ``module`` to TorchScript at ``path`` and load it back.

    PyTorch 2.13 deprecates TorchScript (use torch.export where the runtime allows); deployments that
    still run it ask for it by name, so its deprecation warning is expected here and silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(module, inputs)  # type: ignore[no-untyped-call]
        torch.jit.save(traced, str(path))
        return torch.jit.load(str(path))  # type: ignore[no-untyped-call]


def export_calibrated(
    model: nn.Module,
    temperatures: GroupTemperatures,
    path: Path,
    *,
    fmt: Literal["torchscript", "torch-export"],
    example: torch.Tensor,
    facts: Mapping[str, Any] | None = None,
) -> Path:
    """Write the calibrated model to ``path`` and its group table to ``<path>.groups.json``; check it.

    ``example``: an input batch (B >= 2) the file is traced or exported with and checked on: the file,
    loaded back, must give the eager module's probabilities within :data:`ROUND_TRIP_TOLERANCE` for
    every group index. Returns the group table's path.

    Raises
    ------
    DataError
        An unknown format, a model the format cannot capture (with PyTorch's reason), or a file whose
        probabilities differ from the eager module's.
    """
    if fmt not in EXPORT_FORMATS:
        raise DataError(f"--format {fmt!r}: give one of {', '.join(EXPORT_FORMATS)}.")
    module = IndexedTemperatureScaler(model, temperatures).eval()
    n_slots = len(temperatures.groups) + 1
    groups = torch.arange(example.shape[0], dtype=torch.int64) % n_slots
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        expected = module(example, groups)
        try:
            if fmt == "torchscript":
                loaded: Any = _torchscript(module, (example, groups), path)
            else:
                batch = torch.export.Dim("batch", min=1)
                program = torch.export.export(
                    module, (example, groups), dynamic_shapes=({0: batch}, {0: batch})
                )
                torch.export.save(program, str(path))
                loaded = torch.export.load(str(path)).module()
        except (RuntimeError, TypeError, ValueError) as exc:  # what torch raises for what it cannot capture
            raise DataError(
                f"{path}: PyTorch could not write the model as {fmt} ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}). Try the other format."
            ) from None
        got = loaded(example, groups)
    gap = float((got - expected).abs().max())
    if not gap <= ROUND_TRIP_TOLERANCE:
        raise DataError(
            f"{path}: the {fmt} file's probabilities differ from the model's by {gap:.2g} (more than "
            f"{ROUND_TRIP_TOLERANCE:g}); it was not kept as checked."
        )
    table = path.with_name(path.name + ".groups.json")
    write_json_atomic(table, group_table(temperatures, **dict(facts or {})))
    return table
