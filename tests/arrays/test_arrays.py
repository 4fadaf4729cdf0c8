"""The notebook route: evaluate_arrays and its report."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.conftest import DEMO_PROTOCOL

from sitecal import evaluate_arrays
from sitecal.errors import DataError
from sitecal.protocol import Protocol


def _data(n: int = 300) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    site = np.where(np.arange(n) % 2 == 0, "north", "south")
    logits = rng.normal(size=(n, 2)) * np.where(site == "north", 3.0, 1.0)[:, None]
    labels = (rng.random(n) < 1 / (1 + np.exp(logits[:, 0] - logits[:, 1]))).astype(int)
    return logits, labels, site


def test_probabilities_give_the_numbers_of_their_logits() -> None:
    logits, labels, site = _data()
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    common = {"labels": labels, "class_names": ["no", "yes"], "groups": {"site": site}, "n_resamples": 50}
    a = evaluate_arrays(logits=logits, calibrate_by="site", **common)
    b = evaluate_arrays(probabilities=probs, calibrate_by="site", **common)
    for x, y in zip(a.rows(), b.rows(), strict=True):
        assert (x["group"], x["metric"], x["stage"]) == (y["group"], y["metric"], y["stage"])
        assert x["estimate"] == pytest.approx(y["estimate"], abs=1e-9)


def test_the_report_says_the_scores_were_given_as_arrays(tmp_path: Path) -> None:
    logits, labels, site = _data()
    result = evaluate_arrays(
        logits=logits, labels=labels, class_names=["no", "yes"], groups={"site": site}, n_resamples=50
    )
    pdf = result.render(tmp_path / "report")
    text = " ".join(
        subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout.split()
    )
    assert "its scores were given as arrays (sitecal.evaluate_arrays), as logits" in text
    assert "each study is treated as its own patient" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"logits": np.zeros((3, 2)), "probabilities": np.zeros((3, 2))},
            "exactly one of logits= or probabilities=",
        ),
        ({"logits": np.zeros((4, 2))}, "give one row per label"),
        ({"logits": np.array([[0.0, np.nan]] * 3)}, "finite"),
        ({"probabilities": np.array([[0.5, 0.7]] * 3)}, "sum to 1"),
        ({"logits": np.zeros((3, 2)), "calibrate_by": "site"}, "calibrate_by='site' is not one of groups"),
    ],
)
def test_bad_arrays_are_refused_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(DataError, match=message):
        evaluate_arrays(labels=np.array([0, 1, 0]), class_names=["no", "yes"], **kwargs)


def test_notebooks_choose_the_split_the_fallback_and_the_refit_as_a_protocol_does() -> None:
    logits, labels, site = _data(400)
    common = {"labels": labels, "class_names": ["no", "yes"], "groups": {"site": site}, "n_resamples": 50}
    result = evaluate_arrays(
        logits=logits, calibrate_by="site", folds=4, fallback="empirical_bayes", refit=False, **common
    )
    doc = result.outcome.document
    assert doc["split"]["method"] == "crossfit" and doc["split"]["folds"] == 4
    assert doc["split"]["n_evaluation"] == 400  # every study evaluated once
    assert {g.source for g in result.outcome.temperatures.groups.values()} == {"empirical_bayes"}
    refit = evaluate_arrays(logits=logits, calibrate_by="site", refit=True, **common).outcome.document
    assert refit["bootstrap"]["refit"] is True and refit["split"]["method"] == "patient"
    assert all(g["refit"] for g in refit["subgroups"]["site"])
    with pytest.raises(DataError, match=r"calibration\.fallback"):
        evaluate_arrays(logits=logits, fallback="nearest", **common)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"fallback": "nearest"},
            "The 'fallback' parameter of evaluate_arrays (calibration.fallback): Input ",
        ),
        ({"level": 1.5}, "The 'level' parameter of evaluate_arrays (evaluation.bootstrap.level): "),
        ({"folds": 1}, "The 'folds' parameter of evaluate_arrays (calibration.split.folds): "),
        ({"seed": -1}, "The 'seed' parameter of evaluate_arrays (evaluation.bootstrap.seed): "),
        ({"name": "a name"}, "The 'name' parameter of evaluate_arrays (name): "),
        (
            {"acceptance": [{"id": "c", "metric": "ece_debiased", "below": 0.1, "scope": "sitee"}]},
            "The 'acceptance' parameter of evaluate_arrays (acceptance.0.scope): 'sitee' is not a subgroup "
            "defined under 'subgroups' ['site', 'overall']. Did you mean 'site'?",
        ),
    ],
)
def test_a_refused_setting_names_the_argument_and_the_protocol_field(kwargs: dict, message: str) -> None:
    logits, labels, site = _data(200)
    common = {"logits": logits, "labels": labels, "class_names": ["no", "yes"], "groups": {"site": site}}
    with pytest.raises(DataError) as refused:
        evaluate_arrays(**common, n_resamples=50, **kwargs)
    assert str(refused.value).startswith(message)


def test_a_protocol_and_the_arrays_refuse_the_same_settings_with_the_same_reason() -> None:
    """The checks spanning the analysis sections are one function (sitecal.protocol.check_analysis)."""
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["calibration"].update(fallback="empirical_bayes", split={"by": "crossfit", "folds": 3, "seed": 1})
    raw["evaluation"]["bootstrap"]["refit"] = True
    with pytest.raises(ValueError) as by_protocol:
        Protocol.model_validate(raw)
    logits, labels, site = _data(200)
    with pytest.raises(DataError) as by_arrays:
        evaluate_arrays(
            logits=logits,
            labels=labels,
            class_names=["no", "yes"],
            groups={"site": site},
            calibrate_by="site",
            folds=3,
            fallback="empirical_bayes",
            refit=True,
            n_resamples=50,
        )
    reason = "refit under calibration.split.by: crossfit does not yet repeat the empirical-Bayes shrinkage"
    assert reason in str(by_protocol.value) and reason in str(by_arrays.value)
    assert str(by_arrays.value).startswith("The 'refit' parameter of evaluate_arrays")
