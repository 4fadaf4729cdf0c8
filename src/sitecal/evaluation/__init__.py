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
from sitecal.evaluation._split import Split, applied_probabilities, applied_temperatures
from sitecal.evaluation._study_size import (
    DEFAULT_SIZES,
    TARGET_POWER,
    StudyModel,
    labels_from,
    pass_rate,
    pool_model,
)

__all__ = [
    "DEFAULT_SIZES",
    "FAIL",
    "INCONCLUSIVE",
    "INSUFFICIENT",
    "OVERALL",
    "PASS",
    "SCHEMA_VERSION",
    "TARGET_POWER",
    "EvaluationData",
    "EvaluationOutcome",
    "Split",
    "StudyModel",
    "applied_probabilities",
    "applied_temperatures",
    "evaluate",
    "labels_from",
    "pass_rate",
    "pool_model",
    "split_patients",
    "verdict_problems",
]
