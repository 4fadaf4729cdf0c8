"""The small CNN bundled with sitecal's demo, and how to load its shipped weights without pickle."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._weights import load_weights, read_model_card

__all__ = [
    "DEMO_INPUT_SHAPE",
    "DemoNet",
    "demo_metadata",
    "demo_metadata_path",
    "demo_weights_path",
    "load_demo_model",
]

#: Shape of one input to :class:`DemoNet`: (channels, rows, columns).
DEMO_INPUT_SHAPE: tuple[int, int, int] = (1, 64, 64)

_WEIGHTS_NAME = "demo_cnn.safetensors"
_METADATA_NAME = "demo_cnn.json"


def _block(c_in: int, c_out: int, kernel_size: int = 3, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=kernel_size, stride=stride, padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class DemoNet(nn.Module):
    """A four-block CNN for the demo's 3-class chest task (about 41 k parameters, about 170 KB).

    Each block is a convolution (5 x 5 with stride 2 in the first, 3 x 3 after), batch norm and ReLU; the
    first three are followed by 2 x 2 max pooling (64 -> 32 -> 16 -> 8 -> 4), the last by global average
    pooling and a linear layer.

    Parameters
    ----------
    n_classes : int, default 3
        Number of output logits.
    width : int, default 12
        Channels of the first block; they double in each of the next two blocks (the last has 64).

    Examples
    --------
    >>> import torch
    >>> DemoNet()(torch.zeros(2, 1, 64, 64)).shape
    torch.Size([2, 3])
    """

    def __init__(self, n_classes: int = 3, width: int = 12) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _block(1, width, kernel_size=5, stride=2),
            nn.MaxPool2d(2),
            _block(width, 2 * width),
            nn.MaxPool2d(2),
            _block(2 * width, 4 * width),
            nn.MaxPool2d(2),
            _block(4 * width, 64),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.classifier = nn.Linear(64, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch.

        Parameters
        ----------
        x : torch.Tensor, shape (B, 1, 64, 64)
            Normalised images (zero mean, unit variance per image).

        Returns
        -------
        torch.Tensor, shape (B, n_classes)
            Unnormalised class scores.
        """
        logits: torch.Tensor = self.classifier(self.features(x))
        return logits


def demo_weights_path() -> Path:
    """Path of the shipped weights file, ``demo_cnn.safetensors`` inside the package.

    Returns
    -------
    pathlib.Path
        The file's location (inside the installed package or the source tree).
    """
    return Path(str(resources.files("sitecal.demo").joinpath(_WEIGHTS_NAME)))


def demo_metadata_path() -> Path:
    """Path of ``demo_cnn.json``: class names, input shape, transforms, training record, weights sha256."""
    return Path(str(resources.files("sitecal.demo").joinpath(_METADATA_NAME)))


def demo_metadata() -> dict[str, Any]:
    """Return the shipped model card ``demo_cnn.json`` as a dictionary.

    Raises
    ------
    ModelError
        If the file is missing or is not valid JSON.
    """
    return read_model_card(demo_metadata_path(), what="demo", rebuild="python examples/demo/train.py")


def load_demo_model(weights: Path | None = None) -> DemoNet:
    """Load the bundled demo CNN in eval mode, from safetensors (no pickle is ever unpickled).

    Parameters
    ----------
    weights : pathlib.Path, optional
        A weights file written by ``python examples/demo/train.py``; default :func:`demo_weights_path`.

    Returns
    -------
    DemoNet
        The model on the CPU, in eval mode.

    Raises
    ------
    ModelError
        If the file is missing, not a safetensors file, or does not fit :class:`DemoNet`.

    Examples
    --------
    >>> model = load_demo_model()
    >>> model.training
    False
    """
    path = demo_weights_path() if weights is None else Path(weights)
    return load_weights(DemoNet(), path, what="demo", rebuild="python examples/demo/train.py")
