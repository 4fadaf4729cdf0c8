r"""Heterogeneity across groups (sites): random-effects meta-analysis (REML with HKSJ, or DerSimonian–Laird).

Given one effect per group (e.g. :math:`\log(O/E)` per site) and its within-group variance,
:func:`random_effects_meta_analysis` returns Cochran's Q with its chi-squared p-value, I², the
between-group variance tau², the random-effects pooled effect with its interval and a prediction
interval for a new group's true effect, in one frozen result. Two methods:

- ``"reml"`` (default): tau² by restricted maximum likelihood and the Hartung–Knapp–Sidik–Jonkman
  (HKSJ) t interval with the ``max(1, q)`` modification, which keeps at least its nominal coverage
  with the 3–6 sites a validation has (``benchmarks/coverage_meta_analysis.md``);
- ``"dl"``: tau² by the DerSimonian–Laird moment estimator and the normal (Wald) interval, which is
  too narrow with few groups; kept for comparison with earlier results.

Notes
-----
In the notation of :func:`random_effects_meta_analysis`, the REML estimate maximises the restricted
log-likelihood

.. math:: \ell_R(\tau^2) = -\tfrac12\Bigl[\sum \log(v_i + \tau^2) + \log \sum w_i^*
          + \sum w_i^* (\theta_i - \hat\theta_R)^2\Bigr]

over :math:`\tau^2 \ge 0`, by Newton–Raphson (Fisher scoring where the observed information is not
positive) started from :math:`\hat\tau^2_{DL}` (steps that lower :math:`\ell_R` are halved, steps
below 0 cut at 0) until the change of :math:`\tau^2` is at most
:math:`10^{-10}(\tau^2 + \bar v)`; otherwise a :class:`~sitecal.errors.DataError` is raised.

- ``"dl"``: the Wald interval matches
  ``statsmodels.stats.meta_analysis.combine_effects(..., method_re="chi2")``.
- ``"reml"``: the modified HKSJ variance is R's pimeta ``pima_htsreml(vartype="HK")``'s, and
  statsmodels' ``combine_effects`` ``var_hksj_re`` floored at its ``var_re`` (statsmodels has no
  REML; its "iterated" is Paule–Mandel). The plain
  HKSJ interval (``q`` not floored) is narrower than the Wald one whenever ``q < 1``, and with
  3–6 sites of unequal size it covered the pooled mean 90.7–93.6 % instead of 95 %
  (``benchmarks/coverage_meta_analysis.md``); the floor (Knapp & Hartung 2003; Jackson, Law,
  Rücker & Schwarzer 2017) brings it to at least 93.2 %, at the price of over-coverage (up to
  about 100 %) when tau² is small. With one group the HKSJ standard error and interval are NaN.

The prediction interval for the true effect of a new group (Higgins, Thompson & Spiegelhalter
2009; Riley et al. 2011) uses the method's own SE (the modified HKSJ for ``"reml"``,
as Partlett & Riley 2017 and R's pimeta ``htsreml``; Wald for ``"dl"``). With 4–6
sites and heterogeneity it covers a new site's true effect less often than its level says (87–93 %
for a 95 % interval when tau² is about the sites' sampling variances or larger), because
REML underestimates tau² with few sites and the interval ignores that uncertainty; with 3 sites
its t_1 quantile makes it very wide (99–100 %). See ``benchmarks/coverage_meta_analysis.md``.
The p-value of Q is the chi-squared upper tail with k - 1 degrees of freedom; with few groups Q
has little power, so a large p-value is not evidence of homogeneity.
I² is always computed from Q. With one group there is no heterogeneity to measure: Q = 0, p-value
and I² NaN, tau² 0 (see ``note``).

References
----------
R. DerSimonian, N. Laird. "Meta-analysis in clinical trials." Control Clin Trials 7, 1986.
J. P. T. Higgins, S. G. Thompson. "Quantifying heterogeneity in a meta-analysis." Stat Med 21,
2002. W. Viechtbauer. "Bias and efficiency of meta-analytic variance estimators in the
random-effects model." J Educ Behav Stat 30, 2005. J. Hartung, G. Knapp. "A refined method for
the meta-analysis of controlled clinical trials with binary outcome." Stat Med 20, 2001.
K. Sidik, J. N. Jonkman. "A simple confidence interval for meta-analysis." Stat Med 21, 2002.
J. IntHout, J. P. A. Ioannidis, G. F. Borm. "The Hartung-Knapp-Sidik-Jonkman method for random
effects meta-analysis is straightforward and considerably outperforms the standard
DerSimonian-Laird method." BMC Med Res Methodol 14, 2014. J. P. T. Higgins, S. G. Thompson,
D. J. Spiegelhalter. "A re-evaluation of random-effects meta-analysis." J R Stat Soc A 172, 2009.
G. Knapp, J. Hartung. "Improved tests for a random effects meta-regression with a single
covariate." Stat Med 22, 2003. D. Jackson, M. Law, G. Rücker, G. Schwarzer. "The
Hartung-Knapp modification for random-effects meta-analysis: A useful refinement but are there
any residual concerns?" Stat Med 36, 2017. C. Partlett, R. D. Riley. "Random effects
meta-analysis: Coverage performance of 95% confidence and prediction intervals following REML
estimation." Stat Med 36, 2017.
R. D. Riley, J. P. T. Higgins, J. J. Deeks. "Interpretation of random effects meta-analyses."
BMJ 342, 2011. T. P. A. Debray et al. "A guide to systematic review and meta-analysis of
prediction model performance." BMJ 356, 2017 (pooling log O/E).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri
from scipy.stats import chi2
from scipy.stats import t as student_t

from sitecal._validation import check_float
from sitecal.errors import DataError

__all__ = ["RandomEffectsResult", "random_effects_meta_analysis"]

_REML_TOL = 1e-10  # on the change of tau², relative to tau² + mean within-group variance
_REML_MAXITER = 500
_REML_MAX_HALVINGS = 60


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class RandomEffectsResult:
    """A random-effects meta-analysis (REML with HKSJ interval, or DerSimonian–Laird with Wald interval).

    Attributes
    ----------
    k : int
        Groups pooled.
    estimate, standard_error, low, high : float
        Random-effects pooled effect, its standard error and the ``level`` interval
        ``estimate ± c * standard_error`` (on the scale of the effects given). For ``interval="hksj"``
        the standard error is the modified HKSJ one, ``sqrt(max(1, q) / sum w*_i)``, and ``c`` the t
        quantile with k - 1 degrees of freedom
        (standard error and interval NaN when ``k < 2``); for ``interval="wald"`` the standard error
        is ``(sum w*_i)^(-1/2)`` and ``c`` the normal quantile.
    level : float
    fixed_estimate, fixed_standard_error : float
        Inverse-variance (common-effect) pooled effect and its standard error.
    q : float
        Cochran's Q.
    df : int
        ``k - 1``.
    p_value : float
        ``P(chi2_df > Q)``; NaN when ``k < 2``.
    i2 : float
        I² = max(0, (Q - df) / Q) in [0, 1] (from Q, whatever the method); 0 when Q = 0; NaN when
        ``k < 2``.
    tau2 : float
        Between-group variance, >= 0: REML estimate (``method="reml"``) or DerSimonian–Laird
        max(0, (Q - df) / (S1 - S2 / S1)) (``method="dl"``); 0 when ``k < 2``.
    weights : numpy.ndarray, shape (k,)
        Random-effects weights ``1 / (v_i + tau2)``, normalised to sum to 1.
    note : str
        "" or what could not be estimated.
    method : str
        ``"reml"`` or ``"dl"``: how tau² was estimated.
    interval : str
        ``"hksj"`` (with ``method="reml"``; the ``max(1, q)``-modified HKSJ) or ``"wald"`` (with
        ``method="dl"``): how ``standard_error``, ``low`` and ``high`` were computed.
    prediction_low, prediction_high : float
        ``level`` prediction interval for the true effect of a new group,
        ``estimate ± t_{k-2} * sqrt(tau2 + standard_error²)``; NaN when ``k < 3`` (see ``note``).
    """

    k: int
    estimate: float
    standard_error: float
    low: float
    high: float
    level: float
    fixed_estimate: float
    fixed_standard_error: float
    q: float
    df: int
    p_value: float
    i2: float
    tau2: float
    weights: NDArray[np.float64]
    note: str = ""
    method: str = "dl"
    interval: str = "wald"
    prediction_low: float = math.nan
    prediction_high: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (NaN becomes None)."""
        return {
            "k": self.k,
            "estimate": _num(self.estimate),
            "standard_error": _num(self.standard_error),
            "low": _num(self.low),
            "high": _num(self.high),
            "level": self.level,
            "fixed_estimate": _num(self.fixed_estimate),
            "fixed_standard_error": _num(self.fixed_standard_error),
            "q": _num(self.q),
            "df": self.df,
            "p_value": _num(self.p_value),
            "i2": _num(self.i2),
            "tau2": _num(self.tau2),
            "weights": [float(w) for w in self.weights],
            "note": self.note,
            "method": self.method,
            "interval": self.interval,
            "prediction_low": _num(self.prediction_low),
            "prediction_high": _num(self.prediction_high),
        }


