"""Disparities after calibration with every temperature refitted per resample, against a slow reference:
each resample's temperatures fitted by fit_temperature on the drawn patients' rows repeated, each group's
metric computed on the drawn evaluated rows repeated."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sitecal.calibration import fit_temperature
from sitecal.errors import DataError
from sitecal.metrics import expected_calibration_error, negative_log_likelihood, softmax
from sitecal.stats import BootstrapSpec, disparity_intervals, disparity_intervals_each
from sitecal.stats._disparity_refit import (
    TemperatureFit,
    TemperatureReplicates,
    refit_disparity_intervals,
    refit_disparity_stages,
)
from sitecal.stats._refit_result import fit_stream_seed
from sitecal.stats._resample import draw_chunks, make_plan

B = 25
METRICS = {"ece": lambda p, y: expected_calibration_error(p, y, n_bins=10), "nll": negative_log_likelihood}


def _cohort(seed: int, n_patients: int) -> dict[str, np.ndarray]:
    """Patients with one to three studies; scanner (calibration group) and sex per patient."""
    rng = np.random.default_rng(seed)
    per = rng.integers(1, 4, n_patients)
    patient = np.repeat(np.array([f"p{i:03d}" for i in range(n_patients)]), per)
    scanner = np.repeat(rng.choice(["A", "B"], n_patients), per)
    sex = np.repeat(rng.choice(["F", "M"], n_patients), per)
    z = rng.normal(size=(patient.shape[0], 3)) * np.where(scanner == "A", 2.5, 1.5)[:, None]
    p_true = softmax(z / np.where(scanner == "A", 1.6, 1.1)[:, None])
    y = (p_true.cumsum(axis=1) < rng.random((patient.shape[0], 1))).sum(axis=1).clip(0, 2)
    return {"patient": patient, "scanner": scanner, "sex": sex, "z": z, "y": y}


def _reference_gaps(
    d: dict[str, np.ndarray],
    eval_rows: np.ndarray,
    fits: list[tuple[np.ndarray, np.ndarray]],
    fit_weights: np.ndarray,
    eval_weights: np.ndarray,
    metric: str,
) -> np.ndarray:
    """Each resample's gap of each sex to the rest: (B, 2), refitting by repeating rows."""
    patients = np.unique(d["patient"])
    code = np.searchsorted(patients, d["patient"])
    out = np.empty((fit_weights.shape[0], 2))
    for b in range(fit_weights.shape[0]):
        t = np.full(d["y"].shape[0], np.nan)
        for fit_rows, calibrated in fits:
            repeat = fit_weights[b, code[fit_rows]].astype(int)
            zf = np.repeat(d["z"][fit_rows], repeat, axis=0)
            yf = np.repeat(d["y"][fit_rows], repeat)
            t[calibrated] = fit_temperature(zf, yf).temperature
        rows = np.flatnonzero(eval_rows)
        repeat = eval_weights[b, code[rows]].astype(int)
        probs = np.repeat(softmax(d["z"][rows] / t[rows][:, None]), repeat, axis=0)
        y, sex = np.repeat(d["y"][rows], repeat), np.repeat(d["sex"][rows], repeat)
        for j, g in enumerate(("F", "M")):
            out[b, j] = METRICS[metric](probs[sex == g], y[sex == g]) - METRICS[metric](
                probs[sex != g], y[sex != g]
            )
    return out


def _weights_over_all(
    plan: Any, row_patients: np.ndarray, weights: np.ndarray, patients: np.ndarray
) -> np.ndarray:
    """A plan's cluster weights as weights of every patient (a plan numbers its clusters within strata)."""
    out = np.zeros((weights.shape[0], patients.shape[0]))
    for cluster, patient in zip(plan.cluster_of_row, row_patients, strict=True):
        out[:, np.searchsorted(patients, patient)] = weights[:, cluster]
    return out


