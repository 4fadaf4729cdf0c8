"""A model whose output hardly varies is a finding for the report, never a crash of the analysis."""

from __future__ import annotations

import numpy as np
import pytest
from tests.evaluation.test_sensitivity import FLOW, _data, _protocol

from sitecal.evaluation import EvaluationData, evaluate
from sitecal.metrics import top_label_recalibration
from sitecal.metrics._recalibration import SEPARATED


@pytest.mark.timeout(30)
@pytest.mark.parametrize("spread", [0.0, 1e-12, 1e-8])
def test_a_near_constant_confidence_has_no_slope_and_no_error(spread: float) -> None:
    rng = np.random.default_rng(0)
    logits = np.tile([2.0, 0.0, -1.0], (200, 1)) + rng.normal(0.0, spread, (200, 3))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = rng.integers(0, 3, 200)
    result = top_label_recalibration(probs, labels, clusters=np.arange(200) // 2)
    assert result.slope is None and result.slope_se is None
    assert result.slope_note == SEPARATED
    # the intercept (slope fixed at 1) is still estimated: log(O/E) on the logit scale
    assert result.intercept is not None and np.isfinite(result.intercept_se)


@pytest.mark.timeout(120)
def test_the_whole_evaluation_of_a_near_constant_model_completes() -> None:
    """A near-constant model ended in LinAlgError ('Singular matrix') in the sensitivity analysis."""
    d = _data()
    rng = np.random.default_rng(1)
    logits = np.tile([2.0, 0.0, -1.0], (len(d.labels), 1)) + rng.normal(0.0, 1e-8, (len(d.labels), 3))
    data = EvaluationData(logits, d.labels, d.patient_keys, d.attributes, d.class_names)
    outcome = evaluate(_protocol(), data, cohort_flow=FLOW, protocol_sha256="0" * 64)
    overall = outcome.document["sensitivity"]["recalibration"]["overall"]
    assert overall["before"]["slope"]["estimate"] is None


@pytest.mark.timeout(10)
def test_the_one_image_rule_prefers_a_single_frame_image_over_a_cine() -> None:
    from pathlib import Path

    from sitecal.cohort.scan import InstanceHeader
    from sitecal.cohort.series import group_by_study

    def header(name: str, number: str, frames: str | None) -> InstanceHeader:
        values = {"SOPInstanceUID": f"1.2.3.{number}", "StudyInstanceUID": "1.2.3", "InstanceNumber": number}
        if frames is not None:
            values["NumberOfFrames"] = frames
        return InstanceHeader(path=Path(name), values=values)

    cine, still, later = (
        header("cine.dcm", "1", "40"),
        header("still.dcm", "2", "1"),
        header("x.dcm", "3", None),
    )
    ((chosen, others),) = group_by_study([cine, later, still])
    assert chosen is still and [o.path.name for o in others] == ["x.dcm", "cine.dcm"]
