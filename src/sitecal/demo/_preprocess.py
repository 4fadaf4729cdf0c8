"""The demo protocol's input transforms, and a batched equivalent for training.

The pipeline applies, per image, ::

    Compose([EnsureChannelFirst(channel_dim="no_channel"), Resize(spatial_size=(64, 64)),
             NormalizeIntensity()])

to the (Rows, Columns) float32 array of :func:`sitecal.demo.presentation_values`. MONAI's ``Resize``
defaults to ``mode="area"`` without anti-aliasing, and ``NormalizeIntensity`` divides by the population
standard deviation (``unbiased=False``), replacing a zero deviation by 1. :func:`preprocess_batch` does the
same arithmetic on a whole batch at once (MONAI's per-image overhead would dominate training time); a
test keeps the two equal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray

__all__ = ["DEMO_SPATIAL_SIZE", "DEMO_TRANSFORMS", "demo_transforms", "preprocess_batch"]

#: Spatial size the demo model takes.
DEMO_SPATIAL_SIZE: tuple[int, int] = (64, 64)

#: The demo protocol's transform chain, as written in ``demo_cnn.json`` and ``protocols/demo.yaml``.
DEMO_TRANSFORMS: tuple[dict[str, Any], ...] = (
    {"name": "EnsureChannelFirst", "args": {"channel_dim": "no_channel"}},
    {"name": "Resize", "args": {"spatial_size": list(DEMO_SPATIAL_SIZE)}},
    {"name": "NormalizeIntensity", "args": {}},
)


def demo_transforms() -> Any:
    """Return the MONAI transform chain the pipeline runs on each presentation array.

    Returns
    -------
    monai.transforms.Compose
        Maps a float32 array (Rows, Columns) to a tensor (1, 64, 64).
    """
    from monai.transforms.compose import Compose
    from monai.transforms.intensity.array import NormalizeIntensity
    from monai.transforms.spatial.array import Resize
    from monai.transforms.utility.array import EnsureChannelFirst

    return Compose(
        [
            EnsureChannelFirst(channel_dim="no_channel"),
            Resize(spatial_size=DEMO_SPATIAL_SIZE),
            NormalizeIntensity(),
        ]
    )


def preprocess_batch(images: NDArray[np.floating] | torch.Tensor) -> torch.Tensor:
    """Batched equivalent of :func:`demo_transforms` applied to each image.

    Parameters
    ----------
    images : array or tensor, shape (N, Rows, Columns)
        Presentation values, as :func:`sitecal.demo.presentation_values` returns them.

    Returns
    -------
    torch.Tensor of float32, shape (N, 1, 64, 64)
        Area-resized, then each image shifted to mean 0 and divided by its population standard deviation
        (left undivided where that deviation is 0).
    """
    x = torch.as_tensor(images, dtype=torch.float32)[:, None]
    x = F.interpolate(x, size=DEMO_SPATIAL_SIZE, mode="area")
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    std = x.std(dim=(1, 2, 3), keepdim=True, unbiased=False)
    std = torch.where(std == 0.0, torch.ones_like(std), std)
    return (x - mean) / std
