"""The small 3-D CNN bundled with the CT demo, and how to load its shipped weights without pickle."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._weights import load_weights, read_model_card

__all__ = [
    "CT_INPUT_SHAPE",
    "DemoNet3D",
    "demo_ct_metadata",
    "demo_ct_metadata_path",
    "demo_ct_weights_path",
    "load_demo_ct_model",
]

#: Shape of one input to :class:`DemoNet3D`: (channels, slices, rows, columns).
CT_INPUT_SHAPE: tuple[int, int, int, int] = (1, 16, 48, 48)

_WEIGHTS_NAME = "demo_ct.safetensors"
_METADATA_NAME = "demo_ct.json"
_REBUILD = "python examples/demo/train.py --ct"


def _block(c_in: int, c_out: int, stride: tuple[int, int, int] = (1, 1, 1)) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv3d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.BatchNorm3d(c_out),
        nn.ReLU(inplace=True),
    )


class DemoNet3D(nn.Module):
    """A four-block 3-D CNN for the CT demo's nodule task (about 40 k parameters, under 200 KB).

    The first block halves rows and columns (16 x 48 x 48 -> 16 x 24 x 24), the next two are followed by
    2 x 2 x 2 max pooling (-> 8 x 12 x 12 -> 4 x 6 x 6), the last by global max pooling (a nodule is a
    local finding: one strong response anywhere is the evidence) and a linear layer.

    Parameters
    ----------
    n_classes : int, default 2
        Number of output logits.
    width : int, default 8
        Channels of the first block; 2x, 4x and 4x that in the next three.

    Examples
    --------
    >>> import torch
    >>> DemoNet3D()(torch.zeros(2, 1, 16, 48, 48)).shape
    torch.Size([2, 2])
    """

    def __init__(self, n_classes: int = 2, width: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _block(1, width, stride=(1, 2, 2)),
            _block(width, 2 * width),
            nn.MaxPool3d(2),
            _block(2 * width, 4 * width),
            nn.MaxPool3d(2),
            _block(4 * width, 4 * width),
            nn.AdaptiveMaxPool3d(1),
            nn.Flatten(),
        )
        self.classifier = nn.Linear(4 * width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch.

        Parameters
        ----------
        x : torch.Tensor, shape (B, 1, 16, 48, 48)
            HU volumes after the protocol's transforms (window -1000..400 HU scaled to 0..1).

        Returns
        -------
        torch.Tensor, shape (B, n_classes)
        """
        logits: torch.Tensor = self.classifier(self.features(x))
        return logits


def demo_ct_weights_path() -> Path:
    """Path of the shipped weights, ``demo_ct.safetensors`` inside the package."""
    return Path(str(resources.files("sitecal.demo.ct").joinpath(_WEIGHTS_NAME)))


def demo_ct_metadata_path() -> Path:
    """Path of ``demo_ct.json``: class names, input shape, transforms, training record, weights sha256."""
    return Path(str(resources.files("sitecal.demo.ct").joinpath(_METADATA_NAME)))


def demo_ct_metadata() -> dict[str, Any]:
    """Return the shipped model card ``demo_ct.json`` as a dictionary.

    Raises
    ------
    ModelError
        If the file is missing or is not valid JSON.
    """
    return read_model_card(demo_ct_metadata_path(), what="CT demo", rebuild=_REBUILD)


def load_demo_ct_model(weights: Path | None = None) -> DemoNet3D:
    """Load the bundled CT demo model in eval mode, from safetensors (nothing is unpickled).

    Parameters
    ----------
    weights : pathlib.Path, optional
        A file written by ``python examples/demo/train.py --ct``; default :func:`demo_ct_weights_path`.

    Returns
    -------
    DemoNet3D
        On the CPU, in eval mode.

    Raises
    ------
    ModelError
        If the file is missing, not safetensors, or does not fit :class:`DemoNet3D`.
    """
    path = demo_ct_weights_path() if weights is None else Path(weights)
    return load_weights(DemoNet3D(), path, what="CT demo", rebuild=_REBUILD)