@pytest.mark.parametrize("metric", ["ece", "nll"])
def test_one_split_refits_each_scanner_on_its_drawn_fit_patients(metric: str) -> None:
    d = _cohort(1, 160)
    patients = np.unique(d["patient"])
    fit_patients = patients[::2]
    fit = np.isin(d["patient"], fit_patients)
    held = ~fit
    fits = [(fit & (d["scanner"] == g), held & (d["scanner"] == g)) for g in ("A", "B")]
    spec = BootstrapSpec(n_resamples=B, seed=3, chunk_size=7)
    temps = TemperatureReplicates(
        d["z"][fit],
        d["y"][fit],
        d["patient"][fit],
        d["patient"][held],
        [TemperatureFit(f[fit], e[held]) for f, e in fits],
        shared=False,
        spec=spec,
    )
    strata = d["sex"][held]
    res = refit_disparity_intervals(
        d["z"][held],
        d["y"][held],
        d["sex"][held],
        clusters=d["patient"][held],
        strata=strata,
        temperatures=temps,
        metrics=[metric],
        n_bins=10,
    )[metric]
    # the reference draws: the fit patients from the fit stream, the evaluated ones stratified by sex
    fit_plan = make_plan(int(fit.sum()), d["patient"][fit], None, func="t")
    (fit_draws,) = draw_chunks(fit_plan, seed=fit_stream_seed(3), n_resamples=B, chunk_size=B)
    eval_plan = make_plan(int(held.sum()), d["patient"][held], strata, func="t")
    (eval_draws,) = draw_chunks(eval_plan, seed=3, n_resamples=B, chunk_size=B)
    gaps = _reference_gaps(
        d,
        held,
        fits,
        _weights_over_all(fit_plan, d["patient"][fit], fit_draws.weights, patients),
        _weights_over_all(eval_plan, d["patient"][held], eval_draws.weights, patients),
        metric,
    )
    for j, g in enumerate(("F", "M")):
        got = res.versus_rest[g]
        assert got.standard_error == pytest.approx(gaps[:, j].std(ddof=1), rel=1e-7, abs=1e-10)
        assert got.bias == pytest.approx(gaps[:, j].mean() - got.estimate, rel=1e-7, abs=1e-10)
    # the temperature's uncertainty widens the gaps' intervals against T held fixed (same evaluated draws)
    fixed = disparity_intervals(
        softmax(d["z"][held], temperature=np.exp(temps.s0)),
        d["y"][held],
        d["sex"][held],
        clusters=d["patient"][held],
        strata=strata,
        metric=metric,
        n_bins=10,
        spec=spec,
    )
    for g in ("F", "M"):
        assert res.versus_rest[g].estimate == pytest.approx(fixed.versus_rest[g].estimate, abs=1e-12)
        assert res.per_group[g].estimate == pytest.approx(fixed.per_group[g].estimate, abs=1e-12)
    assert res.range.standard_error != fixed.range.standard_error


def test_cross_fitting_refits_every_fold_on_the_same_patient_draw() -> None:
    d = _cohort(2, 150)
    patients = np.unique(d["patient"])
    fold_of_patient = np.arange(patients.shape[0]) % 3
    fold = fold_of_patient[np.searchsorted(patients, d["patient"])]
    every = np.ones(fold.shape[0], dtype=bool)
    # scanner A has its own temperature per fold; B takes each fold's global one
    fits = [((fold != k) & (d["scanner"] == "A"), (fold == k) & (d["scanner"] == "A")) for k in range(3)]
    fits += [(fold != k, (fold == k) & (d["scanner"] == "B")) for k in range(3)]
    spec = BootstrapSpec(n_resamples=B, seed=5)
    temps = TemperatureReplicates(
        d["z"],
        d["y"],
        d["patient"],
        d["patient"],
        [TemperatureFit(f, e) for f, e in fits],
        shared=True,
        spec=spec,
    )
    strata = d["sex"]
    res = refit_disparity_intervals(
        d["z"], d["y"], d["sex"], clusters=d["patient"], strata=strata, temperatures=temps, metrics=["nll"]
    )["nll"]
    plan = make_plan(fold.shape[0], d["patient"], strata, func="t")
    (draws,) = draw_chunks(plan, seed=5, n_resamples=B, chunk_size=B)
    weights = _weights_over_all(plan, d["patient"], draws.weights, patients)
    gaps = _reference_gaps(d, every, fits, weights, weights, "nll")
    for j, g in enumerate(("F", "M")):
        assert res.versus_rest[g].standard_error == pytest.approx(gaps[:, j].std(ddof=1), rel=1e-7)


def test_every_evaluated_row_needs_exactly_one_temperature() -> None:
    d = _cohort(3, 30)
    every = np.ones(d["y"].shape[0], dtype=bool)
    with pytest.raises(DataError, match="exactly one temperature"):
        TemperatureReplicates(
            d["z"],
            d["y"],
            d["patient"],
            d["patient"],
            [TemperatureFit(every, every), TemperatureFit(every, every)],
            shared=True,
            spec=BootstrapSpec(n_resamples=B),
        )


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_the_fixed_stages_on_the_refits_draws_are_the_comparison_alone_bit_for_bit(method: str) -> None:
    """One draw serves both stages: each result is what its own function gives alone."""
    d = _cohort(4, 120)
    patients = np.unique(d["patient"])
    fold = (np.searchsorted(patients, d["patient"]) % 3).astype(np.int64)
    fits = [TemperatureFit(fold != k, fold == k) for k in range(3)]
    spec = BootstrapSpec(n_resamples=B, seed=3, method=method)
    temps = TemperatureReplicates(d["z"], d["y"], d["patient"], d["patient"], fits, shared=True, spec=spec)
    kw: dict[str, Any] = {
        "clusters": d["patient"],
        "strata": d["sex"],
        "metrics": ["ece", "nll"],
        "n_bins": 10,
    }
    before = softmax(d["z"])
    refitted, fixed = refit_disparity_stages(
        d["z"], d["y"], d["sex"], temperatures=temps, fixed={"before": before}, **kw
    )
    alone = disparity_intervals_each(before, d["y"], d["sex"], spec=spec, **kw)
    assert fixed["before"] == alone  # every interval, estimate and standard error
    assert refitted == refit_disparity_intervals(d["z"], d["y"], d["sex"], temperatures=temps, **kw)
    assert fixed["before"]["nll"].range.standard_error > 0
