"""Cross-fitting (``calibration.split.by: crossfit``): folds, the procedure's bootstrap, the evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.conftest import DEMO_PROTOCOL
from tests.evaluation.test_evaluation import _data, _protocol, _run

from sitecal.calibration import fit_group_temperatures, fit_temperature
from sitecal.errors import ProtocolError
from sitecal.evaluation import EvaluationData
from sitecal.evaluation._split import crossfit_folds
from sitecal.metrics import softmax
from sitecal.metrics.registry import metric
from sitecal.protocol import load_protocol
from sitecal.stats import BootstrapSpec, CrossfitIntervals, bootstrap_metrics, crossfit_bootstrap
from sitecal.stats._resample import draw_chunks, make_plan


def test_folds_keep_patients_whole_balance_strata_and_follow_only_keys_and_seed() -> None:
    rng = np.random.default_rng(3)
    patients = np.array([f"p{i:03d}" for i in rng.integers(0, 90, 400)])
    strata = np.array(["A" if p < "p045" else "B" for p in patients])
    folds = crossfit_folds(patients, strata, folds=4, seed=11)
    fold_of = {}
    for p, f in zip(patients.tolist(), folds.tolist(), strict=True):
        assert fold_of.setdefault(p, f) == f  # a patient's studies share a fold
    for stratum in ("A", "B"):
        members = sorted({p for p, s in zip(patients, strata, strict=True) if s == stratum})
        counts = np.bincount([fold_of[p] for p in members], minlength=4)
        assert counts.max() - counts.min() <= 1
    order = rng.permutation(400)
    again = crossfit_folds(patients[order], strata[order], folds=4, seed=11)
    np.testing.assert_array_equal(again, folds[order])  # the row order does not move a patient
    assert not np.array_equal(crossfit_folds(patients, strata, folds=4, seed=12), folds)


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ("{by: crossfit, fit_fraction: 0.5, seed: 1}", "fit_fraction applies to by: patient"),
        ("{by: patient, folds: 5, seed: 1}", "folds applies to by: crossfit"),
        ("{by: crossfit, folds: 1, seed: 1}", "folds"),
        ("{by: crossfit, folds: 21, seed: 1}", "folds"),
    ],
)
def test_the_protocol_refuses_settings_of_the_other_method(tmp_path: Path, split: str, message: str) -> None:
    text = DEMO_PROTOCOL.read_text().replace(
        "split: {by: crossfit, folds: 5, seed: 20261202}", f"split: {split}"
    )
    assert f"split: {split}" in text
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProtocolError, match=message):
        load_protocol(path)


def test_bca_with_a_cross_fitted_refit_is_refused_before_any_work(tmp_path: Path) -> None:
    text = DEMO_PROTOCOL.read_text().replace(
        "split: {by: crossfit, folds: 5, seed: 20261202}", "split: {by: crossfit, folds: 5, seed: 1}"
    )
    text = text.replace("method: percentile, seed: 7, refit: true", "method: bca, seed: 7, refit: true")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProtocolError, match=r"evaluation\.bootstrap\.method.*crossfit"):
        load_protocol(path)


def _binary(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 2)) * 3.0
    y = (rng.random(n) < softmax(z, temperature=1.8)[:, 1]).astype(np.int64)
    patients = np.array([f"p{i // 2:03d}" for i in range(n)])
    folds = np.array([int(p[1:]) % 3 for p in patients])
    return z, y, patients, folds


def _on_the_same_rows(
    z: np.ndarray,
    y: np.ndarray,
    patients: np.ndarray,
    folds: np.ndarray,
    metrics: tuple[str, ...],
    spec: BootstrapSpec,
) -> CrossfitIntervals:
    """The cross-fitted bootstrap with every row both fitted on and evaluated (3 folds)."""
    return crossfit_bootstrap(
        z,
        y,
        z,
        y,
        fit_clusters=patients,
        eval_clusters=patients,
        fit_folds=folds,
        eval_folds=folds,
        folds=3,
        metrics=metrics,
        spec=spec,
    )


def test_each_resample_refits_every_fold_on_the_other_folds_resampled_patients() -> None:
    z, y, patients, folds = _binary(120, 0)
    spec = BootstrapSpec(n_resamples=6, seed=5)
    res = _on_the_same_rows(z, y, patients, folds, ("ece", "nll"), spec)
    # the point estimates: fold k's rows calibrated with T fitted on the other folds' rows
    t = [fit_temperature(z[folds != k], y[folds != k]).temperature for k in range(3)]
    after = softmax(z, temperature=np.array(t)[folds])
    assert res.get("nll", "after").estimate == pytest.approx(metric("nll")(after, y), abs=1e-12)
    assert res.temperature.estimate == pytest.approx(fit_temperature(z, y).temperature, rel=1e-9)
    # each resample by hand: the drawn patients' rows repeated by their weights, every fold refitted
    plan = make_plan(2 * z.shape[0], np.concatenate([patients, patients]), None, func="test")
    (draws,) = draw_chunks(plan, seed=5, n_resamples=6, chunk_size=6)
    row_weight = draws.weights[:, plan.cluster_of_row[: z.shape[0]]].astype(int)
    for b in range(6):
        rows = np.repeat(np.arange(z.shape[0]), row_weight[b])
        zb, yb, fb = z[rows], y[rows], folds[rows]
        tb = [fit_temperature(zb[fb != k], yb[fb != k], tol=1e-12).temperature for k in range(3)]
        nll_b = metric("nll")(softmax(zb, temperature=np.array(tb)[fb]), yb)
        assert res.replicates[1, 1, b] == pytest.approx(nll_b, rel=1e-7)
        assert np.exp(res.log_temperature_replicates[b]) == pytest.approx(
            fit_temperature(zb, yb, tol=1e-12).temperature, rel=1e-7
        )


def test_the_before_stage_is_the_per_group_bootstrap_of_the_same_patients_bit_for_bit() -> None:
    """Fit and evaluated rows the same patients: the same draws, so "before" is bootstrap_metrics' exactly."""
    z, y, patients, folds = _binary(150, 2)
    spec = BootstrapSpec(n_resamples=40, seed=9)
    metrics = ("ece", "ece_debiased", "nll", "brier", "accuracy")
    res = _on_the_same_rows(z, y, patients, folds, metrics, spec)
    alone = bootstrap_metrics({"before": softmax(z)}, y, clusters=patients, metrics=metrics, spec=spec)
    assert np.array_equal(res.replicates[:, 0], alone.replicates[:, 0])
    assert np.array_equal(res.estimates[:, 0], alone.estimates[:, 0])
    # and those are the metrics of each resample's rows, repeated by their draws
    plan = make_plan(z.shape[0], patients, None, func="test")
    (draws,) = draw_chunks(plan, seed=9, n_resamples=40, chunk_size=40)
    row_weight = draws.weights[:, plan.cluster_of_row].astype(int)
    for b in (0, 17, 39):
        rows = np.repeat(np.arange(z.shape[0]), row_weight[b])
        assert res.replicates[2, 0, b] == pytest.approx(metric("nll")(softmax(z[rows]), y[rows]), rel=1e-12)