def _restricted_loglik(theta: NDArray[np.float64], v: NDArray[np.float64], tau2: float) -> float:
    """Restricted log-likelihood of tau² (up to a constant) in the random-effects model."""
    w = 1.0 / (v + tau2)
    sw = float(w.sum())
    mu = float(np.sum(w * theta) / sw)
    return -0.5 * (float(np.sum(np.log(v + tau2))) + math.log(sw) + float(np.sum(w * (theta - mu) ** 2)))


def _reml_tau2(theta: NDArray[np.float64], v: NDArray[np.float64], start: float, *, func: str) -> float:
    """REML tau² >= 0 by Newton–Raphson / Fisher scoring from ``start``, halving steps that lower it.

    With ``w = 1 / (v + tau²)``, ``r = theta - mu(tau²)``, ``P = W - w w' / sum(w)`` and ``u = P theta =
    w r``, the score is ``(u'u - tr P) / 2``, the expected (Fisher) information ``tr(P P) / 2`` and the
    observed information ``u'P u - tr(P P) / 2`` (Viechtbauer 2005). The step divides the score by the
    observed information where that is positive (Newton: quadratic convergence; plain Fisher scoring
    can oscillate for many iterations when the two informations differ), else by the Fisher
    information. A step below 0 is cut at 0 (the maximum lies on the boundary when the score there is
    negative).
    """
    tau2 = max(0.0, start)
    ll = _restricted_loglik(theta, v, tau2)
    for _ in range(_REML_MAXITER):
        w = 1.0 / (v + tau2)
        sw = float(w.sum())
        mu = float(np.sum(w * theta) / sw)
        w2 = w * w
        s2 = float(w2.sum())
        tr_p = sw - s2 / sw
        tr_pp = s2 - 2.0 * float(np.sum(w2 * w)) / sw + (s2 / sw) ** 2
        u = w * (theta - mu)
        u_p_u = float(np.sum(w * u * u)) - float(np.sum(w * u)) ** 2 / sw
        observed = 2.0 * u_p_u - tr_pp
        step = (float(np.sum(u * u)) - tr_p) / (observed if observed > 0 else tr_pp)
        new = max(0.0, tau2 + step)
        ll_new = _restricted_loglik(theta, v, new)
        halvings = 0
        while ll_new < ll and halvings < _REML_MAX_HALVINGS:
            step /= 2.0
            new = max(0.0, tau2 + step)
            ll_new = _restricted_loglik(theta, v, new)
            halvings += 1
        change = abs(new - tau2)
        if ll_new >= ll:
            tau2, ll = new, ll_new
        if change <= _REML_TOL * (tau2 + float(np.mean(v))):
            return tau2
    raise DataError(
        f"The REML estimate of tau² in {func} did not converge to {_REML_TOL:g} in {_REML_MAXITER} "
        f"Newton/Fisher-scoring iterations (last tau² {tau2:.6g}); check the 'effects' and 'variances' for "
        "extreme values, or pass method='dl'."
    )


