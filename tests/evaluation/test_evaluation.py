"""evaluate() on synthetic arrays: temperature intervals, and the refit option's after-intervals."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import yaml
from pydantic import ValidationError
from tests.conftest import DEMO_PROTOCOL, PATIENT_SPLIT

from sitecal.calibration import fit_temperature
from sitecal.evaluation import EvaluationData, evaluate
from sitecal.metrics import softmax
from sitecal.protocol import Protocol
from sitecal.stats import BootstrapSpec, bootstrap_temperature, refit_bootstrap


def _data(seed: int = 0) -> EvaluationData:
    """Three scanners with different over-confidence; two studies per patient; one small scanner."""
    rng = np.random.default_rng(seed)
    sizes = {"A": 700, "B": 500, "C": 60}  # C is below calibration.min_group_size on its fit half
    t_true = {"A": 2.0, "B": 1.3, "C": 1.6}
    logits, labels, scanner, patients = [], [], [], []
    for name, n in sizes.items():
        z = rng.normal(size=(n, 3)) * 3.0
        p = softmax(z, temperature=t_true[name])
        labels.append((p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1))
        logits.append(z)
        scanner += [name] * n
        patients += [f"{name}{i // 2:04d}" for i in range(n)]
    n_all = sum(sizes.values())
    sex = np.where(rng.random(n_all) < 0.5, "F", "M")
    return EvaluationData(
        logits=np.vstack(logits),
        labels=np.concatenate(labels),
        patient_keys=np.array(patients),
        attributes={"scanner": np.array(scanner), "site": np.array(scanner), "sex": sex, "age_band": sex},
        class_names=["a", "b", "c"],
    )


def _protocol(**bootstrap: Any) -> Protocol:
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["calibration"]["split"] = dict(PATIENT_SPLIT)
    raw["subgroups"].pop("sex_age", None)  # the hand-built cohorts here carry the tag subgroups only
    raw["evaluation"]["bootstrap"].update({"n_resamples": 200, "refit": False, **bootstrap})
    raw["evaluation"]["subgroups"] = ["scanner"]
    raw["calibration"]["min_group_size"] = 100
    return Protocol.model_validate(raw)


FLOW = {
    "files_found": 1260,
    "dicom_instances": 1260,
    "studies": 1260,
    "labelled": 1260,
    "analysed": 1260,
    "exclusions": [],
}


def _run(protocol: Protocol, data: EvaluationData) -> Any:
    return evaluate(protocol, data, cohort_flow=FLOW, protocol_sha256="0" * 64)


def _scanner_rows(out: Any, data: EvaluationData, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The fit rows and the evaluated rows of one scanner group."""
    scanner = data.attributes["scanner"]
    return out.fit_mask & (scanner == name), ~out.fit_mask & (scanner == name)


def _refit_reference(
    data: EvaluationData, fit_rows: np.ndarray, eval_rows: np.ndarray, *, n_resamples: int, **options: Any
) -> Any:
    """refit_bootstrap on those rows, independently of the evaluation (seed 7, as the protocol's)."""
    return refit_bootstrap(
        data.logits[fit_rows],
        data.labels[fit_rows],
        data.logits[eval_rows],
        data.labels[eval_rows],
        fit_clusters=data.patient_keys[fit_rows],
        eval_clusters=data.patient_keys[eval_rows],
        spec=BootstrapSpec(n_resamples=n_resamples, seed=7),
        **options,
    )


def _scanner(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in doc["subgroups"]["scanner"] if g["group"] == name)


@pytest.fixture(scope="module")
def data() -> EvaluationData:
    return _data()


def test_temperature_intervals_resample_the_rows_each_temperature_was_fitted_on(data: EvaluationData) -> None:
    out = _run(_protocol(), data)
    doc, fit = out.document, out.fit_mask
    assert doc["bootstrap"]["refit"] is False
    spec = BootstrapSpec(n_resamples=200, seed=7)
    scanner = data.attributes["scanner"]
    for name, rows in (("A", fit & (scanner == "A")), ("C", fit)):  # C falls back to the global T
        entry = _scanner(doc, name)
        expected = bootstrap_temperature(
            data.logits[rows], data.labels[rows], clusters=data.patient_keys[rows], spec=spec
        ).temperature
        assert entry["temperature_interval"]["n_fit"] == int(rows.sum())
        assert entry["temperature_interval"]["low"] == expected.low
        assert entry["temperature_interval"]["high"] == expected.high
        assert entry["temperature"] == pytest.approx(expected.estimate, rel=1e-12)
    assert _scanner(doc, "C")["temperature_source"] == "global_fallback"
    a = _scanner(doc, "A")
    assert a["temperature_source"] == "own"
    assert a["temperature_interval"]["low"] < 2.0 < a["temperature_interval"]["high"]
    assert doc["overall"]["temperature_interval"] is None  # per-scanner T: no single overall temperature
    # the global temperature (what an unseen scanner gets) has its interval too: the fallback group's
    assert doc["global_temperature_interval"] == _scanner(doc, "C")["temperature_interval"]


