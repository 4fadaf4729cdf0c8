"""A vendor-file validation protocol for the monitoring tests: scores per study, one temperature per scanner.

The tests of ``sitecal monitor`` and of ``sitecal demo --monitor`` make their baseline from it with
``sitecal run`` (seconds, not the demo's minutes).
"""

from __future__ import annotations

from typing import Any

CLASSES = ["normal", "nodule", "effusion"]
#: The calibration criteria the monitor tests: an ECE margin per scanner and a slope margin overall.
CALIBRATION_CRITERIA = [
    {"id": "ece", "metric": "ece_debiased", "stage": "after", "below": 0.10, "scope": "scanner"},
    {"id": "slope", "metric": "slope", "stage": "after", "within": [0.8, 1.25], "scope": "overall"},
]


def vendor_protocol(name: str, *, split: dict[str, Any], **monitoring: object) -> dict[str, object]:
    """The protocol as a mapping (``yaml.safe_dump`` it); with ``monitoring`` fields, a monitoring one."""
    protocol: dict[str, object] = {
        "name": name,
        "intended_use": "Triage support; tested for monitoring.",
        "model": {"name": "Vendor", "class_names": CLASSES},
        "data": {
            "predictions": "predictions.csv",
            "key": "AccessionNumber",
            "key_column": "accession",
            "patient_column": "mrn",
            "label_column": "label",
        },
        "subgroups": {"scanner": {"column": "scanner"}},
        "calibration": {"per": "scanner", "split": split},
        "evaluation": {
            "metrics": ["ece_debiased", "accuracy"],
            "bootstrap": {"n_resamples": 50, "seed": 7},
            "planning": {"simulations": 0},
        },
        "acceptance": CALIBRATION_CRITERIA,
        "report": {"output_dir": "reports"},
        "privacy": {"key_file": "site.key"},
    }
    if monitoring:
        protocol["monitoring"] = {"date_column": "study_date", **monitoring}
    return protocol
