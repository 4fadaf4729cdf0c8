"""The CT demo: synthetic multi-series chest CT studies and a small 3-D model trained on one scanner.

- :func:`generate_ct_demo` writes the cohort that ``protocols/demo-ct.yaml`` points at.
- :func:`load_demo_ct_model` loads the bundled :class:`DemoNet3D` from safetensors (no pickle).

``python -m sitecal.demo.ct.train`` rebuilds the weights and ``python -m sitecal.demo.ct.verify`` prints
the per-scanner accuracy, confidence and ECE before and after a per-scanner temperature.
"""

from __future__ import annotations

from ._scanners import CLASS_NAMES, REFERENCE_SCANNER
from ._transforms import CT_SPATIAL_SIZE, CT_TRANSFORMS, ct_transforms
from .generate import CtDemoManifest, CtSeries, CtStudy, generate_ct_demo
from .model import DemoNet3D, demo_ct_metadata, demo_ct_weights_path, load_demo_ct_model

__all__ = [
    "CLASS_NAMES",
    "CT_SPATIAL_SIZE",
    "CT_TRANSFORMS",
    "REFERENCE_SCANNER",
    "CtDemoManifest",
    "CtSeries",
    "CtStudy",
    "DemoNet3D",
    "ct_transforms",
    "demo_ct_metadata",
    "demo_ct_weights_path",
    "generate_ct_demo",
    "load_demo_ct_model",
]