def _hksj_standard_error(theta: NDArray[np.float64], w_star: NDArray[np.float64], estimate: float) -> float:
    """Modified HKSJ standard error ``sqrt(max(1, q) / sum w*_i)``; NaN when k < 2.

    ``q = sum w*_i (theta_i - estimate)² / (k - 1)`` is the plain HKSJ scale factor; flooring it at 1
    (Knapp & Hartung 2003; Jackson et al. 2017) keeps the interval at least as wide as the Wald one
    when the effects agree more closely than their variances predict.
    """
    k = int(theta.size)
    if k < 2:
        return math.nan
    sw = float(w_star.sum())
    q = float(np.sum(w_star * (theta - estimate) ** 2)) / (k - 1)
    return math.sqrt(max(1.0, q) / sw)


def random_effects_meta_analysis(
    effects: ArrayLike,
    variances: ArrayLike,
    *,
    level: float = 0.95,
    method: Literal["reml", "dl"] = "reml",
) -> RandomEffectsResult:
    r"""Random-effects meta-analysis of one effect per group (REML + HKSJ, or DerSimonian–Laird).

    Parameters
    ----------
    effects : array_like, shape (k,), k >= 1
        Effect per group on an additive scale (e.g. :math:`\log(O/E)`), finite.
    variances : array_like, shape (k,)
        Within-group sampling variance of each effect, finite and > 0.
    level : float, default 0.95
        Two-sided level of the pooled interval and of the prediction interval.
    method : {"reml", "dl"}, default "reml"
        ``"reml"``: tau² by restricted maximum likelihood and the Hartung–Knapp–Sidik–Jonkman t
        interval. ``"dl"``: tau² by DerSimonian–Laird and the normal (Wald) interval (the results of
        this function before ``method`` existed).

    Returns
    -------
    RandomEffectsResult

    Raises
    ------
    DataError
        If the inputs are malformed, ``method`` is unknown, or the REML iteration does not converge.

    Notes
    -----
    With :math:`w_i = 1 / v_i`, :math:`\hat\theta_F = \sum w_i \theta_i / \sum w_i`,
    :math:`Q = \sum w_i (\theta_i - \hat\theta_F)^2`, :math:`S_1 = \sum w_i`, :math:`S_2 = \sum w_i^2`:

    .. math:: \hat\tau^2_{DL} = \max\Bigl(0, \frac{Q - (k - 1)}{S_1 - S_2 / S_1}\Bigr), \qquad
              I^2 = \max\Bigl(0, \frac{Q - (k - 1)}{Q}\Bigr).

    In both methods the pooled effect is :math:`\hat\theta_R = \sum w_i^* \theta_i / \sum w_i^*` with
    :math:`w_i^* = 1 / (v_i + \hat\tau^2)`. ``"dl"``: :math:`\hat\tau^2_{DL}`, standard error
    :math:`(\sum w_i^*)^{-1/2}`, interval :math:`\hat\theta_R \pm z_{(1+\mathrm{level})/2}\,\mathrm{SE}`
    (``interval="wald"``). ``"reml"``: the REML :math:`\hat\tau^2` (Newton–Raphson from
    :math:`\hat\tau^2_{DL}`), the modified HKSJ standard error
    :math:`\mathrm{SE}_{HK}^2 = \max(1, q) / \sum w_i^*` with
    :math:`q = \sum w_i^* (\theta_i - \hat\theta_R)^2 / (k - 1)`, and interval
    :math:`\hat\theta_R \pm t_{k-1,(1+\mathrm{level})/2}\,\mathrm{SE}_{HK}` (``interval="hksj"``).
    The prediction interval for a new group's true effect is :math:`\hat\theta_R \pm
    t_{k-2,(1+\mathrm{level})/2} \sqrt{\hat\tau^2 + \mathrm{SE}^2}` with the method's own SE; NaN
    when k < 3. The module docstring gives the REML iteration, the libraries each method matches,
    the coverage measured with 3–6 sites (``benchmarks/coverage_meta_analysis.md``) and the references
    (DerSimonian & Laird 1986; Viechtbauer 2005; Hartung & Knapp 2001; Sidik & Jonkman 2002; Knapp &
    Hartung 2003; Higgins, Thompson & Spiegelhalter 2009).

    Examples
    --------
    >>> res = random_effects_meta_analysis([0.0, 0.2, -0.1], [0.01, 0.02, 0.01], method="dl")
    >>> round(res.q, 4), res.df, round(res.tau2, 5), res.interval
    (3.0, 2, 0.00625, 'wald')
    >>> res = random_effects_meta_analysis([0.0, 0.2, -0.1, 0.3], [0.01, 0.02, 0.01, 0.02])
    >>> res.method, res.interval, round(res.tau2, 4), round(res.estimate, 4)
    ('reml', 'hksj', 0.0181, 0.0773)
    >>> bool(res.prediction_low < res.low < res.estimate < res.high < res.prediction_high)
    True
    """
    func = "random_effects_meta_analysis"
    lvl = check_float(level, name="level", func=func, low=0.0, high=1.0)
    if not isinstance(method, str) or method not in ("reml", "dl"):
        raise DataError(f"The 'method' parameter of {func} must be 'reml' or 'dl'. Got {method!r}.")
    theta, v = _checked_effects(effects, variances, func=func)
    return _random_effects(theta, v, lvl, method, func=func)


