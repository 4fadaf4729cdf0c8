"""Recalibration methods (sitecal.calibration.fit_method): agreement with independent references.

References: scikit-learn (isotonic, CalibratedClassifierCV's renormalisation, unpenalised multinomial
logistic regression), netcal (histogram binning, beta calibration), scipy.optimize.minimize of the
written losses (vector scaling, ODIR, beta), and sitecal's own fit_temperature. Every comparison fits on
one synthetic sample and compares probabilities on another.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_softmax, logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from sitecal.calibration import (
    METHODS,
    fit_method,
    fit_temperature,
)
from sitecal.errors import DataError
from sitecal.metrics import softmax


def sample(n: int, k: int, seed: int, *, scale: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Overconfident logits: a true signal of 1.2 on the label's logit, then multiplied by ``scale``."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    z = rng.normal(0.0, 1.0, (n, k))
    z[np.arange(n), y] += 1.2
    return scale * z, y


class _Softmax(ClassifierMixin, BaseEstimator):
    """A 'classifier' whose predict_proba is the softmax of its input logits (for CalibratedClassifierCV)."""

    def __init__(self, n_classes: int = 3) -> None:
        self.n_classes = n_classes

    def fit(self, x: np.ndarray, y: np.ndarray) -> _Softmax:
        self.classes_ = np.arange(self.n_classes)
        return self

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return softmax(x)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.argmax(x, axis=1)


# -- isotonic vs scikit-learn ---------------------------------------------------------------------------
@pytest.mark.parametrize("weighted", [False, True])
def test_isotonic_binary_matches_sklearn(weighted: bool) -> None:
    z, y = sample(400, 2, 0)
    zt, _ = sample(300, 2, 1, scale=2.5)  # wider: some test scores fall outside the fitted range (clip)
    w = np.random.default_rng(2).uniform(0.0, 3.0, 400) if weighted else None
    w_arg = None if w is None else w[None, :]
    ours = fit_method("isotonic", z, y, w_arg).probabilities(zt)[0]
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)
    iso.fit(softmax(z)[:, 1], y, sample_weight=w)
    ref = iso.predict(softmax(zt)[:, 1])
    np.testing.assert_allclose(ours[:, 1], ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ours[:, 0], 1.0 - ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("weighted", [False, True])
def test_isotonic_multiclass_matches_calibrated_classifier_cv(weighted: bool) -> None:
    z, y = sample(300, 3, 3)
    zt, _ = sample(200, 3, 4)
    rng = np.random.default_rng(5)
    w = rng.integers(0, 4, 300).astype(float) if weighted else None
    ours = fit_method("isotonic", z, y, None if w is None else w[None, :]).probabilities(zt)[0]
    with warnings.catch_warnings():
        # sample weights reach the calibrators, which is all we compare
        warnings.filterwarnings("ignore", message="Since FrozenEstimator", category=UserWarning)
        cc = CalibratedClassifierCV(FrozenEstimator(_Softmax(3).fit(z, y)), method="isotonic")
        cc.fit(z, y, sample_weight=w)
    np.testing.assert_allclose(ours, cc.predict_proba(zt), rtol=0, atol=1e-10)


def test_isotonic_all_zero_row_becomes_uniform() -> None:
    # class 2 never occurs and classes 0 / 1 occur only at high scores of their own: a test row with
    # low scores for 0 and 1 gets 0 from all three calibrators -> CalibratedClassifierCV's uniform row
    z = np.log(np.array([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.3, 0.3, 0.4], [0.3, 0.3, 0.4]]))
    y = np.array([0, 1, 2, 2])
    out = fit_method("isotonic", z, y).probabilities(np.log([[0.1, 0.1, 0.8]]))[0]
    # class 2's calibrator: scores 0.05, 0.05, 0.4, 0.4 -> targets 0, 0, 1, 1; at 0.8 (clipped to 0.4) -> 1
    np.testing.assert_allclose(out, [[0.0, 0.0, 1.0]], atol=1e-12)
    y_none = np.array([0, 1, 0, 1])  # now class 2's calibrator is 0 everywhere
    out = fit_method("isotonic", z, y_none).probabilities(np.log([[0.04, 0.04, 0.92]]))[0]
    np.testing.assert_allclose(out, [[1 / 3, 1 / 3, 1 / 3]], atol=1e-12)


# -- histogram vs netcal --------------------------------------------------------------------------------
@pytest.mark.parametrize(("k", "n_bins"), [(2, 15), (2, 40), (3, 10)])
def test_histogram_matches_netcal(k: int, n_bins: int, capsys: pytest.CaptureFixture[str]) -> None:
    from netcal.binning import HistogramBinning

    z, y = sample(250, k, 6)  # 40 bins on 250 rows: empty bins (netcal's midpoint rule) occur
    zt, _ = sample(300, k, 7)
    ours = fit_method("histogram", z, y, n_bins=n_bins).probabilities(zt)[0]
    ref = HistogramBinning(bins=n_bins).fit(softmax(z), y).transform(softmax(zt))
    if k == 2:
        ref = np.stack([1.0 - ref, ref], axis=1)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
    capsys.readouterr()  # netcal prints its warnings


def test_histogram_empty_bin_gets_midpoint_and_edges_follow_netcal() -> None:
    # 4 bins, edges [0, .25, .5, .75, 1] (exact in binary). Fit rows: p = 0.5 exactly (logits [0, 0]),
    # label 1, and p ~ 0.1, label 0. At fit time bins are [e_j, e_{j+1}) (netcal's binned_statistic_dd),
    # so 0.5 is in bin 2; bins 1 and 3 are empty and get their midpoints 0.375 and 0.875.
    z = np.array([[0.0, 0.0], [0.0, np.log(0.1 / 0.9)]])
    fit = fit_method("histogram", z, [1, 0], n_bins=4)
    np.testing.assert_allclose(fit.params["bin_values"][0, 0], [0.0, 0.375, 1.0, 0.875], atol=0)
    # at predict time bins are (e_j, e_{j+1}] (netcal's digitize(right=True)): p = 0.5 falls in bin 1;
    # p = 0 exactly (logit -800) in the first bin; p = 1 exactly in the last
    probe = np.array([[0.0, 0.0], [0.0, 0.1], [0.0, -800.0], [0.0, 800.0]])
    out = fit.probabilities(probe)[0, :, 1]
    np.testing.assert_allclose(out, [0.375, 1.0, 0.0, 0.875], atol=0)


# -- matrix / dirichlet / vector vs references ----------------------------------------------------------
def _lr_reference(x: np.ndarray, y: np.ndarray, xt: np.ndarray) -> np.ndarray:
    lr = LogisticRegression(C=np.inf, solver="newton-cg", tol=1e-13, max_iter=10_000).fit(x, y)
    return lr.predict_proba(xt)


@pytest.mark.parametrize("k", [2, 4])
def test_unpenalised_matrix_scaling_is_multinomial_logistic_regression(k: int) -> None:
    z, y = sample(400, k, 8)
    zt, _ = sample(200, k, 9)
    ours = fit_method("matrix", z, y, reg_lambda=0.0, reg_mu=0.0).probabilities(zt)[0]
    np.testing.assert_allclose(ours, _lr_reference(z, y, zt), rtol=0, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3])
def test_unpenalised_dirichlet_is_logistic_regression_on_log_probabilities(k: int) -> None:
    z, y = sample(400, k, 10)
    zt, _ = sample(200, k, 11)
    eps = np.finfo(float).eps

    def features(v: np.ndarray) -> np.ndarray:
        return np.log(np.clip(softmax(v), eps, 1.0))

    ours = fit_method("dirichlet", z, y, reg_lambda=0.0, reg_mu=0.0).probabilities(zt)[0]
    np.testing.assert_allclose(ours, _lr_reference(features(z), y, features(zt)), rtol=0, atol=1e-6)


def _minimise(loss, x0: np.ndarray) -> np.ndarray:
    res = minimize(loss, x0, method="BFGS", jac=True, options={"gtol": 1e-11, "maxiter": 10_000})
    return res.x


def _nll_and_grad(eta: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean NLL of softmax(eta) and its gradient in eta (written out independently of the module)."""
    n = y.shape[0]
    onehot = np.eye(eta.shape[1])[y]
    value = float(np.mean(logsumexp(eta, axis=1) - eta[np.arange(n), y]))
    return value, (softmax(eta) - onehot) / n


