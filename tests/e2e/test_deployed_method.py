"""calibration.method other than temperature scaling: evaluated, refitted, written, applied and exported.

The evaluation is checked against an independent path (fit_group_methods and refit_method_bootstrap called
here on the same rows); the run route checks calibration.json, the report, `sitecal apply` and
`sitecal export` on a small generated cohort.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from tests.conftest import PATIENT_SPLIT, VERDICT_EXIT, write_demo_protocol
from tests.evaluation.test_evaluation import FLOW, _data, _protocol

from sitecal.calibration import GroupMethods, fit_group_methods
from sitecal.cli import main
from sitecal.demo import generate_demo
from sitecal.errors import DataError, ProtocolError
from sitecal.evaluation import EvaluationData, evaluate
from sitecal.metrics import negative_log_likelihood
from sitecal.protocol import Protocol, load_protocol
from sitecal.results import Evaluation, MethodCalibrationDocument, json_schema
from sitecal.stats import BootstrapSpec, refit_method_bootstrap


@pytest.fixture(scope="module")
def data() -> EvaluationData:
    return _data()


def _method_protocol(method: str, **bootstrap: object) -> Protocol:
    raw = _protocol(**bootstrap).model_dump(mode="json")
    raw["calibration"]["method"] = method
    return Protocol.model_validate(raw)


def test_the_method_is_evaluated_on_its_own_fits_and_refitted_per_group(data: EvaluationData) -> None:
    protocol = _method_protocol("vector", refit=True)
    out = evaluate(protocol, data, cohort_flow=FLOW, protocol_sha256="0" * 64)
    doc = out.document
    assert doc["calibration_method"] == "vector"
    assert Evaluation.from_dict(doc).calibration_method == "vector"
    fit, held = out.fit_mask, ~out.fit_mask
    scanner = data.attributes["scanner"]
    # independently: the fits on the fit rows, applied to the evaluation rows
    fits = fit_group_methods("vector", data.logits[fit], data.labels[fit], scanner[fit], min_group_size=100)
    assert out.methods is not None and out.methods.to_dict() == fits.to_dict()
    probs = fits.probabilities(data.logits[held], scanner[held])[0]
    assert doc["overall"]["metrics"]["nll"]["after"]["estimate"] == pytest.approx(
        negative_log_likelihood(probs, data.labels[held]), rel=1e-12
    )
    rows = {g["group"]: g for g in doc["subgroups"]["scanner"]}
    assert rows["A"]["calibration_source"] == "own" and rows["C"]["calibration_source"] == "global_fallback"
    assert all(r["temperature"] is None and "temperature_source" not in r for r in rows.values())
    spec = BootstrapSpec(n_resamples=200, seed=protocol.evaluation.bootstrap.seed)
    for name, fit_rows in (("A", fit & (scanner == "A")), ("C", fit)):  # C: on every fit row
        eval_rows = held & (scanner == name)
        ref = refit_method_bootstrap(
            data.logits[fit_rows], data.labels[fit_rows], data.logits[eval_rows], data.labels[eval_rows],
            fit_clusters=data.patient_keys[fit_rows], eval_clusters=data.patient_keys[eval_rows],
            method="vector", metrics=tuple(protocol.evaluation.metrics), spec=spec,
        )  # fmt: skip
        got = rows[name]["metrics"]["ece"]
        assert rows[name]["refit"] is True
        assert (got["after"]["low"], got["after"]["high"]) == pytest.approx(
            (ref.get("ece", "after").low, ref.get("ece", "after").high)
        )
    loso = doc["sensitivity"]["leave_one_site_out"]
    assert all(r["global_temperature"] is None for r in loso["rows"])


def test_what_another_method_cannot_do_is_refused_before_any_work(
    tmp_path: Path, demo_protocol_text: str
) -> None:
    patient = demo_protocol_text.replace(
        "split: {by: crossfit, folds: 5, seed: 20261202}", "split: {by: patient, seed: 20261202}"
    )
    cases = {
        patient.replace("method: temperature", "method: beta"): "calibration.method:",
        patient.replace("method: temperature", "method: vector").replace(
            "fallback: global", "fallback: shrink"
        ): "calibration.fallback:",
    }
    for i, (text, where) in enumerate(cases.items()):
        path = tmp_path / f"p{i}.yaml"
        path.write_text(text)
        with pytest.raises(ProtocolError, match=where):
            load_protocol(path)
        assert main(["check", str(path)]) == 2


@pytest.fixture(scope="module")
def method_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("method")
    manifest = generate_demo(root / "data", n_studies=240, seed=5)
    protocol = write_demo_protocol(
        root,
        manifest,
        n_resamples=60,
        inputs={"num_workers": 0},
        calibration={"method": "isotonic", "split": dict(PATIENT_SPLIT), "min_group_size": 20},
        evaluation={"bootstrap": {"n_resamples": 60, "seed": 7, "refit": True}},
    )
    mp = pytest.MonkeyPatch()
    mp.setenv("SOURCE_DATE_EPOCH", "1767225600")
    mp.chdir(root)
    try:
        code = main(["run", str(protocol), "--no-progress"])
    finally:
        mp.undo()
    folder = max((p for p in (root / "reports").iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns)
    return {"root": root, "folder": folder, "code": code, "protocol": protocol}


def test_a_run_writes_the_methods_fits_and_reports_them(method_run: dict) -> None:
    folder = method_run["folder"]
    evaluation = json.loads((folder / "evaluation.json").read_text())
    assert method_run["code"] == VERDICT_EXIT[evaluation["verdict"]]
    calibration = json.loads((folder / "calibration.json").read_text())
    assert calibration["method"] == "isotonic" and calibration["fits"]["name"] == "isotonic"
    assert len(calibration["model_sha256"]) == 64
    GroupMethods.from_dict(calibration["fits"])  # what deployment loads
    jsonschema.Draft202012Validator(json_schema(MethodCalibrationDocument)).validate(calibration)
    jsonschema.Draft202012Validator(json_schema(Evaluation)).validate(evaluation)
    edited = {**calibration, "fits": {**calibration["fits"], "name": "vector"}}
    with pytest.raises(DataError, match=r"fits\.name"):
        MethodCalibrationDocument.from_dict(edited, source="calibration.json")
    text = " ".join(
        subprocess.run(
            ["pdftotext", str(folder / "report.pdf"), "-"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert "Fitted calibration" in text and "Isotonic regression (Zadrozny" in text
    assert "Fitted temperatures" not in text


def test_apply_and_export_use_the_methods_fits(method_run: dict, tmp_path: Path) -> None:
    folder = method_run["folder"]
    fits = GroupMethods.from_dict(json.loads((folder / "calibration.json").read_text())["fits"])
    with (folder / "predictions.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    names = [c.removeprefix("logit:") for c in rows[0] if c.startswith("logit:")]
    scores = tmp_path / "scores.csv"
    with (folder / "cohort.csv").open(encoding="utf-8") as fh:
        cohort = {r["study_key"]: r for r in csv.DictReader(fh)}
    with scores.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["scanner", *[f"logit:{n}" for n in names]])
        for r in rows:
            writer.writerow([cohort[r["study_key"]]["scanner"], *[r[f"logit:{n}"] for n in names]])
    out = tmp_path / "out.csv"
    assert main(["apply", str(folder / "calibration.json"), str(scores), "--output", str(out)]) == 0
    with out.open(encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    logits = np.array([[float(r[f"logit:{n}"]) for n in names] for r in rows])
    groups = [cohort[r["study_key"]]["scanner"] for r in rows]
    want = fits.probabilities(logits, groups)[0]
    got = np.array([[float(r[f"prob:{n}"]) for n in names] for r in written])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    assert {r["method"] for r in written} == {"isotonic"}

    target = tmp_path / "cal.ts"
    args = ["export", str(folder), "--format", "torchscript", "--output", str(target), "--no-progress"]
    assert main([*args, "--protocol", str(method_run["protocol"])]) == 0
    # written only after its probabilities on re-read studies equalled the isotonic fits' (export_run)
    table = json.loads(target.with_name("cal.ts.groups.json").read_text())
    assert table["method"] == "isotonic" and target.stat().st_size > 0
    assert set(table["groups"]) == set(fits.groups)


def test_cross_fitting_calibrates_each_fold_with_the_method_fitted_on_the_others(
    data: EvaluationData,
) -> None:
    raw = _method_protocol("dirichlet", refit=True).model_dump(mode="json")
    raw["calibration"]["split"] = {"by": "crossfit", "folds": 3, "seed": 11}
    raw["calibration"]["compare"] = ["vector"]
    protocol = Protocol.model_validate(raw)
    out = evaluate(protocol, data, cohort_flow=FLOW, protocol_sha256="0" * 64)
    doc = out.document
    fold = out.split.fold
    scanner = data.attributes["scanner"]
    probs = np.empty(data.logits.shape)
    for k in range(3):  # independently: each fold by the other folds' fits
        fits = fit_group_methods(
            "dirichlet",
            data.logits[fold != k],
            data.labels[fold != k],
            scanner[fold != k],
            min_group_size=100,
        )
        probs[fold == k] = fits.probabilities(data.logits[fold == k], scanner[fold == k])[0]
    assert doc["overall"]["metrics"]["nll"]["after"]["estimate"] == pytest.approx(
        negative_log_likelihood(probs, data.labels), rel=1e-12
    )
    deployed = fit_group_methods("dirichlet", data.logits, data.labels, scanner, min_group_size=100)
    assert out.methods is not None and out.methods.to_dict() == deployed.to_dict()
    a = next(g for g in doc["subgroups"]["scanner"] if g["group"] == "A")
    assert a["refit"] is True and a["calibration_source"] == "own"
    # the comparison's temperature arm is the cross-fitted temperature, every fold refitted per resample
    compared = next(g for g in doc["method_comparison"]["groups"] if g["group"] == "A")
    assert compared["n_fit"] == compared["n_evaluation"] == int((scanner == "A").sum())
    assert compared["methods"]["vector"]["nll"]["finding"] in ("better", "worse", "no_clear_difference")


def test_edited_fits_in_calibration_json_are_named_not_a_traceback(
    method_run: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = json.loads((method_run["folder"] / "calibration.json").read_text())
    calibration["fits"]["global_fit"] = {"junk": 1}
    edited = tmp_path / "calibration.json"
    edited.write_text(json.dumps(calibration))
    scores = tmp_path / "scores.csv"
    scores.write_text("scanner,logit:normal,logit:nodule,logit:effusion\nA,1,2,3\n")
    # outside its sealed run folder the file is refused, and taken as it is only when told ...
    assert main(["apply", str(edited), str(scores), "--output", str(tmp_path / "out.csv")]) == 2
    assert f"{edited}: not in a sealed run folder" in capsys.readouterr().err
    # ... and then its malformed fits are still named, not a traceback
    args = ["apply", str(edited), str(scores), "--output", str(tmp_path / "out.csv"), "--unverified"]
    assert main(args) == 2
    assert f"{edited}: " in capsys.readouterr().err and not (tmp_path / "out.csv").exists()
