r"""Empirical-Bayes pooling of per-group log temperatures: cluster-robust variances, REML, shrinkage.

The model (Efron & Morris 1975) is :math:`s_g \mid \sigma_g \sim N(\sigma_g, v_g)`,
:math:`\sigma_g \sim N(\mu, \tau^2)`, with :math:`s_g = \log \hat T_g` a group's own fit and
:math:`v_g` its sampling variance. :math:`\mu` and :math:`\tau^2` are estimated from the groups by
REML, and each group's log T is shrunk to the posterior mean

.. math:: s^*_g = \hat\mu + w_g (s_g - \hat\mu), \qquad w_g = \frac{\hat\tau^2}{\hat\tau^2 + v_g},

which is continuous in the group's size (no threshold). Everything here is vectorised over a leading
axis of resamples, so that a bootstrap can repeat the whole shrinkage in each resample
(:func:`sitecal.stats.bootstrap_group_temperatures`).

The REML iteration is :func:`sitecal.stats.random_effects_meta_analysis`'s (Newton–Raphson with Fisher
scoring where the observed information is not positive, step halving, a DerSimonian–Laird start, the
same tolerance), written over a batch; the calibration package cannot import ``sitecal.stats`` (which
imports it), so the tests check the two against each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.errors import DataError

__all__ = ["EmpiricalBayesShrinkage", "cluster_robust_variance", "shrink_log_temperatures"]

_REML_TOL = 1e-10  # as sitecal.stats._heterogeneity
_REML_MAXITER = 500
_REML_MAX_HALVINGS = 60
#: Elements per temporary (resamples x rows x classes) array of the variance computation.
_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class EmpiricalBayesShrinkage:
    r"""Result of :func:`shrink_log_temperatures` for ``R`` sets (resamples) of ``G`` groups.

    Attributes
    ----------
    mean : numpy.ndarray, shape (R,)
        REML estimate :math:`\hat\mu` of the mean log T across groups (NaN where not ``pooled``).
    tau2 : numpy.ndarray, shape (R,)
        REML estimate of the between-group variance of log T, >= 0 (NaN where not ``pooled``).
    weight : numpy.ndarray, shape (R, G)
        :math:`w_g = \tau^2 / (\tau^2 + v_g)` in [0, 1]; 0 for a group whose variance is infinite.
    shrunk : numpy.ndarray, shape (R, G)
        :math:`s^*_g = \mu + w_g (s_g - \mu)`.
    usable : numpy.ndarray of bool, shape (R, G)
        Groups with a finite, positive variance (the ones REML pools).
    pooled : numpy.ndarray of bool, shape (R,)
        At least two usable groups; elsewhere nothing is estimated and the caller falls back.
    """

    mean: NDArray[np.float64]
    tau2: NDArray[np.float64]
    weight: NDArray[np.float64]
    shrunk: NDArray[np.float64]
    usable: NDArray[np.bool_]
    pooled: NDArray[np.bool_]


def _restricted_loglik(
    theta: NDArray[np.float64], v: NDArray[np.float64], m: NDArray[np.float64], tau2: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Restricted log-likelihood of tau² per row (groups with ``m == 0`` left out)."""
    w = m / (v + tau2[:, None])
    sw = w.sum(axis=1)
    mu = (w * theta).sum(axis=1) / sw
    r = theta - mu[:, None]
    out: NDArray[np.float64] = -0.5 * (
        (m * np.log(v + tau2[:, None])).sum(axis=1) + np.log(sw) + (w * r * r).sum(axis=1)
    )
    return out