def test_vector_scaling_matches_scipy_minimize() -> None:
    k = 3
    z, y = sample(400, k, 12)
    zt, _ = sample(200, k, 13)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = theta[:k], theta[k:]
        value, g_eta = _nll_and_grad(a * z + b, y)
        return value, np.concatenate([(g_eta * z).sum(axis=0), g_eta.sum(axis=0)])

    theta = _minimise(loss, np.concatenate([np.ones(k), np.zeros(k)]))
    ref = softmax(theta[:k] * zt + theta[k:])
    fit = fit_method("vector", z, y)
    np.testing.assert_allclose(fit.probabilities(zt)[0], ref, rtol=0, atol=1e-7)
    assert fit.params["b"][0, 0] == 0.0  # b_0 is pinned: the softmax is invariant to a common shift


@pytest.mark.parametrize("method", ["matrix", "dirichlet"])
def test_odir_matches_scipy_minimize_of_the_written_loss(method: str) -> None:
    k, lam, mu = 3, 0.3, 0.2  # strong penalties, so a wrong penalty formula would show
    z, y = sample(300, k, 14)
    zt, _ = sample(200, k, 15)
    eps = np.finfo(float).eps

    def feats(v: np.ndarray) -> np.ndarray:
        return np.log(np.clip(softmax(v), eps, 1.0)) if method == "dirichlet" else v

    x, xt = feats(z), feats(zt)
    off = ~np.eye(k, dtype=bool)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[: k * k].reshape(k, k), theta[k * k :]
        value, g_eta = _nll_and_grad(x @ w.T + b, y)
        value += lam * np.sum(w[off] ** 2) / (k * (k - 1)) + mu * np.sum(b**2) / k
        g_w = g_eta.T @ x + 2 * lam * np.where(off, w, 0.0) / (k * (k - 1))
        return value, np.concatenate([g_w.ravel(), g_eta.sum(axis=0) + 2 * mu * b / k])

    theta = _minimise(loss, np.concatenate([np.eye(k).ravel(), np.zeros(k)]))
    ref = softmax(xt @ theta[: k * k].reshape(k, k).T + theta[k * k :])
    fit = fit_method(method, z, y, reg_lambda=lam, reg_mu=mu)
    np.testing.assert_allclose(fit.probabilities(zt)[0], ref, rtol=0, atol=1e-7)
    np.testing.assert_allclose(fit.params["W"][0], theta[: k * k].reshape(k, k), atol=1e-5)


