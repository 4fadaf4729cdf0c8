"""Acceptance: each protocol criterion judged on the stored group results (pass, fail, insufficient data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal, cast

import numpy as np

from sitecal.evaluation._groups import OVERALL
from sitecal.protocol import AcceptanceCriterion
from sitecal.results import Criterion, CriterionResult, GroupResult, Verdict

__all__ = ["FAIL", "INSUFFICIENT", "PASS", "judge"]

PASS: Final = "pass"
FAIL: Final = "fail"
INSUFFICIENT: Final = "insufficient data"


def judge(
    criterion: AcceptanceCriterion,
    overall: GroupResult,
    results: Mapping[str, Sequence[GroupResult]],
    min_group_size: int,
) -> Criterion:
    groups = [overall] if criterion.scope == OVERALL else list(results.get(criterion.scope, ()))
    rows = []
    for g in groups:
        value = getattr(getattr(g.metrics[criterion.metric], criterion.stage), criterion.statistic)
        if g.small:
            verdict: Verdict = INSUFFICIENT
        elif not np.isfinite(value):
            verdict = INSUFFICIENT
        else:
            ok = value < criterion.threshold if criterion.operator == "<" else value > criterion.threshold
            verdict = PASS if ok else FAIL
        rows.append(CriterionResult(group=g.group, n=g.n, value=value, verdict=verdict))
    verdicts = [r.verdict for r in rows]
    overall_verdict: Verdict = (
        FAIL if FAIL in verdicts else INSUFFICIENT if (INSUFFICIENT in verdicts or not rows) else PASS
    )
    return Criterion(
        id=criterion.id,
        description=criterion.description or None,  # the protocol's words; else the report words it
        metric=criterion.metric,
        stage=criterion.stage,
        statistic=criterion.statistic,
        operator=cast(Literal["<", ">"], criterion.operator),
        threshold=criterion.threshold,
        scope=criterion.scope,
        results=tuple(rows),
        verdict=overall_verdict,
    )
