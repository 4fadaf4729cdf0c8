"""DICOM folders, label tables and predictions files → Cohort. Knows nothing of models."""

from __future__ import annotations

from sitecal.cohort._build import build_cohort
from sitecal.cohort._column_policy import MAX_FREE_COLUMN_VALUES, check_subgroup_columns
from sitecal.cohort._from_predictions import cohort_from_predictions, labels_from_predictions, shown_subgroups
from sitecal.cohort._parts import network_order, part_facts, parts_record, read_parts, write_part
from sitecal.cohort._records import UNLABELLED, Cohort, Exclusion, Study, exclusion_counts
from sitecal.cohort.attributes import UNKNOWN
from sitecal.cohort.labels import LabelTable, read_labels
from sitecal.cohort.mapping import UNMAPPED, ValueMapping, read_mappings
from sitecal.cohort.predictions_file import PredictionTable, read_predictions, write_predictions
from sitecal.cohort.scan import InstanceHeader, ScanResult, scan_folder

__all__ = [
    "MAX_FREE_COLUMN_VALUES",
    "UNKNOWN",
    "UNLABELLED",
    "UNMAPPED",
    "Cohort",
    "Exclusion",
    "InstanceHeader",
    "LabelTable",
    "PredictionTable",
    "ScanResult",
    "Study",
    "ValueMapping",
    "build_cohort",
    "check_subgroup_columns",
    "cohort_from_predictions",
    "exclusion_counts",
    "labels_from_predictions",
    "network_order",
    "part_facts",
    "parts_record",
    "read_labels",
    "read_mappings",
    "read_parts",
    "read_predictions",
    "scan_folder",
    "shown_subgroups",
    "write_part",
    "write_predictions",
]
