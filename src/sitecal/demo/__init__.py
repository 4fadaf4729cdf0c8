"""The synthetic cohorts, bundled models and protocols behind ``sitecal demo``.

Two demos, radiographs (2-D, the default) and chest CT volumes (:mod:`sitecal.demo.ct`):

- :func:`prepare_demo` is what ``sitecal demo`` does before the run: the packaged demo protocol
  (:func:`demo_protocol_path`) copied into ``sitecal-demo/`` in the working folder, and its cohort
  generated beside it (:func:`ensure_cohort`); nothing is written inside the installed package.
- :func:`generate_demo` writes the radiograph cohort (DICOM tree, ``labels.csv``, planted bad inputs);
  :func:`synthesize_stored` makes the same images in memory.
- :func:`presentation_values` is the image convention the pipeline's reader shares.
- :func:`load_demo_model` loads the bundled :class:`DemoNet` from safetensors (no pickle).

The model was trained on one scanner only (``"Ysio Demo"``) and is over-confident on the others. Its
training and a check of that claim are not part of the package: ``examples/demo/train.py`` rebuilds the
weights and ``examples/demo/verify.py`` prints the per-scanner accuracy, confidence and ECE (see
``examples/demo/README.md`` in the source tree).
"""

from __future__ import annotations

from ._command import (
    DEMO_FOLDER,
    MIN_DEMO_STUDIES,
    DemoKind,
    PreparedDemo,
    default_studies,
    demo_protocol_path,
    ensure_cohort,
    prepare_demo,
)
from ._preprocess import DEMO_SPATIAL_SIZE, DEMO_TRANSFORMS, demo_transforms
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, SCANNERS, SITES, ScannerProfile, Site, scanner_by_key
from ._synthesis import stored_to_presentation, synthesize_stored
from .generate import DemoManifest, DemoStudy, generate_demo, presentation_values
from .model import (
    DEMO_INPUT_SHAPE,
    DemoNet,
    demo_metadata,
    demo_metadata_path,
    demo_weights_path,
    load_demo_model,
)

__all__ = [
    "CLASS_NAMES",
    "DEMO_FOLDER",
    "DEMO_INPUT_SHAPE",
    "DEMO_SPATIAL_SIZE",
    "DEMO_TRANSFORMS",
    "MIN_DEMO_STUDIES",
    "REFERENCE_SCANNER",
    "SCANNERS",
    "SITES",
    "DemoKind",
    "DemoManifest",
    "DemoNet",
    "DemoStudy",
    "PreparedDemo",
    "ScannerProfile",
    "Site",
    "default_studies",
    "demo_metadata",
    "demo_metadata_path",
    "demo_protocol_path",
    "demo_transforms",
    "demo_weights_path",
    "ensure_cohort",
    "generate_demo",
    "load_demo_model",
    "prepare_demo",
    "presentation_values",
    "scanner_by_key",
    "stored_to_presentation",
    "synthesize_stored",
]
