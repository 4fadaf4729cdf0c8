"""The ``sensitivity`` key of evaluation.json and its report section, from an evaluation run in the test.

Every expected value is recomputed from the arrays with independent tools: statsmodels GLM (slope,
intercept, cluster-robust errors) and ``combine_effects`` (the meta-analysis), the delta-method variance
written out here, and the temperature fit and metric functions on the rows left after removing a site.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pypdf
import pytest
import statsmodels.api as sm
import yaml
from reportlab.lib.pagesizes import A4
from reportlab.platypus import SimpleDocTemplate
from scipy.optimize import minimize_scalar
from scipy.stats import chi2
from scipy.stats import t as student_t
from statsmodels.stats.meta_analysis import combine_effects
from tests.conftest import DEMO_PROTOCOL, PATIENT_SPLIT
from tests.report.sections import render_section

from sitecal.calibration import fit_group_temperatures
from sitecal.errors import DataError
from sitecal.evaluation import EvaluationData, EvaluationPlan, EvaluationPolicy, evaluate, plan_evaluation
from sitecal.evaluation._sensitivity import sensitivity_analyses, site_attribute
from sitecal.metrics import (
    RecalibrationStatistic,
    TopLabelOEStatistic,
    accuracy,
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
    softmax,
)
from sitecal.protocol import Protocol
from sitecal.report import ReportInputs
from sitecal.report._context import Context
from sitecal.report._sensitivity import format_percent, sensitivity
from sitecal.report._styles import make_styles, register_fonts
from sitecal.report._text import format_count, format_interval, format_value
from sitecal.report._wording import word
from sitecal.results import Evaluation
from sitecal.stats import bootstrap_interval

SITES = {"North": (360, 2.0), "River": (300, 1.3), "Aldric": (260, 1.6), "Tiny": (24, 1.5)}
Document = dict[str, Any]
N = sum(n for n, _ in SITES.values())
FLOW = {"files_found": N, "dicom_instances": N, "studies": N, "labelled": N, "analysed": N, "exclusions": []}


def _data(seed: int = 3) -> EvaluationData:
    """Four sites (one under the evaluation minimum), scanners nested in sites, two studies a patient."""
    rng = np.random.default_rng(seed)
    logits, labels, site, patients = [], [], [], []
    for name, (n, t) in SITES.items():
        z = rng.normal(size=(n, 3)) * 3.0
        labels.append((softmax(z, temperature=t).cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1))
        logits.append(z)
        site += [name] * n
        patients += [f"{name}-{i // 2:04d}" for i in range(n)]
    n_all = len(site)
    sites = np.array(site)
    scanner = np.where(sites == "River", "R1", np.where(sites == "Aldric", "A1", "N1"))
    sex = np.array(["F", "M"])[rng.integers(0, 2, n_all)]
    return EvaluationData(
        logits=np.vstack(logits),
        labels=np.concatenate(labels),
        patient_keys=np.array(patients),
        attributes={"scanner": scanner, "site": sites, "sex": sex, "age_band": sex},
        class_names=["normal", "nodule", "effusion"],
    )


def _protocol(*, with_site: bool = True) -> Protocol:
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["calibration"]["split"] = dict(PATIENT_SPLIT)
    raw["subgroups"].pop("sex_age", None)  # the hand-built cohorts here carry the tag subgroups only
    raw["evaluation"]["bootstrap"].update({"n_resamples": 200, "refit": False})
    raw["evaluation"]["subgroups"] = ["scanner", "site", "sex"] if with_site else ["scanner", "sex"]
    raw["calibration"]["min_group_size"] = 100
    if not with_site:
        del raw["subgroups"]["site"]
    return Protocol.model_validate(raw)


@pytest.fixture(scope="module")
def data() -> EvaluationData:
    return _data()


@pytest.fixture(scope="module")
def outcome(data: EvaluationData) -> Any:
    return evaluate(_protocol(), data, cohort_flow=FLOW, protocol_sha256="0" * 64)


@pytest.fixture(scope="module")
def document(outcome: Any) -> Document:
    doc: Document = json.loads(json.dumps(outcome.document, allow_nan=False))  # as evaluation.json
    Evaluation.from_dict(doc)
    return doc


def _plan(data: EvaluationData, protocol: Protocol | None = None) -> EvaluationPlan:
    """The plan the evaluation of ``data`` under ``protocol`` (default: this module's) starts from."""
    return plan_evaluation(EvaluationPolicy.from_protocol(protocol or _protocol()), data)


def _after_probs(data: EvaluationData, outcome: Any) -> tuple[np.ndarray, np.ndarray]:
    held = ~outcome.fit_mask
    applied = outcome.temperatures.temperatures_for(data.attributes["scanner"][held])
    return softmax(data.logits[held], temperature=applied), held


def _group(doc: Document, attribute: str, name: str) -> Document:
    rows = doc["sensitivity"]["recalibration"]["subgroups"][attribute]
    return next(g for g in rows if g["group"] == name)


def test_slope_and_intercept_match_statsmodels_cluster_glm(
    data: EvaluationData, outcome: Any, document: Document
) -> None:
    probs, held = _after_probs(data, outcome)
    site = data.attributes["site"][held]
    for name in ("North", "River"):
        rows = site == name
        p, y = probs[rows], data.labels[held][rows]
        confidence, correct = p.max(axis=1), (p.argmax(axis=1) == y).astype(float)
        z = np.log(confidence / (1 - confidence))
        groups = np.unique(data.patient_keys[held][rows], return_inverse=True)[1]
        cluster = {"cov_type": "cluster", "cov_kwds": {"groups": groups}}
        binomial = sm.families.Binomial()
        two = sm.GLM(correct, sm.add_constant(z), family=binomial).fit(**cluster)
        offset = sm.GLM(correct, np.ones((len(z), 1)), family=binomial, offset=z).fit(**cluster)
        entry = _group(document, "site", name)["after"]
        assert entry["slope"]["estimate"] == pytest.approx(two.params[1], rel=1e-8)
        assert entry["slope"]["standard_error"] == pytest.approx(two.bse[1], rel=1e-6)
        low, high = two.conf_int(alpha=0.05)[1]
        assert (entry["slope"]["low"], entry["slope"]["high"]) == pytest.approx((low, high), rel=1e-6)
        assert entry["intercept"]["estimate"] == pytest.approx(offset.params[0], rel=1e-8, abs=1e-10)
        assert entry["intercept"]["standard_error"] == pytest.approx(offset.bse[0], rel=1e-6)
        assert entry["oe_ratio"]["estimate"] == pytest.approx(correct.mean() / confidence.mean(), rel=1e-12)
        assert entry["n_correct"] == int(correct.sum())


def test_oe_interval_is_the_patient_cluster_bootstrap_with_the_protocol_seed(
    data: EvaluationData, outcome: Any, document: Document
) -> None:
    probs, held = _after_probs(data, outcome)
    rows = data.attributes["sex"][held] == "F"
    res = bootstrap_interval(
        TopLabelOEStatistic(),
        (probs[rows], data.labels[held][rows]),
        clusters=data.patient_keys[held][rows],
        n_resamples=200,
        seed=7,
    )
    entry = _group(document, "sex", "F")["after"]["oe_ratio"]
    assert (entry["low"], entry["high"]) == (res.low, res.high)
    assert entry["low"] < entry["estimate"] < entry["high"]


def test_the_evaluations_o_e_intervals_are_those_the_analysis_draws_itself(
    data: EvaluationData, outcome: Any
) -> None:
    """evaluate() hands over each group's O/E from its own resamples: the same as drawing them again."""
    alone = sensitivity_analyses(_plan(data))
    assert alone.recalibration == outcome.result.sensitivity.recalibration
    overall = alone.recalibration.overall.before.oe_ratio
    assert overall.low is not None and overall.low < overall.estimate < overall.high


@pytest.mark.parametrize("stage", ["before", "after"])
def test_heterogeneity_matches_combine_effects_and_a_written_out_variance(
    data: EvaluationData, outcome: Any, document: Document, stage: str
) -> None:
    het = document["sensitivity"]["heterogeneity"]
    assert (het["attribute"], het["attribute_source"]) == ("site", "site_subgroup")
    after, held = _after_probs(data, outcome)
    probs = after if stage == "after" else softmax(data.logits[held])
    site, patients, labels = data.attributes["site"][held], data.patient_keys[held], data.labels[held]
    effects, variances = [], []
    for name in ("Aldric", "North", "River"):  # sorted; Tiny has fewer than 30 evaluation studies
        rows = site == name
        correct = (probs[rows].argmax(axis=1) == labels[rows]).astype(float)
        confidence = probs[rows].max(axis=1)
        o, e = correct.sum(), confidence.sum()
        keys = patients[rows]
        d = np.array(
            [correct[keys == k].sum() / o - confidence[keys == k].sum() / e for k in np.unique(keys)]
        )
        k = len(d)
        effects.append(math.log(o / e))
        variances.append(k / (k - 1) * float(np.sum(d**2)))  # delta method, clusters = patients
    meta = het[stage]
    assert [g["group"] for g in meta["groups"]] == ["Aldric", "North", "River"]
    assert [g["log_oe"] for g in meta["groups"]] == pytest.approx(effects, rel=1e-12)
    assert [g["log_oe_se"] ** 2 for g in meta["groups"]] == pytest.approx(variances, rel=1e-10)
    tiny = site == "Tiny"
    assert [(e["group"], e["n"], e["n_patients"]) for e in meta["excluded"]] == [
        ("Tiny", int(tiny.sum()), len(set(patients[tiny])))
    ]
    assert meta["excluded"][0]["reason"] == "site_too_small"
    assert word(meta["excluded"][0]["reason"], het) == "fewer than 30 studies (evaluation minimum)"
    with np.errstate(invalid="ignore"):  # statsmodels takes sqrt of an untruncated negative tau2
        ref = combine_effects(np.array(effects), np.array(variances), method_re="chi2")
        intervals = ref.conf_int(alpha=0.05)
    assert meta["q"] == pytest.approx(ref.q, rel=1e-10)
    assert meta["p_value"] == pytest.approx(float(chi2.sf(ref.q, 2)), rel=1e-10)
    assert meta["i2"] == pytest.approx(max(0.0, ref.i2), rel=1e-10, abs=1e-12)
    del intervals  # the Wald interval of statsmodels is no longer the one reported
    # tau² by REML, written out: maximise the restricted log-likelihood over tau² >= 0
    theta, v = np.array(effects), np.array(variances)

    def restricted(t2: float) -> float:
        w = 1.0 / (v + t2)
        mu = float(np.sum(w * theta) / w.sum())
        return -0.5 * float(np.sum(np.log(v + t2)) + np.log(w.sum()) + np.sum(w * (theta - mu) ** 2))

    best = minimize_scalar(
        lambda t: -restricted(t), bounds=(0.0, 10.0), method="bounded", options={"xatol": 1e-12}
    )
    tau2 = max(0.0, float(best.x)) if restricted(0.0) < restricted(float(best.x)) else 0.0
    assert meta["tau2"] == pytest.approx(tau2, abs=1e-7)
    w = 1.0 / (v + meta["tau2"])
    pooled = float(np.sum(w * theta) / w.sum())
    # Hartung-Knapp with the max(1, q) floor: the weighted residual variance, never below the fixed-scale
    # one, t with k - 1 = 2 df
    se_hk = math.sqrt(max(1.0, float(np.sum(w * (theta - pooled) ** 2)) / 2) / float(w.sum()))
    t = float(student_t.ppf(0.975, 2))
    assert meta["pooled_oe"] == pytest.approx(math.exp(pooled), rel=1e-9)
    assert (meta["pooled_oe_low"], meta["pooled_oe_high"]) == pytest.approx(
        (math.exp(pooled - t * se_hk), math.exp(pooled + t * se_hk)), rel=1e-9
    )
    # a new site: t with k - 2 = 1 df, tau² plus the pooled estimate's variance
    half = float(student_t.ppf(0.975, 1)) * math.sqrt(meta["tau2"] + se_hk**2)
    assert (meta["prediction_oe_low"], meta["prediction_oe_high"]) == pytest.approx(
        (math.exp(pooled - half), math.exp(pooled + half)), rel=1e-9
    )
    assert het["method"] == "reml_hartung_knapp"


def test_leave_one_site_out_refits_on_the_remaining_fit_part(
    data: EvaluationData, outcome: Any, document: Document
) -> None:
    loso = document["sensitivity"]["leave_one_site_out"]
    fit, site, scanner = outcome.fit_mask, data.attributes["site"], data.attributes["scanner"]
    assert [r["left_out"] for r in loso["rows"]] == ["Aldric", "North", "River", "Tiny"]
    full = loso["full"]["metrics"]
    for metric in ("ece", "nll", "brier", "accuracy"):  # the full cohort as the main evaluation has it
        assert full[metric] == pytest.approx(
            document["overall"]["metrics"][metric]["after"]["estimate"], rel=1e-12
        )
    for row in loso["rows"]:
        keep = site != row["left_out"]
        f, h = fit & keep, ~fit & keep
        temps = fit_group_temperatures(
            data.logits[f], data.labels[f], scanner[f], min_group_size=100, fallback="global"
        )
        probs = softmax(data.logits[h], temperature=temps.temperatures_for(scanner[h]))
        labels = data.labels[h]
        expected = {
            "ece": expected_calibration_error(probs, labels, n_bins=15),
            "nll": negative_log_likelihood(probs, labels),
            "brier": brier_score(probs, labels),
            "accuracy": accuracy(probs, labels),
        }
        assert (row["n_fit"], row["n_evaluation"]) == (int(f.sum()), int(h.sum()))
        assert row["n_left_out_fit"] + row["n_fit"] == int(fit.sum())
        for metric, value in expected.items():
            assert row["metrics"][metric] == pytest.approx(value, rel=1e-12)
            assert row["difference"][metric] == pytest.approx(value - full[metric], rel=1e-9, abs=1e-15)
        # internal-external: those temperatures on all the left-out site's studies, fit and evaluation
        own = ~keep
        p_own = softmax(data.logits[own], temperature=temps.temperatures_for(scanner[own]))
        assert row["external"]["ece"] == pytest.approx(
            expected_calibration_error(p_own, data.labels[own], n_bins=15), rel=1e-12
        )
        assert row["external"]["accuracy"] == pytest.approx(accuracy(p_own, data.labels[own]), rel=1e-12)
    assert loso["rows"][1]["difference"]["ece"] != 0.0  # removing a large site changes the result


def test_deterministic_and_without_nan(data: EvaluationData, outcome: Any, document: Document) -> None:
    again = sensitivity_analyses(_plan(data)).to_dict()
    assert json.dumps(again, allow_nan=False) == json.dumps(document["sensitivity"], allow_nan=False)


def test_site_falls_back_to_the_calibration_attribute(data: EvaluationData) -> None:
    protocol = _protocol(with_site=False)
    assert site_attribute(EvaluationPolicy.from_protocol(protocol)) == ("scanner", "calibration_attribute")
    attributes = {k: v for k, v in data.attributes.items() if k != "site"}
    reduced = EvaluationData(data.logits, data.labels, data.patient_keys, attributes, data.class_names)
    doc = evaluate(protocol, reduced, cohort_flow=FLOW, protocol_sha256="0" * 64).document
    het = doc["sensitivity"]["heterogeneity"]
    assert het["attribute"] == "scanner"
    assert [g["group"] for g in het["after"]["groups"]] == ["A1", "N1", "R1"]
    assert [r["left_out"] for r in doc["sensitivity"]["leave_one_site_out"]["rows"]] == ["A1", "N1", "R1"]
    Evaluation.from_dict(json.loads(json.dumps(doc, allow_nan=False)))


def test_degenerate_groups_give_null_with_a_reason(data: EvaluationData) -> None:
    # the "M" rows are made certain and correct: no wrong prediction, so slope and intercept are null
    logits = data.logits.copy()
    male = data.attributes["sex"] == "M"
    logits[male] = -20.0
    logits[male, data.labels[male]] = 20.0
    changed = EvaluationData(logits, data.labels, data.patient_keys, data.attributes, data.class_names)
    doc = evaluate(_protocol(), changed, cohort_flow=FLOW, protocol_sha256="0" * 64).document
    entry = _group(json.loads(json.dumps(doc, allow_nan=False)), "sex", "M")["before"]
    for name in ("slope", "intercept"):
        assert entry[name]["estimate"] is None and entry[name]["low"] is None
        assert entry[name]["note"] == "every_prediction_correct"  # a code: the report words it
        assert word(entry[name]["note"]).startswith("every prediction is correct")
    assert entry["oe_ratio"]["estimate"] == pytest.approx(1.0, abs=1e-12)


def test_report_section_prints_the_documents_numbers(tmp_path: Path, document: Document) -> None:
    text = " ".join(render_section(tmp_path, sensitivity, document).split())  # cells wrap inside intervals
    sens = document["sensitivity"]
    assert "Sensitivity analyses" in text
    overall = sens["recalibration"]["overall"]
    for stage in ("before", "after"):
        for name in ("slope", "intercept", "oe_ratio"):
            s = overall[stage][name]
            assert format_interval(s["estimate"], s["low"], s["high"]).split(" [")[0] in text
        ece = document["overall"]["metrics"]["ece"][stage]
        assert format_interval(ece["estimate"], ece["low"], ece["high"]) in text
    north = _group(document, "site", "North")["after"]["slope"]
    assert format_interval(north["estimate"], north["low"], north["high"]) in text
    after = sens["heterogeneity"]["after"]
    assert f"Cochran’s Q = {format_value(after['q'])}" in text
    assert f"I² = {format_percent(after['i2'])}" in text
    pooled = format_interval(after["pooled_oe"], after["pooled_oe_low"], after["pooled_oe_high"])
    assert pooled in text
    assert "Tiny" in text and "Left out of the pooling" in text
    for row in sens["leave_one_site_out"]["rows"]:
        m, d = row["metrics"], row["difference"]
        assert f"{format_value(m['ece'])} ({format_value(d['ece'], signed=True)})" in text
        assert format_count(row["n_evaluation"]) in text


def test_report_section_copes_with_documents_without_sensitivity(tmp_path: Path, document: Document) -> None:
    old = {k: v for k, v in document.items() if k != "sensitivity"}
    Evaluation.from_dict(old)  # older documents still validate
    text = render_section(tmp_path, sensitivity, old)
    assert "records no sensitivity analyses" in " ".join(text.split())


def test_long_tables_split_across_pages_with_the_header_repeated(tmp_path: Path, document: Document) -> None:
    hostile = '<b>St. Mary\'s & "Ünï"'
    doc = copy.deepcopy(document)
    template = doc["sensitivity"]["recalibration"]["subgroups"]["sex"][0]
    doc["sensitivity"]["recalibration"]["subgroups"]["sex"] = [
        {**template, "group": f"{hostile} {i:02d}"} for i in range(40)
    ]
    pdf = tmp_path / "long.pdf"
    frame = SimpleDocTemplate(str(pdf), pagesize=A4, leftMargin=50, rightMargin=50)
    inputs = ReportInputs(doc, {}, {}, {"name": "t"})
    ctx = Context(
        inputs=inputs, styles=make_styles(register_fonts()), width=frame.width, figures_dir=tmp_path
    )
    frame.build(sensitivity(ctx))
    pages = [" ".join(page.extract_text().split()) for page in pypdf.PdfReader(pdf).pages]
    with_rows = [p for p in pages if f"{hostile} " in p]
    assert len(with_rows) >= 2  # the 80-row table runs over pages
    assert all("Sex Stage ECE Slope Intercept O:E" in p for p in with_rows)  # header on every page
    assert sum(p.count(f"{hostile} ") for p in pages) == 40  # printed literally, each group once


def test_unknown_site_is_left_out_of_the_pooling_but_not_of_leave_one_out(
    data: EvaluationData, outcome: Any
) -> None:
    site = data.attributes["site"].astype("<U16")  # room for "unknown"
    site[site == "Aldric"] = "unknown"
    changed = EvaluationData(
        data.logits, data.labels, data.patient_keys, {**data.attributes, "site": site}, data.class_names
    )
    sens = sensitivity_analyses(_plan(changed)).to_dict()
    after = sens["heterogeneity"]["after"]
    assert [g["group"] for g in after["groups"]] == ["North", "River"]
    assert [e["group"] for e in after["excluded"]] == ["Tiny", "unknown"]
    assert after["excluded"][1]["reason"] == "site_unknown"
    assert "not one site" in word(after["excluded"][1]["reason"])
    assert [r["left_out"] for r in sens["leave_one_site_out"]["rows"]] == [
        "North",
        "River",
        "Tiny",
        "unknown",
    ]


def test_bootstrap_option_for_slope_and_intercept(data: EvaluationData, outcome: Any) -> None:
    sens = sensitivity_analyses(_plan(data), slope_intervals="bootstrap").to_dict()
    assert sens["recalibration"]["intervals"]["slope"] == "cluster_bootstrap"
    probs, held = _after_probs(data, outcome)
    rows = data.attributes["site"][held] == "River"
    for name in ("slope", "intercept"):
        res = bootstrap_interval(
            RecalibrationStatistic(name),
            (probs[rows], data.labels[held][rows]),
            clusters=data.patient_keys[held][rows],
            n_resamples=200,
            seed=7,
        )
        entry = next(g for g in sens["recalibration"]["subgroups"]["site"] if g["group"] == "River")
        assert (entry["after"][name]["low"], entry["after"][name]["high"]) == (res.low, res.high)
        assert entry["after"][name]["estimate"] == pytest.approx(res.estimate, rel=1e-8)
    with pytest.raises(DataError, match="'slope_intervals' parameter of sensitivity_analyses"):
        sensitivity_analyses(_plan(data), slope_intervals="profile")


def test_cross_fitted_sensitivity_from_the_applied_temperatures_equals_one_that_fits_them_again(
    data: EvaluationData,
) -> None:
    """The plan hands its cross-fitted temperatures over: leave-one-site-out's full cohort starts from
    them, and every number is what fitting them again gives."""
    raw = _protocol().model_dump()
    raw["calibration"]["split"] = {"by": "crossfit", "folds": 3, "seed": 5}
    raw["calibration"]["min_group_size"] = 100
    plan = _plan(data, Protocol.model_validate(raw))
    assert plan.applied is not None
    given = sensitivity_analyses(plan).to_dict()
    again = sensitivity_analyses(dataclasses.replace(plan, applied=None)).to_dict()
    assert given == again
    temperature = plan.temperatures.global_fit.temperature
    assert given["leave_one_site_out"]["full"]["global_temperature"] == temperature
