"""Synthetic multi-site chest DICOM cohort and the small model bundled for sitecal's demo.

- :func:`generate_demo` writes the cohort (DICOM tree, ``labels.csv``, planted bad inputs).
- :func:`presentation_values` is the image convention the pipeline's reader shares.
- :func:`load_demo_model` loads the bundled :class:`DemoNet` from safetensors (no pickle).

The model was trained on one scanner only (``"Ysio Demo"``) and is over-confident on the others;
``python -m sitecal.demo.train`` rebuilds it and ``python -m sitecal.demo.verify`` prints the per-scanner
accuracy, confidence and ECE.
"""

from __future__ import annotations

from ._preprocess import DEMO_TRANSFORMS, demo_transforms
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER
from .generate import DemoManifest, DemoStudy, generate_demo, presentation_values
from .model import DemoNet, demo_metadata, demo_metadata_path, demo_weights_path, load_demo_model

__all__ = [
    "CLASS_NAMES",
    "DEMO_TRANSFORMS",
    "REFERENCE_SCANNER",
    "DemoManifest",
    "DemoNet",
    "DemoStudy",
    "demo_metadata",
    "demo_metadata_path",
    "demo_transforms",
    "demo_weights_path",
    "generate_demo",
    "load_demo_model",
    "presentation_values",
]
