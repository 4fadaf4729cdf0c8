"""refit_method_bootstrap: before/after intervals of any recalibration method refitted in every resample.

Checked against refit_bootstrap (temperature scaling, the same resamples) and, resample by resample,
against an unweighted fit on the rows repeated by their multiplicity measured with the registry's metrics.
"""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.calibration import fit_method
from sitecal.errors import DataError
from sitecal.metrics import brier_score, negative_log_likelihood, softmax
from sitecal.stats import (
    BootstrapSpec,
    crossfit_bootstrap,
    fit_stream_seed,
    refit_bootstrap,
    refit_method_bootstrap,
)
from sitecal.stats._resample import draw_chunks, make_plan


def _sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3)) * 3.0
    p = softmax(z, temperature=2.0)
    return z, (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)


def test_temperature_scaling_gives_refit_bootstraps_replicates() -> None:
    z, y = _sample(400, 1)
    patients = np.repeat(np.arange(200), 2)
    kwargs = {
        "fit_clusters": patients[:200],
        "eval_clusters": patients[200:],
        "metrics": ("ece", "nll", "accuracy", "smooth_ece"),
        "spec": BootstrapSpec(n_resamples=50, seed=4),
    }
    res = refit_method_bootstrap(z[:200], y[:200], z[200:], y[200:], method="temperature", **kwargs)
    ref = refit_bootstrap(z[:200], y[:200], z[200:], y[200:], **kwargs)
    # before: the same draws (summed in another order, so equal to rounding)
    np.testing.assert_allclose(res.replicates[:, 0], ref.replicates[:, 0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(res.replicates[:, 1], ref.replicates[:, 1], rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(res.estimates, ref.estimates, rtol=1e-8)
    assert res.difference("nll").high == pytest.approx(ref.difference("nll").high, rel=1e-7)


def test_a_resample_is_a_fit_on_the_repeated_rows() -> None:
    z, y = _sample(300, 2)
    res = refit_method_bootstrap(
        z[:150], y[:150], z[150:], y[150:], fit_clusters=None, eval_clusters=None, method="dirichlet",
        metrics=("nll", "brier"), spec=BootstrapSpec(n_resamples=4, seed=9),
    )  # fmt: skip
    plan = make_plan(150, None, None, func="t")
    fit_w = next(draw_chunks(plan, seed=fit_stream_seed(9), n_resamples=4, chunk_size=4)).weights
    eval_w = next(draw_chunks(plan, seed=9, n_resamples=4, chunk_size=4)).weights
    for b in range(4):
        rows_f = np.repeat(np.arange(150), fit_w[b].astype(int))
        rows_e = np.repeat(np.arange(150, 300), eval_w[b].astype(int))
        after = fit_method("dirichlet", z[rows_f], y[rows_f]).probabilities(z[rows_e])[0]
        for j, probs in enumerate((softmax(z[rows_e]), after)):
            nll, brier = negative_log_likelihood(probs, y[rows_e]), brier_score(probs, y[rows_e])
            assert res.replicates[0, j, b] == pytest.approx(nll, rel=1e-6)
            assert res.replicates[1, j, b] == pytest.approx(brier, rel=1e-6)


def test_what_it_cannot_do_is_named() -> None:
    z, y = _sample(100, 3)
    common = {"fit_clusters": None, "eval_clusters": None}
    with pytest.raises(DataError, match="method='percentile'"):
        bca = BootstrapSpec(n_resamples=50, method="bca")
        refit_method_bootstrap(z, y, z, y, method="vector", spec=bca, **common)
    with pytest.raises(DataError, match="must be one of"):
        refit_method_bootstrap(z, y, z, y, method="platt", **common)
    with pytest.raises(DataError, match="recomputes its bins"):
        refit_method_bootstrap(z, y, z, y, method="vector", metrics=("ece_mass",), **common)


def test_cross_fitted_temperature_scaling_gives_crossfit_bootstraps_replicates() -> None:
    z, y = _sample(300, 5)
    patients = np.array([f"p{i // 2}" for i in range(300)])
    folds = (np.arange(300) // 2) % 3  # patients nest in folds
    spec = BootstrapSpec(n_resamples=40, seed=2)
    common = {
        "fit_clusters": patients, "eval_clusters": patients, "fit_folds": folds, "eval_folds": folds,
        "folds": 3, "metrics": ("nll", "ece"), "spec": spec,
    }  # fmt: skip
    res = refit_method_bootstrap(z, y, z, y, method="temperature", **common)
    ref = crossfit_bootstrap(z, y, z, y, **common)
    np.testing.assert_allclose(res.replicates, ref.replicates, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(res.estimates, ref.estimates, rtol=1e-8)


def test_cross_fitting_calibrates_each_fold_with_the_other_folds_fit() -> None:
    z, y = _sample(240, 6)
    folds = np.arange(240) % 4
    res = refit_method_bootstrap(
        z, y, z, y, fit_clusters=np.arange(240), eval_clusters=np.arange(240), fit_folds=folds,
        eval_folds=folds, folds=4, method="histogram", metrics=("brier",), spec=BootstrapSpec(n_resamples=5),
    )  # fmt: skip
    probs = np.empty((240, 3))
    for k in range(4):
        probs[folds == k] = fit_method("histogram", z[folds != k], y[folds != k]).probabilities(
            z[folds == k]
        )[0]
    assert res.get("brier", "after").estimate == pytest.approx(brier_score(probs, y), rel=1e-12)
    with pytest.raises(DataError, match="go together"):
        refit_method_bootstrap(z, y, z, y, fit_clusters=None, eval_clusters=None, method="vector", folds=4)
