"""The demo protocol's input transforms.

The pipeline applies, per image, ::

    Compose([EnsureChannelFirst(channel_dim="no_channel"), Resize(spatial_size=(64, 64)),
             NormalizeIntensity()])

to the (Rows, Columns) float32 array of :func:`sitecal.demo.presentation_values`. Training uses a batched
equivalent (``preprocess_batch`` in ``examples/demo/_radiograph.py``); a test keeps the two equal.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEMO_SPATIAL_SIZE", "DEMO_TRANSFORMS", "demo_transforms"]

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
