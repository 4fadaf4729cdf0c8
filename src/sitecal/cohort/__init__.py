"""DICOM folders and label tables → Cohort. Knows nothing of models."""

from __future__ import annotations

from sitecal.cohort._build import build_cohort
from sitecal.cohort._records import Cohort, Exclusion, Study
from sitecal.cohort.attributes import UNKNOWN
from sitecal.cohort.labels import LabelTable, read_labels
from sitecal.cohort.mapping import UNMAPPED, ValueMapping, read_mappings
from sitecal.cohort.scan import InstanceHeader, ScanResult, scan_folder

__all__ = [
    "UNKNOWN",
    "UNMAPPED",
    "Cohort",
    "Exclusion",
    "InstanceHeader",
    "LabelTable",
    "ScanResult",
    "Study",
    "ValueMapping",
    "build_cohort",
    "read_labels",
    "read_mappings",
    "scan_folder",
]