def _checked_effects(
    effects: ArrayLike, variances: ArrayLike, *, func: str
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The effects and variances as 1-D float arrays of the same length >= 1, finite, variances > 0."""
    theta = np.asarray(effects, dtype=np.float64).reshape(-1)
    v = np.asarray(variances, dtype=np.float64).reshape(-1)
    if theta.shape != v.shape or theta.size < 1:
        raise DataError(
            f"The 'effects' and 'variances' parameters of {func} must be 1-D of the same length >= 1. "
            f"Got shapes {np.shape(effects)} and {np.shape(variances)}."
        )
    if not (np.isfinite(theta).all() and np.isfinite(v).all() and (v > 0).all()):
        raise DataError(
            f"The 'effects' of {func} must be finite and its 'variances' finite and > 0; leave out "
            "groups whose effect or variance cannot be estimated."
        )
    return theta, v


@dataclass(frozen=True)
class _CommonEffect:
    """The inverse-variance (common-effect) pooling, Cochran's Q and what Q gives: p-value, I², DL tau²."""

    estimate: float
    standard_error: float
    q: float
    df: int
    p_value: float  # NaN with one group
    i2: float  # NaN with one group
    tau2_dl: float  # 0 with one group


def _common_effect(theta: NDArray[np.float64], v: NDArray[np.float64]) -> _CommonEffect:
    """Pool with weights ``1 / v``; Q's p-value, I² and the DerSimonian–Laird tau² need two groups."""
    k = int(theta.size)
    w = 1.0 / v
    s1 = float(w.sum())
    fixed = float(np.sum(w * theta) / s1)
    q = float(np.sum(w * (theta - fixed) ** 2))
    df = k - 1
    if k < 2:
        p_value = i2 = math.nan
        tau2 = 0.0
    else:
        p_value = float(chi2.sf(q, df))
        i2 = max(0.0, (q - df) / q) if q > 0 else 0.0
        tau2 = max(0.0, (q - df) / (s1 - float(np.sum(w * w)) / s1))
    return _CommonEffect(fixed, math.sqrt(1.0 / s1), q, df, p_value, i2, tau2)


def _pooled_standard_error(
    theta: NDArray[np.float64], w_star: NDArray[np.float64], estimate: float, lvl: float, method: str
) -> tuple[float, float]:
    """The pooled effect's standard error and the quantile that multiplies it in its interval.

    ``"dl"``: the Wald standard error and the normal quantile; ``"reml"``: the modified HKSJ standard
    error and the t quantile with k - 1 degrees of freedom (both NaN with one group).
    """
    if method == "dl":
        return math.sqrt(1.0 / float(w_star.sum())), float(ndtri((1.0 + lvl) / 2.0))
    k = int(theta.size)
    crit = float(student_t.ppf((1.0 + lvl) / 2.0, k - 1)) if k >= 2 else math.nan
    return _hksj_standard_error(theta, w_star, estimate), crit


def _prediction_interval(estimate: float, se: float, tau2: float, k: int, lvl: float) -> tuple[float, float]:
    """``estimate ± t_{k-2} * sqrt(tau2 + se²)`` for a new group's true effect; NaN when k < 3."""
    if k < 3:
        return math.nan, math.nan
    half = float(student_t.ppf((1.0 + lvl) / 2.0, k - 2)) * math.sqrt(tau2 + se * se)
    return estimate - half, estimate + half


def _random_effects(
    theta: NDArray[np.float64], v: NDArray[np.float64], lvl: float, method: str, *, func: str
) -> RandomEffectsResult:
    """The meta-analysis of checked effects and variances (see :func:`random_effects_meta_analysis`)."""
    k = int(theta.size)
    common = _common_effect(theta, v)
    notes: list[str] = []
    tau2 = common.tau2_dl
    if k < 2:
        notes.append("one group: no heterogeneity to measure (Q, I² and tau² need two or more)")
    elif method == "reml":
        tau2 = _reml_tau2(theta, v, tau2, func=func)
    w_star = 1.0 / (v + tau2)
    estimate = float(np.sum(w_star * theta) / w_star.sum())
    se, crit = _pooled_standard_error(theta, w_star, estimate, lvl, method)
    if method == "reml" and k < 2:
        notes.append("the HKSJ standard error and interval need two or more groups")
    prediction_low, prediction_high = _prediction_interval(estimate, se, tau2, k, lvl)
    if k < 3:
        notes.append("the prediction interval needs three or more groups")
    return RandomEffectsResult(
        k=k,
        estimate=estimate,
        standard_error=se,
        low=estimate - crit * se,
        high=estimate + crit * se,
        level=lvl,
        fixed_estimate=common.estimate,
        fixed_standard_error=common.standard_error,
        q=common.q,
        df=common.df,
        p_value=common.p_value,
        i2=common.i2,
        tau2=tau2,
        weights=w_star / w_star.sum(),
        note="; ".join(notes),
        method=method,
        interval="wald" if method == "dl" else "hksj",
        prediction_low=prediction_low,
        prediction_high=prediction_high,
    )