# -- beta -------------------------------------------------------------------------------------------------
def _beta_scipy(z: np.ndarray, y: np.ndarray, fixed_a: bool = False) -> np.ndarray:
    lp = log_softmax(z, axis=1)
    x = np.stack([lp[:, 1], -lp[:, 0], np.ones(len(y))], axis=1)
    if fixed_a:
        x = x[:, 1:]

    def loss(c: np.ndarray) -> tuple[float, np.ndarray]:
        eta = x @ c
        value, g_eta = _nll_and_grad(np.stack([np.zeros_like(eta), eta], axis=1), y)
        return value, x.T @ g_eta[:, 1]

    coef = _minimise(loss, np.r_[np.ones(x.shape[1] - 1), 0.0])
    return np.r_[0.0, coef] if fixed_a else coef


def test_beta_matches_scipy_minimize_and_netcal(capsys: pytest.CaptureFixture[str]) -> None:
    from netcal.scaling import BetaCalibration

    z, y = sample(500, 2, 16)
    zt, _ = sample(200, 2, 17)
    fit = fit_method("beta", z, y)
    a, b, c = _beta_scipy(z, y)
    assert a > 0 and b > 0  # the unconstrained branch
    np.testing.assert_allclose([fit.params[n][0] for n in "abc"], [a, b, c], atol=1e-6)
    lp = log_softmax(zt, axis=1)
    ref = 1.0 / (1.0 + np.exp(-(a * lp[:, 1] - b * lp[:, 0] + c)))
    ours = fit.probabilities(zt)[0, :, 1]
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-8)
    # netcal minimises the same NLL with L-BFGS-B on finite-difference gradients and its default
    # tolerances, so it stops short of the optimum (2e-7 in probability on this sample): compare loosely
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="independent is deprecated", category=DeprecationWarning)
        net = BetaCalibration().fit(softmax(z)[:, 1], y).transform(softmax(zt)[:, 1])
    np.testing.assert_allclose(ours, net, rtol=0, atol=1e-5)
    capsys.readouterr()


