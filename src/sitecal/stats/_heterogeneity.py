r"""Heterogeneity across groups (sites): DerSimonian–Laird random-effects meta-analysis.

Given one effect per group (e.g. :math:`\log(O/E)` per site) and its within-group variance,
:func:`random_effects_meta_analysis` returns Cochran's Q with its chi-squared p-value, I², the
between-group variance tau² (DerSimonian–Laird moment estimator) and the random-effects pooled effect
with a Wald interval, in one frozen result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri
from scipy.stats import chi2

from sitecal._validation import check_float
from sitecal.errors import DataError

__all__ = ["RandomEffectsResult", "random_effects_meta_analysis"]


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class RandomEffectsResult:
    """A DerSimonian–Laird random-effects meta-analysis.

    Attributes
    ----------
    k : int
        Groups pooled.
    estimate, standard_error, low, high : float
        Random-effects pooled effect, its standard error and the ``level`` Wald interval
        ``estimate ± z * standard_error`` (on the scale of the effects given).
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
        I² = max(0, (Q - df) / Q) in [0, 1]; 0 when Q = 0; NaN when ``k < 2``.
    tau2 : float
        Between-group variance, max(0, (Q - df) / (S1 - S2 / S1)); 0 when ``k < 2``.
    weights : numpy.ndarray, shape (k,)
        Random-effects weights ``1 / (v_i + tau2)``, normalised to sum to 1.
    note : str
        "" or what could not be estimated.
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
        }


def random_effects_meta_analysis(
    effects: ArrayLike, variances: ArrayLike, *, level: float = 0.95
) -> RandomEffectsResult:
    r"""DerSimonian–Laird random-effects meta-analysis of one effect per group.

    Parameters
    ----------
    effects : array_like, shape (k,), k >= 1
        Effect per group on an additive scale (e.g. :math:`\log(O/E)`), finite.
    variances : array_like, shape (k,)
        Within-group sampling variance of each effect, finite and > 0.
    level : float, default 0.95
        Two-sided level of the pooled interval.

    Returns
    -------
    RandomEffectsResult

    Notes
    -----
    With :math:`w_i = 1 / v_i`, :math:`\hat\theta_F = \sum w_i \theta_i / \sum w_i`,
    :math:`Q = \sum w_i (\theta_i - \hat\theta_F)^2`, :math:`S_1 = \sum w_i`, :math:`S_2 = \sum w_i^2`:

    .. math:: \hat\tau^2 = \max\Bigl(0, \frac{Q - (k - 1)}{S_1 - S_2 / S_1}\Bigr), \qquad
              I^2 = \max\Bigl(0, \frac{Q - (k - 1)}{Q}\Bigr),

    and the pooled effect :math:`\hat\theta_R = \sum w_i^* \theta_i / \sum w_i^*` with
    :math:`w_i^* = 1 / (v_i + \hat\tau^2)`, standard error :math:`(\sum w_i^*)^{-1/2}`, interval
    :math:`\hat\theta_R \pm z_{(1+\mathrm{level})/2}\,\mathrm{SE}`. The p-value of Q is the
    chi-squared upper tail with k - 1 degrees of freedom; with few groups Q has little power, so a
    large p-value is not evidence of homogeneity. With one group there is no heterogeneity to measure:
    Q = 0, p-value and I² NaN, tau² 0 (see ``note``). Matches
    ``statsmodels.stats.meta_analysis.combine_effects(..., method_re="chi2")``.

    References
    ----------
    R. DerSimonian, N. Laird. "Meta-analysis in clinical trials." Control Clin Trials 7, 1986.
    J. P. T. Higgins, S. G. Thompson. "Quantifying heterogeneity in a meta-analysis." Stat Med 21,
    2002. T. P. A. Debray et al. "A guide to systematic review and meta-analysis of prediction model
    performance." BMJ 356, 2017 (pooling log O/E).

    Examples
    --------
    >>> res = random_effects_meta_analysis([0.0, 0.2, -0.1], [0.01, 0.02, 0.01])
    >>> round(res.q, 4), res.df, round(res.tau2, 5)
    (3.0, 2, 0.00625)
    """
    func = "random_effects_meta_analysis"
    lvl = check_float(level, name="level", func=func, low=0.0, high=1.0)
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
    k = int(theta.size)
    w = 1.0 / v
    s1 = float(w.sum())
    fixed = float(np.sum(w * theta) / s1)
    q = float(np.sum(w * (theta - fixed) ** 2))
    df = k - 1
    note = ""
    if k < 2:
        p_value = i2 = math.nan
        tau2 = 0.0
        note = "one group: no heterogeneity to measure (Q, I² and tau² need two or more)"
    else:
        p_value = float(chi2.sf(q, df))
        i2 = max(0.0, (q - df) / q) if q > 0 else 0.0
        tau2 = max(0.0, (q - df) / (s1 - float(np.sum(w * w)) / s1))
    w_star = 1.0 / (v + tau2)
    estimate = float(np.sum(w_star * theta) / w_star.sum())
    se = math.sqrt(1.0 / float(w_star.sum()))
    z = float(ndtri((1.0 + lvl) / 2.0))
    return RandomEffectsResult(
        k=k,
        estimate=estimate,
        standard_error=se,
        low=estimate - z * se,
        high=estimate + z * se,
        level=lvl,
        fixed_estimate=fixed,
        fixed_standard_error=math.sqrt(1.0 / s1),
        q=q,
        df=df,
        p_value=p_value,
        i2=i2,
        tau2=tau2,
        weights=w_star / w_star.sum(),
        note=note,
    )
