"""Evaluation: split → per-group temperatures → metrics per subgroup with intervals → acceptance.

``_core`` holds the evaluation itself (:func:`evaluate`); it returns a typed
:class:`sitecal.results.Evaluation` (``EvaluationOutcome.result``) and the ``evaluation.json`` object it
writes (``EvaluationOutcome.document``, ``result.to_dict()``).
"""

from sitecal.evaluation._acceptance import FAIL, INCONCLUSIVE, INSUFFICIENT, PASS, verdict_problems
from sitecal.evaluation._core import (
    SCHEMA_VERSION,
    EvaluationData,
    EvaluationOutcome,
    evaluate,
    split_patients,
)
from sitecal.evaluation._groups import OVERALL

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "INSUFFICIENT",
    "OVERALL",
    "PASS",
    "SCHEMA_VERSION",
    "EvaluationData",
    "EvaluationOutcome",
    "evaluate",
    "split_patients",
    "verdict_problems",
]
