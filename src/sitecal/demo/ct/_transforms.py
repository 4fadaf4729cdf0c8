"""The CT demo protocol's transform chain, built by :func:`sitecal.inference.build_transforms` itself.

The pipeline's reader gives a float32 array ``(n_slices, Rows, Columns)`` of HU, slices in ascending
projection of ImagePositionPatient on the slice normal. Training applies exactly this chain (no batched
twin), so the model and the validation run share one code path.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CT_SPATIAL_SIZE", "CT_TRANSFORMS", "ct_transforms"]

#: (D, H, W) the model takes.
CT_SPATIAL_SIZE: tuple[int, int, int] = (16, 48, 48)

#: The transforms of ``protocols/demo-ct.yaml`` and ``demo_ct.json``.
CT_TRANSFORMS: tuple[dict[str, Any], ...] = (
    {"name": "EnsureChannelFirst", "args": {"channel_dim": "no_channel"}},
    {"name": "Resize", "args": {"spatial_size": list(CT_SPATIAL_SIZE)}},
    {
        "name": "ScaleIntensityRange",
        "args": {"a_min": -1000.0, "a_max": 400.0, "b_min": 0.0, "b_max": 1.0, "clip": True},
    },
)


def ct_transforms() -> Any:
    """``sitecal.inference.build_transforms(CT_TRANSFORMS, load=False)``: HU volume -> tensor (1, D, H, W)."""
    from ...inference import build_transforms
    from ...protocol import TransformSettings

    return build_transforms([TransformSettings(**t) for t in CT_TRANSFORMS], load=False)
