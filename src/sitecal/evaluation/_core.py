"""The evaluation: a plan of the studies, its analyses, and the document they make.

The temperature is never evaluated on the studies it was fitted on: patients are split (seeded,
stratified) into a fit part and an evaluation part, or into folds each evaluated with the temperatures of
the others (:func:`~sitecal.evaluation._plan.plan_evaluation`). Every metric is computed on the evaluated
studies, before and after calibration, on the same patient-level bootstrap resamples (paired), so the
change has its own interval. Each analysis is a function of the plan:

- :func:`~sitecal.evaluation._group_intervals.group_intervals`: every group's metrics with intervals;
- :func:`~sitecal.evaluation._disparities.disparities`: the gaps between each attribute's groups;
- :func:`~sitecal.evaluation._sensitivity.sensitivity_analyses`: recalibration, heterogeneity across
  sites, leave one site out;
- :func:`~sitecal.evaluation._compare.compare_recalibration`: other calibration methods against
  temperature scaling;
- :func:`judge_plan`: the acceptance criteria judged, and the study size each judged group needs;
- :func:`~sitecal.evaluation._characteristics.characteristics` (in the document's assembly,
  :func:`~sitecal.evaluation._document.evaluation_document`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sitecal.calibration import GroupMethods, GroupTemperatures
from sitecal.evaluation._acceptance import PASS, combine, judge
from sitecal.evaluation._compare import compare_recalibration
from sitecal.evaluation._disparities import disparities
from sitecal.evaluation._document import Judged, evaluation_document
from sitecal.evaluation._group_intervals import GroupIntervals, group_intervals
from sitecal.evaluation._plan import EvaluationData, EvaluationPlan, EvaluationPolicy, plan_evaluation
from sitecal.evaluation._sensitivity import sensitivity_analyses
from sitecal.evaluation._split import Split, split_patients
from sitecal.evaluation._study_size import plan_study_sizes
from sitecal.protocol import Protocol
from sitecal.results import Criterion, Evaluation, PlanningSettings, ProtocolRef, Sensitivity, Verdict

__all__ = [
    "EvaluationData",
    "EvaluationOutcome",
    "evaluate",
    "evaluate_plan",
    "judge_plan",
    "split_patients",
]

#: The version of ``evaluation.json`` this sitecal writes (:attr:`sitecal.results.Evaluation.SCHEMA_VERSION`).
SCHEMA_VERSION = Evaluation.SCHEMA_VERSION


@dataclass(frozen=True)
class EvaluationOutcome:
    """The evaluation (typed, and as the ``evaluation.json`` object) and the fitted temperatures.

    ``document`` is ``result.to_dict()``: the JSON object ``evaluation.json`` holds.
    """

    document: dict[str, Any]
    temperatures: GroupTemperatures
    split: Split
    result: Evaluation
    methods: GroupMethods | None = None  # the deployed calibration under another method than temperature

    @property
    def fit_mask(self) -> np.ndarray:
        """Rows some temperature was fitted on (every row under cross-fitting)."""
        return self.split.fit

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, ``inconclusive`` or ``insufficient data``."""
        return str(self.document["verdict"])


def evaluate(
    protocol: Protocol,
    data: EvaluationData,
    *,
    cohort_flow: Mapping[str, Any],
    protocol_sha256: str,
    progress: bool = False,
) -> EvaluationOutcome:
    """Fit temperatures on the fit split and evaluate on the rest, per subgroup, with bootstrap intervals.

    Parameters
    ----------
    protocol : Protocol
        Calibration, evaluation and acceptance settings.
    data : EvaluationData
        Logits, labels, patient keys and subgroup attributes of every analysed study.
    cohort_flow : mapping
        Counts from files to studies (stored in the document for the report).
    protocol_sha256 : str
        Recorded in the document.
    progress : bool
        Show a progress bar over the bootstrapped groups.

    Returns
    -------
    EvaluationOutcome
    """
    plan = plan_evaluation(EvaluationPolicy.from_protocol(protocol), data)
    reference = ProtocolRef(name=protocol.name, sha256=protocol_sha256)
    return evaluate_plan(plan, protocol=reference, cohort_flow=cohort_flow, progress=progress)


def evaluate_plan(
    plan: EvaluationPlan, *, protocol: ProtocolRef, cohort_flow: Mapping[str, Any], progress: bool = False
) -> EvaluationOutcome:
    """Every analysis of a plan, and the document they make (``protocol``: what the document names)."""
    groups = group_intervals(plan, progress=progress)
    compared = disparities(plan, progress=progress)
    sensitivity = sensitivity_analyses(plan, oe_intervals=groups.oe_intervals)
    comparison = compare_recalibration(plan, progress=progress)
    acceptance, verdict, planning = judge_plan(plan, groups, sensitivity, progress=progress)
    judged = Judged(groups, compared, sensitivity, comparison, acceptance, verdict, planning)
    result = evaluation_document(plan, judged, protocol=protocol, cohort_flow=cohort_flow)
    return EvaluationOutcome(
        document=result.to_dict(),
        temperatures=plan.temperatures,
        split=plan.split,
        result=result,
        methods=plan.methods,
    )


def judge_plan(
    plan: EvaluationPlan, groups: GroupIntervals, sensitivity: Sensitivity, *, progress: bool = False
) -> tuple[tuple[Criterion, ...], Verdict, PlanningSettings | None]:
    """The acceptance criteria judged on the groups' intervals, the verdict, and the planned sizes.

    Each judged group's criterion row gets the study size it needs (with how it was planned).
    """
    policy = plan.policy
    ev = policy.evaluation
    judged = [
        judge(c, groups.overall, groups.subgroups, ev.bootstrap.level, sensitivity.recalibration)
        for c in policy.acceptance
    ]
    verdict: Verdict = combine(a.verdict for a in judged) if judged else PASS
    planned, planning = plan_study_sizes(
        judged,
        policy.acceptance,
        plan.probabilities,
        {name: values[plan.held] for name, values in plan.data.attributes.items()},
        settings=ev.planning,
        n_bins=ev.n_bins,
        seed=ev.bootstrap.seed,
        progress=progress,
    )
    return planned, verdict, planning
