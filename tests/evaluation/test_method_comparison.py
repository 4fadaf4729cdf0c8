"""calibration.compare through evaluate(): per calibration group, the small-group rule, the document."""

from __future__ import annotations

import numpy as np
import pytest
from tests.evaluation.test_evaluation import FLOW, _data, _protocol

from sitecal.evaluation import EvaluationData, evaluate
from sitecal.protocol import Protocol
from sitecal.results import Evaluation
from sitecal.stats import BootstrapSpec, compare_methods


@pytest.fixture(scope="module")
def data() -> EvaluationData:
    return _data()


def _with_compare(*methods: str) -> Protocol:
    raw = _protocol().model_dump(mode="json")
    raw["calibration"]["compare"] = list(methods)
    return Protocol.model_validate(raw)


def test_each_calibration_group_is_compared_on_its_own_rows_or_on_every_fit_row(data: EvaluationData) -> None:
    protocol = _with_compare("vector", "histogram")
    out = evaluate(protocol, data, cohort_flow=FLOW, protocol_sha256="0" * 64)
    doc = out.document["method_comparison"]
    assert Evaluation.from_dict(out.document).method_comparison is not None  # the document checks itself
    assert doc["methods"] == ["temperature", "vector", "histogram"]
    assert doc["metrics"] == ["nll", "brier", "ece_debiased", "smooth_ece"]
    assert [(g["attribute"], g["group"]) for g in doc["groups"]] == [
        ("overall", "All studies"),
        ("scanner", "A"),
        ("scanner", "B"),
        ("scanner", "C"),
    ]
    fit, held = out.fit_mask, ~out.fit_mask
    scanner = data.attributes["scanner"]
    by_group = {g["group"]: g for g in doc["groups"]}
    # C has 60 studies, about 30 of them fit studies: below min_group_size = 100, so fitted on every fit row
    assert by_group["C"]["fit_rows"] == "global" and by_group["C"]["n_fit"] == int(fit.sum())
    assert by_group["A"]["fit_rows"] == "own" and by_group["A"]["n_fit"] == int(
        (fit & (scanner == "A")).sum()
    )
    spec = BootstrapSpec(n_resamples=200, seed=protocol.evaluation.bootstrap.seed)
    for name, fit_rows in (("A", fit & (scanner == "A")), ("C", fit)):
        rows = held & (scanner == name)
        direct = compare_methods(
            data.logits[fit_rows],
            data.labels[fit_rows],
            data.logits[rows],
            data.labels[rows],
            fit_clusters=data.patient_keys[fit_rows],
            eval_clusters=data.patient_keys[rows],
            methods=("vector", "histogram"),
            spec=spec,
        )
        got = by_group[name]["methods"]["vector"]["nll"]
        want = direct.difference("vector", "nll")
        assert (got["difference"]["low"], got["difference"]["high"]) == pytest.approx((want.low, want.high))
        assert got["finding"] == direct.finding("vector", "nll")
        assert "difference" not in by_group[name]["methods"]["temperature"]["nll"]


def test_no_comparison_without_calibration_compare(data: EvaluationData) -> None:
    out = evaluate(_protocol(), data, cohort_flow=FLOW, protocol_sha256="0" * 64)
    assert "method_comparison" not in out.document
    assert np.isfinite(out.document["overall"]["metrics"]["ece"]["after"]["estimate"])