def test_the_procedure_bootstrap_refuses_bca_and_a_fold_without_fit_rows() -> None:
    z, y, patients, folds = _binary(60, 1)
    kw = {"fit_clusters": patients, "eval_clusters": patients, "fit_folds": folds, "eval_folds": folds}
    with pytest.raises(Exception, match="percentile intervals only"):
        crossfit_bootstrap(z, y, z, y, folds=3, spec=BootstrapSpec(n_resamples=50, method="bca"), **kw)
    with pytest.raises(Exception, match="fold"):
        crossfit_bootstrap(z, y, z, y, folds=3, **{**kw, "fit_folds": np.zeros(60, dtype=int)})


def _crossfit_protocol(**bootstrap: object):  # type: ignore[no-untyped-def]
    protocol = _protocol(**bootstrap)
    split = type(protocol.calibration.split).model_validate({"by": "crossfit", "folds": 4, "seed": 3})
    return protocol.model_copy(
        update={"calibration": protocol.calibration.model_copy(update={"split": split})}
    )


@pytest.fixture(scope="module")
def data() -> EvaluationData:
    return _data()


def test_every_study_is_evaluated_once_with_temperatures_fitted_on_the_other_folds(
    data: EvaluationData,
) -> None:
    protocol = _crossfit_protocol(n_resamples=50)
    out = _run(protocol, data)
    doc = out.document
    n = len(data.labels)
    assert doc["split"]["method"] == "crossfit" and doc["split"]["folds"] == 4
    assert doc["split"]["fit_fraction"] is None
    assert doc["split"]["n_evaluation"] == doc["split"]["n_fit"] == n == doc["overall"]["n"]
    # the deployed temperatures are fitted on every study
    scanner = data.attributes["scanner"]
    everything = fit_group_temperatures(data.logits, data.labels, scanner, min_group_size=100)
    assert out.temperatures.to_dict() == everything.to_dict()
    # the evaluated probabilities: fold k with temperatures fitted on the other folds
    folds = out.split.fold
    applied = np.empty(n)
    for k in range(4):
        temps = fit_group_temperatures(
            data.logits[folds != k], data.labels[folds != k], scanner[folds != k], min_group_size=100
        )
        applied[folds == k] = temps.temperatures_for(scanner[folds == k])
    expected = metric("nll")(softmax(data.logits, temperature=applied), data.labels)
    assert doc["overall"]["metrics"]["nll"]["after"]["estimate"] == pytest.approx(expected, abs=1e-12)
    assert sorted(set(out.split.row_labels())) == ["fold 1", "fold 2", "fold 3", "fold 4"]


