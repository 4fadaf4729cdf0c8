"""Evaluation: split → per-group temperatures → metrics per subgroup with intervals → acceptance.

``_core`` holds the evaluation itself (:func:`evaluate`); the document it returns is ``evaluation.json``,
described by ``sitecal/report/evaluation.schema.json``.
"""

from sitecal.evaluation._core import (
    FAIL,
    INSUFFICIENT,
    OVERALL,
    PASS,
    SCHEMA_VERSION,
    EvaluationData,
    EvaluationOutcome,
    evaluate,
    split_patients,
)

__all__ = [
    "FAIL",
    "INSUFFICIENT",
    "OVERALL",
    "PASS",
    "SCHEMA_VERSION",
    "EvaluationData",
    "EvaluationOutcome",
    "evaluate",
    "split_patients",
]
