"""Evaluation: split → per-group temperatures → metrics per subgroup with intervals → acceptance.

:func:`plan_evaluation` prepares once what every analysis reads (an :class:`EvaluationPlan`: the split,
the deployed calibration, the evaluated studies' probabilities, the groups) from an
:class:`EvaluationPolicy` (the settings the analyses read) and the studies (:class:`EvaluationData`);
:func:`evaluate_plan` runs the analyses on it and assembles the typed
:class:`sitecal.results.Evaluation` (``EvaluationOutcome.result``) and the ``evaluation.json`` object
(``EvaluationOutcome.document``, ``result.to_dict()``). :func:`evaluate` does both from a protocol.
"""

from sitecal.evaluation._acceptance import FAIL, INCONCLUSIVE, INSUFFICIENT, PASS, verdict_problems
from sitecal.evaluation._core import (
    SCHEMA_VERSION,
    EvaluationData,
    EvaluationOutcome,
    evaluate,
    evaluate_plan,
    split_patients,
)
from sitecal.evaluation._groups import OVERALL
from sitecal.evaluation._plan import EvaluationPlan, EvaluationPolicy, plan_evaluation
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
    "EvaluationPlan",
    "EvaluationPolicy",
    "Split",
    "StudyModel",
    "applied_probabilities",
    "applied_temperatures",
    "evaluate",
    "evaluate_plan",
    "labels_from",
    "pass_rate",
    "plan_evaluation",
    "pool_model",
    "split_patients",
    "verdict_problems",
]
