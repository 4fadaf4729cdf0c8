"""The notebook route: evaluate_arrays and its report."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from sitecal import evaluate_arrays
from sitecal.errors import DataError


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