def _reml(
    theta: NDArray[np.float64], v: NDArray[np.float64], m: NDArray[np.float64], active: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """REML tau² per row, by the iteration of ``sitecal.stats._heterogeneity._reml_tau2``, row by row.

    ``theta`` and ``v`` (R, G) hold placeholders (0 and 1) where ``m`` (R, G) is 0. Rows not ``active``
    (fewer than two groups) return 0. Each row stops on its own criterion, so a row's result does not
    depend on the other rows of the batch.
    """
    k = m.sum(axis=1)
    w = m / v
    s1 = w.sum(axis=1)
    fixed = (w * theta).sum(axis=1) / s1
    q = (w * (theta - fixed[:, None]) ** 2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):  # k = 1 (a row not pooled): 0 / 0
        dl = np.maximum(0.0, (q - (k - 1.0)) / (s1 - (w * w).sum(axis=1) / s1))
    tau2 = np.where(active, dl, 0.0)
    mean_v = (m * v).sum(axis=1) / np.maximum(k, 1.0)
    ll = _restricted_loglik(theta, v, m, tau2)
    live = active.copy()
    for _ in range(_REML_MAXITER):  # a loop over Newton iterations (each row frozen on its own test)
        if not live.any():
            return tau2
        w = m / (v + tau2[:, None])
        sw = w.sum(axis=1)
        mu = (w * theta).sum(axis=1) / sw
        w2 = w * w
        s2 = w2.sum(axis=1)
        tr_p = sw - s2 / sw
        tr_pp = s2 - 2.0 * (w2 * w).sum(axis=1) / sw + (s2 / sw) ** 2
        u = w * (theta - mu[:, None])
        u_p_u = (w * u * u).sum(axis=1) - (w * u).sum(axis=1) ** 2 / sw
        observed = 2.0 * u_p_u - tr_pp
        step = ((u * u).sum(axis=1) - tr_p) / np.where(observed > 0, observed, tr_pp)
        new = np.maximum(0.0, tau2 + step)
        ll_new = _restricted_loglik(theta, v, m, new)
        worse = live & (ll_new < ll)
        halvings = 0
        while worse.any() and halvings < _REML_MAX_HALVINGS:  # a loop over step halvings
            step = np.where(worse, step / 2.0, step)
            new = np.where(worse, np.maximum(0.0, tau2 + step), new)
            ll_new = np.where(worse, _restricted_loglik(theta, v, m, new), ll_new)
            worse &= ll_new < ll
            halvings += 1
        change = np.abs(new - tau2)
        accept = live & (ll_new >= ll)
        tau2 = np.where(accept, new, tau2)
        ll = np.where(accept, ll_new, ll)
        live &= ~(change <= _REML_TOL * (tau2 + mean_v))
    if not live.any():
        return tau2
    raise DataError(
        f"The REML estimate of tau² of the log temperatures did not converge to {_REML_TOL:g} in "
        f"{_REML_MAXITER} Newton/Fisher-scoring iterations; check the groups' fits for extreme values, or "
        "use calibration.fallback 'global'."
    )


def shrink_log_temperatures(log_temperatures: ArrayLike, variances: ArrayLike) -> EmpiricalBayesShrinkage:
    r"""Shrink per-group log temperatures toward their REML mean, for one or many sets of groups.

    Parameters
    ----------
    log_temperatures : array_like, shape (G,) or (R, G)
        Each group's own fit :math:`s_g = \log \hat T_g` (one row per resample).
    variances : array_like, same shape
        Sampling variance :math:`v_g` of each :math:`s_g`. A variance that is not finite and > 0 (a fit
        on a bound of T, zero curvature, one patient) counts as infinite: the group gets weight 0, is
        left out of the REML estimate and is set to :math:`\hat\mu`.

    Returns
    -------
    EmpiricalBayesShrinkage
        Arrays with a leading axis of length ``R`` (1 for a 1-D input).

    Notes
    -----
    :math:`\hat\tau^2` maximises the restricted log-likelihood of the usable groups (as
    :func:`sitecal.stats.random_effects_meta_analysis` with ``method="reml"`` does, and equal to it to
    about 1e-12), :math:`\hat\mu = \sum w^*_g s_g / \sum w^*_g` with
    :math:`w^*_g = 1/(v_g + \hat\tau^2)`, and :math:`s^*_g = \hat\mu + w_g (s_g - \hat\mu)` with
    :math:`w_g = \hat\tau^2/(\hat\tau^2 + v_g)`. With :math:`\hat\tau^2 = 0` every group is set to
    :math:`\hat\mu`; a group with :math:`v_g \ll \hat\tau^2` keeps about its own value. Rows with fewer
    than two usable groups are not pooled (NaN; see ``pooled``).

    References
    ----------
    B. Efron, C. Morris. "Data analysis using Stein's estimator and its generalizations." JASA 70, 1975.
    W. Viechtbauer. "Bias and efficiency of meta-analytic variance estimators in the random-effects
    model." J Educ Behav Stat 30, 2005.

    Examples
    --------
    >>> res = shrink_log_temperatures([0.0, 0.2, -0.1, 0.3], [0.01, 0.02, 0.01, 0.02])
    >>> round(float(res.tau2[0]), 4), round(float(res.mean[0]), 4)
    (0.0181, 0.0773)
    >>> [round(float(w), 3) for w in res.weight[0]]
    [0.644, 0.474, 0.644, 0.474]
    """
    theta = np.asarray(log_temperatures, dtype=np.float64)
    var = np.asarray(variances, dtype=np.float64)
    if theta.shape != var.shape or theta.ndim not in (1, 2) or theta.shape[-1] < 1:
        raise DataError(
            "The 'log_temperatures' and 'variances' parameters of shrink_log_temperatures must have the same "
            f"shape, (G,) or (R, G) with G >= 1. Got {theta.shape} and {var.shape}."
        )
    theta, var = np.atleast_2d(theta), np.atleast_2d(var)
    usable = np.isfinite(var) & (var > 0) & np.isfinite(theta)
    pooled = usable.sum(axis=1) >= 2
    # rows not pooled compute on placeholders (every group in, theta 0, v 1) and are masked at the end
    m = np.where(pooled[:, None], usable, True).astype(np.float64)
    theta_safe = np.where(usable, theta, 0.0)
    v_safe = np.where(usable, var, 1.0)
    tau2 = _reml(theta_safe, v_safe, m, pooled)
    w_star = m / (v_safe + tau2[:, None])
    mean = (w_star * theta_safe).sum(axis=1) / w_star.sum(axis=1)
    weight = np.where(usable, tau2[:, None] / (tau2[:, None] + v_safe), 0.0)
    shrunk = mean[:, None] + weight * (theta_safe - mean[:, None])
    nan = np.full_like(mean, math.nan)
    return EmpiricalBayesShrinkage(
        mean=np.where(pooled, mean, nan),
        tau2=np.where(pooled, tau2, nan),
        weight=np.where(pooled[:, None], weight, math.nan),
        shrunk=np.where(pooled[:, None], shrunk, math.nan),
        usable=usable,
        pooled=pooled,
    )


def _per_row(
    d: NDArray[np.float64], s: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per-row d ell / ds and d2 ell / ds2 at each s (R,) for rows d (N, C): two (R, N) arrays."""
    beta = np.exp(-s)[:, None, None]
    z = beta * d[None]
    e = np.exp(z - z.max(axis=2, keepdims=True))
    p = e / e.sum(axis=2, keepdims=True)
    mean_d = (p * d[None]).sum(axis=2)
    centred = d[None] - mean_d[:, :, None]
    var_d = (p * centred * centred).sum(axis=2)
    bb = beta[:, :, 0]
    return -bb * mean_d, bb * bb * var_d + bb * mean_d


def cluster_robust_variance(
    d: NDArray[np.float64],
    cluster_of_row: NDArray[np.int64],
    n_clusters: int,
    log_temperature: NDArray[np.float64],
    cluster_weights: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    r"""Patient-cluster-robust (sandwich) variance of fitted log temperatures, shape (R,).

    Parameters
    ----------
    d : numpy.ndarray, shape (N, C)
        Logits minus each row's true-class logit (``_NLL(logits, labels).d``).
    cluster_of_row : numpy.ndarray of int64, shape (N,)
        Cluster (patient) number in ``[0, n_clusters)`` of each row.
    n_clusters : int
    log_temperature : numpy.ndarray, shape (R,)
        The fitted ``s`` of each weighting (the minimiser of its weighted NLL).
    cluster_weights : numpy.ndarray, shape (R, n_clusters), optional
        How many times each cluster counts (a bootstrap resample); default all 1.

    Returns
    -------
    numpy.ndarray, shape (R,)
        :math:`v = \sum_c w_c U_c^2 / H^2`, with :math:`U_c = \sum_{i \in c} \ell_i'(s)` the cluster's
        score and :math:`H = \sum_c w_c \sum_{i \in c} \ell_i''(s)` the curvature of the summed NLL
        (the CR0 sandwich; no small-sample factor). Infinite where ``H <= 0`` or fewer than two
        clusters carry weight (one cluster's score is the whole score, 0 at the optimum).
    """
    s = np.asarray(log_temperature, dtype=np.float64).reshape(-1)
    r = s.shape[0]
    w = np.ones((r, n_clusters)) if cluster_weights is None else cluster_weights
    n, c = d.shape
    order = np.argsort(cluster_of_row, kind="stable")
    starts = np.searchsorted(cluster_of_row[order], np.arange(n_clusters))
    out = np.empty(r)
    step = max(1, _CHUNK_ELEMENTS // max(n * c, 1))
    for start in range(0, r, step):  # a loop over chunks of weightings
        sl = slice(start, min(r, start + step))
        grad, hess = _per_row(d, s[sl])
        score = np.add.reduceat(grad.T[order], starts, axis=0).T  # (r, K)
        curv = np.add.reduceat(hess.T[order], starts, axis=0).T
        ws = w[sl]
        h = (ws * curv).sum(axis=1)
        meat = (ws * score * score).sum(axis=1)
        enough = np.count_nonzero(ws > 0, axis=1) >= 2
        with np.errstate(divide="ignore", invalid="ignore"):
            out[sl] = np.where(enough & (h > 0), meat / (h * h), math.inf)
    return out