def test_beta_negative_a_is_fixed_at_zero_and_refitted() -> None:
    # labels depend on ln(1 - p) only, and decreasingly on p at the low end: the free fit has a < 0
    rng = np.random.default_rng(18)
    p = rng.uniform(0.01, 0.99, 600)
    q = np.where(p < 0.5, 0.6 - 0.5 * p, 0.1 + 0.9 * (p - 0.5))
    y = (rng.uniform(size=600) < q).astype(int)
    z = np.stack([np.log1p(-p), np.log(p)], axis=1)
    assert _beta_scipy(z, y)[0] < 0
    fit = fit_method("beta", z, y)
    _, b, c = _beta_scipy(z, y, fixed_a=True)
    assert fit.params["a"][0] == 0.0
    np.testing.assert_allclose([fit.params["b"][0], fit.params["c"][0]], [b, c], atol=1e-6)
    assert any("a was fixed at 0" in note for note in fit.notes)


def test_beta_rejects_more_than_two_classes() -> None:
    z, y = sample(50, 3, 19)
    with pytest.raises(DataError) as info:
        fit_method("beta", z, y)
    assert str(info.value) == (
        "The method 'beta' of fit_method is binary-only (it maps one probability p); got logits with "
        "K = 3 classes. For K > 2 use 'temperature', 'vector', 'matrix', 'dirichlet', 'histogram' or "
        "'isotonic'."
    )


# -- temperature ------------------------------------------------------------------------------------------
def test_temperature_is_fit_temperature() -> None:
    z, y = sample(300, 3, 20)
    zt, _ = sample(100, 3, 21)
    ref = fit_temperature(z, y)
    fit = fit_method("temperature", z, y)
    assert abs(fit.params["temperature"][0] - ref.temperature) <= 1e-8 * ref.temperature
    np.testing.assert_allclose(fit.probabilities(zt)[0], softmax(zt, temperature=ref.temperature), atol=1e-12)
    w = np.random.default_rng(22).integers(0, 3, (3, 300))
    batched = fit_method("temperature", z, y, w)
    for r in range(3):
        rows = np.repeat(np.arange(300), w[r])
        one = fit_temperature(z[rows], y[rows]).temperature
        assert abs(batched.params["temperature"][r] - one) <= 1e-8 * one


# -- batched equals one at a time -------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [2, 3])
def test_weighted_batch_equals_separate_fits_on_repeated_rows(method: str, k: int) -> None:
    if method == "beta" and k > 2:
        pytest.skip("beta is binary only")
    z, y = sample(120, k, 23)
    zt, _ = sample(60, k, 24)
    w = np.random.default_rng(25).multinomial(120, np.full(120, 1 / 120), size=4)
    batched = fit_method(method, z, y, w).probabilities(zt)
    assert batched.shape == (4, 60, k)
    for r in range(4):
        rows = np.repeat(np.arange(120), w[r])
        single = fit_method(method, z[rows], y[rows]).probabilities(zt)[0]
        np.testing.assert_allclose(batched[r], single, rtol=0, atol=1e-8)