def test_a_cross_fitted_refit_gives_every_calibration_group_an_interval_and_is_deterministic(
    data: EvaluationData,
) -> None:
    protocol = _crossfit_protocol(n_resamples=50, refit=True)
    first = _run(protocol, data).document
    groups = {g["group"]: g for g in first["subgroups"]["scanner"]}
    for name in ("A", "B"):
        group = groups[name]
        assert group["refit"] is True
        t = group["temperature_interval"]
        assert t["low"] < group["temperature"] < t["high"]
        after = group["metrics"]["ece"]["after"]
        assert after["low"] <= after["estimate"] <= after["high"]
    order = np.random.default_rng(0).permutation(len(data.labels))
    shuffled = EvaluationData(
        logits=data.logits[order],
        labels=data.labels[order],
        patient_keys=data.patient_keys[order],
        attributes={k: v[order] for k, v in data.attributes.items()},
        class_names=data.class_names,
    )
    again = _run(protocol, shuffled).document
    # the rows' order moves no number beyond the last bit of a sum (as for one split)
    before, after = dict(_leaves(first["subgroups"])), dict(_leaves(again["subgroups"]))
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert after[key] == (
            pytest.approx(value, rel=1e-12, abs=1e-15) if isinstance(value, float) else value
        )
    assert again["verdict"] == first["verdict"]


def _leaves(value: object, path: str = ""):  # type: ignore[no-untyped-def]
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def test_a_cross_fitted_refit_with_empirical_bayes_shrinkage_is_refused_before_any_work(
    tmp_path: Path,
) -> None:
    text = DEMO_PROTOCOL.read_text().replace("  fallback: global\n", "  fallback: empirical_bayes\n")
    assert "fallback: empirical_bayes" in text and "by: crossfit" in text and "refit: true" in text
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProtocolError, match=r"evaluation\.bootstrap\.refit.*empirical-Bayes"):
        load_protocol(path)
    path.write_text(text.replace("refit: true", "refit: false"))
    assert load_protocol(path).protocol.calibration.fallback == "empirical_bayes"