def test_refit_widens_after_intervals_and_leaves_before_untouched(data: EvaluationData) -> None:
    fixed = _run(_protocol(), data).document
    out = _run(_protocol(refit=True), data)
    doc = out.document
    assert doc["bootstrap"]["refit"] is True and doc["bootstrap"]["refit_scope"] == "scanner"
    a_fixed, a_refit = _scanner(fixed, "A"), _scanner(doc, "A")
    assert a_refit["refit"] is True and a_fixed["refit"] is False
    for metric in ("ece", "nll", "brier", "accuracy"):
        assert a_refit["metrics"][metric]["before"] == a_fixed["metrics"][metric]["before"]
    # the after-intervals are refit_bootstrap's, computed independently here
    fit_rows, eval_rows = _scanner_rows(out, data, "A")
    ref = _refit_reference(data, fit_rows, eval_rows, n_resamples=200)
    nll = a_refit["metrics"]["nll"]["after"]
    assert (nll["low"], nll["high"]) == (ref.get("nll", "after").low, ref.get("nll", "after").high)
    t = fit_temperature(data.logits[fit_rows], data.labels[fit_rows]).temperature
    assert nll["estimate"] == pytest.approx(
        float(
            np.mean(
                -np.log(
                    softmax(data.logits[eval_rows], temperature=t)[
                        np.arange(int(eval_rows.sum())), data.labels[eval_rows]
                    ]
                )
            )
        ),
        rel=1e-12,
    )
    # accounting for the uncertainty of T can only add spread to a metric that depends on T
    width = {
        d: g["metrics"]["nll"]["after"]["high"] - g["metrics"]["nll"]["after"]["low"]
        for d, g in (("fixed", a_fixed), ("refit", a_refit))
    }
    assert width["refit"] > width["fixed"]
    assert math.isfinite(a_refit["temperature_interval"]["low"])
    # groups outside the calibration attribute keep fixed-T intervals
    assert doc["overall"]["refit"] is False


def test_smooth_ece_is_reported_and_refitted_but_not_judged(data: EvaluationData) -> None:
    raw = _protocol(refit=True, n_resamples=50).model_dump()
    raw["evaluation"]["metrics"] = ["ece", "smooth_ece", "accuracy"]
    judged = raw["acceptance"].pop(0)  # the debiased ECE's criterion: that metric is not computed here
    with pytest.raises(ValidationError, match="'smooth_ece' cannot be judged against a margin"):
        Protocol.model_validate({**raw, "acceptance": [{**judged, "metric": "smooth_ece"}]})
    out = _run(Protocol.model_validate(raw), data)
    doc = out.document
    assert doc["metrics"] == ["ece", "smooth_ece", "accuracy"]
    # a refitted calibration group: the after-interval is refit_bootstrap's, the kernel width refitted
    # in every resample under that resample's temperature
    fit_rows, eval_rows = _scanner_rows(out, data, "A")
    ref = _refit_reference(data, fit_rows, eval_rows, n_resamples=50, metrics=("smooth_ece",))
    after = _scanner(doc, "A")["metrics"]["smooth_ece"]["after"]
    assert (after["low"], after["high"]) == (
        ref.get("smooth_ece", "after").low,
        ref.get("smooth_ece", "after").high,
    )
    # not a default metric: leave-one-site-out keeps its list
    assert "smooth_ece" not in doc["sensitivity"]["leave_one_site_out"]["metrics"]


def test_refit_carries_the_temperatures_uncertainty_into_the_disparities_after_calibration(
    data: EvaluationData,
) -> None:
    fixed = _run(_protocol(), data).document["disparities"]["scanner"]
    refit = _run(_protocol(refit=True), data).document["disparities"]["scanner"]
    for metric in ("ece", "nll"):
        before_fixed, before_refit = fixed[metric]["before"], refit[metric]["before"]
        after_fixed, after_refit = fixed[metric]["after"], refit[metric]["after"]
        assert before_refit == before_fixed  # before calibration there is no temperature
        assert "refit" not in after_fixed and after_refit["refit"] is True
        assert after_refit["flagged"] == after_fixed["flagged"]  # the flags hold T fixed
        for group in after_fixed["versus_rest"]:
            f, r = after_fixed["versus_rest"][group], after_refit["versus_rest"][group]
            assert r["estimate"] == pytest.approx(f["estimate"], abs=1e-9)
        # A and B have their own temperatures, fitted on patients other than those evaluated: refitting
        # them adds the temperature's own variance to each group's value (C, small, takes the global one)
        for group in ("A", "B"):
            se_fixed = after_fixed["per_group"][group]["standard_error"]
            assert after_refit["per_group"][group]["standard_error"] > se_fixed
    # a shrunk temperature (penalty not repeated per resample) keeps every after-calibration gap at fixed T
    shrunk = _protocol(refit=True)
    shrunk = shrunk.model_copy(
        update={"calibration": shrunk.calibration.model_copy(update={"fallback": "shrink"})}
    )
    held = _run(shrunk, data).document["disparities"]["scanner"]
    assert all("refit" not in held[m]["after"] for m in ("ece", "nll"))
