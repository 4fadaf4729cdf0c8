"""The CT demo: synthetic multi-series chest CT studies and a small 3-D model trained on one scanner.

- :func:`generate_ct_demo` writes the cohort that the packaged ``demo-ct.yaml`` points at (``sitecal
  demo --ct`` calls it); :func:`synthesize_volumes` makes single-series volumes in memory.
- :func:`load_demo_ct_model` loads the bundled :class:`DemoNet3D` from safetensors (no pickle).

``python examples/demo/train.py --ct`` rebuilds the weights and ``python examples/demo/verify.py --ct``
prints the per-scanner accuracy, confidence and ECE before and after a per-scanner temperature (both in
the source tree, not in the package).
"""

from __future__ import annotations

from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, SCANNERS, SITES, CtScanner, scanner_by_key
from ._study import synthesize_volumes
from ._transforms import CT_SPATIAL_SIZE, CT_TRANSFORMS, ct_transforms
from .generate import CtDemoManifest, CtSeries, CtStudy, generate_ct_demo
from .model import (
    CT_INPUT_SHAPE,
    DemoNet3D,
    demo_ct_metadata,
    demo_ct_weights_path,
    load_demo_ct_model,
)

__all__ = [
    "CLASS_NAMES",
    "CT_INPUT_SHAPE",
    "CT_SPATIAL_SIZE",
    "CT_TRANSFORMS",
    "REFERENCE_SCANNER",
    "SCANNERS",
    "SITES",
    "CtDemoManifest",
    "CtScanner",
    "CtSeries",
    "CtStudy",
    "DemoNet3D",
    "ct_transforms",
    "demo_ct_metadata",
    "demo_ct_weights_path",
    "generate_ct_demo",
    "load_demo_ct_model",
    "scanner_by_key",
    "synthesize_volumes",
]
