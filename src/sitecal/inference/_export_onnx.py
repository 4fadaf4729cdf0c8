"""The calibrated model as ONNX: written with PyTorch's ``torch.export``-based exporter, run with onnxruntime.

The inputs are ``image`` (float32, the batch axis dynamic) and ``group_index`` (int64 ``(B,)``); the output
is ``probabilities`` (float32 ``(B, C)``). The legacy TorchScript-based exporter (``dynamo=False``) is
deprecated in PyTorch 2.13; the ``torch.export`` one (the default) takes the batch axis as a
``torch.export.Dim``, as :func:`sitecal.inference.export_calibrated` does for ``torch-export``.

onnx, onnxscript and onnxruntime are the optional extra ``sitecal[onnx]``; without them
:func:`require_onnx` says how to install them.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sitecal.errors import DataError

__all__ = ["INPUT_NAMES", "OUTPUT_NAME", "export_onnx", "load_onnx", "require_onnx"]

INPUT_NAMES = ("image", "group_index")
OUTPUT_NAME = "probabilities"
#: ONNX operator set written; onnxruntime >= 1.18 runs it.
OPSET = 18
_EXTRA = 'pip install "sitecal[onnx]"'


def require_onnx() -> None:
    """Raise :class:`DataError` naming the extra to install when onnx, onnxscript or onnxruntime is absent."""
    import importlib.util

    missing = [
        name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise DataError(
            f"--format onnx needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f"installed: {_EXTRA} (or choose --format torchscript, torch-export or monai-bundle)."
        )


@contextlib.contextmanager
def _exporter_noise_silenced() -> Iterator[None]:
    """Silence what the exporter says on every call and that is no finding about the model, then restore.

    - its registry logs a warning per torchvision operator it skips when torchvision is not installed;
    - it warns that the shared batch axis name is used once ("will not be used, since it shares ...");
    - torch's own pytree warns about its deprecated ``LeafSpec`` while the program is traced.
    """
    registry = logging.getLogger("torch.onnx._internal.exporter._registration")
    previous = registry.level
    registry.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r".*The axis name: .* will not be used", category=UserWarning
            )
            warnings.filterwarnings(
                "ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning
            )
            yield
    finally:
        registry.setLevel(previous)


def export_onnx(module: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor], path: Path) -> None:
    """Write ``module`` (called as ``module(image, group_index)``) to ``path`` as one ONNX file.

    The weights are stored inside the file (no external data file), so the file alone is the model.
    """
    require_onnx()
    batch = torch.export.Dim("batch", min=1)
    with _exporter_noise_silenced():
        torch.onnx.export(
            module,
            inputs,
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_shapes=({0: batch}, {0: batch}),
            opset_version=OPSET,
            dynamo=True,
            external_data=False,
            verbose=False,
        )


def load_onnx(path: Path) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The ONNX file at ``path`` as a function ``(image, group_index) -> probabilities``, on onnxruntime."""
    require_onnx()
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: its notes on graph optimisation are not findings
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(image: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
        feed: dict[str, Any] = {
            INPUT_NAMES[0]: np.ascontiguousarray(image.detach().cpu().numpy(), dtype=np.float32),
            INPUT_NAMES[1]: np.ascontiguousarray(group_index.detach().cpu().numpy(), dtype=np.int64),
        }
        (out,) = session.run([OUTPUT_NAME], feed)
        return torch.from_numpy(np.asarray(out))

    return run
