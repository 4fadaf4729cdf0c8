r"""Anytime-valid alarms for monitoring calibration after go-live: e-processes over monthly windows.

Every test here is an *e-process*: a nonnegative supermartingale under its null hypothesis that
starts at 1. Ville's inequality then bounds the chance that it ever reaches ``1 / a``,
:math:`P(\sup_t E_t \ge 1/a) \le a`, however many windows are looked at and whenever the site
stops. Each test is summarised per window by a vector of log e-value increments, one per
alternative of a fixed grid (:func:`temperature_increments`, :func:`bounded_mean_increments`);
:func:`changepoint_evalues` turns the stored increments of windows ``1..t`` into the e-value at the
end of each window, restarting the evidence at every possible start of a drift, and
:func:`alarm_threshold` gives the Bonferroni threshold over the family of tests fixed in advance.
A store that keeps only the increments (with the grid and weights) reproduces every number.

Validity
--------
- Temperature test: the labels follow the temperature family on top of the deployed calibration,
  :math:`P(y \mid z) = \mathrm{softmax}(\theta z)_y`, with :math:`\theta = 1/\tau` inside the null
  set in every study; the distribution of the logits (case mix) may change freely. Miscalibration
  of another shape (e.g. one class only) is outside the family and the guarantee does not cover it.
- Bounded-mean tests: the per-study values lie in ``[lower, upper]`` and each study's conditional
  mean given the studies before it satisfies the null (independent studies with a common mean do);
  nothing else is assumed.
- Alternatives, their weights, the horizon and the family of tests are fixed before monitoring
  starts (in the protocol); choosing them after seeing the data voids the guarantee.

References
----------
J. Ville. "Étude critique de la notion de collectif." Gauthier-Villars, 1939.
G. Shafer, V. Vovk. "Game-Theoretic Foundations for Probability and Finance." Wiley, 2019.
I. Waudby-Smith, A. Ramdas. "Estimating means of bounded random variables by betting." J R Stat
Soc B 86, 2024 (online 2023). A. Ramdas, P. Grünwald, V. Vovk, G. Shafer. "Game-theoretic
statistics and safe anytime-valid inference." Statistical Science 38, 2023.
S. R. Howard, A. Ramdas, J. McAuliffe, J. Sekhon. "Time-uniform, nonparametric, nonasymptotic
confidence sequences." Ann Stat 49, 2021.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from sitecal._validation import _as_array, check_float, check_int, check_labels, check_logits, check_option
from sitecal.errors import DataError

__all__ = [
    "DEFAULT_BET_FRACTIONS",
    "DEFAULT_TEMPERATURE_FACTORS",
    "SideIncrements",
    "alarm_threshold",
    "bounded_mean_increments",
    "changepoint_evalues",
    "first_alarm",
    "temperature_increments",
]

#: Alternatives of the temperature test, as factors beyond the margin: ``tau1 = f * margin_high`` on
#: the over-confident side and ``tau1 = margin_low / f`` on the under-confident side.
DEFAULT_TEMPERATURE_FACTORS: tuple[float, ...] = (1.1, 1.25, 1.5, 2.0, 3.0)

#: Bets of the bounded-mean tests, as fractions ``c`` of the largest bet that keeps every factor
#: positive: ``lambda = c / (margin - lower)`` (side ``"greater"``) or ``c / (upper - margin)``.
DEFAULT_BET_FRACTIONS: tuple[float, ...] = (0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75)

_SIDES = ("greater", "less")


@dataclass(frozen=True)
class SideIncrements:
    """One window's log e-value increments of the temperature test, per side and alternative.

    Attributes
    ----------
    over : numpy.ndarray, shape (A_over,)
        Summed log likelihood ratio of each over-confident alternative ``over_temperatures[a]``
        against the margin ``margin_high`` (null: tau <= margin_high).
    under : numpy.ndarray, shape (A_under,)
        The same for the under-confident alternatives ``under_temperatures`` against ``margin_low``
        (null: tau >= margin_low).
    over_temperatures, under_temperatures : numpy.ndarray
        The alternatives tau1 (float64), in the order of ``over`` and ``under``.
    margin_low, margin_high : float
        The margin on tau the window was tested against.
    n : int
        Studies in the window (0 gives all-zero increments).
    """

    over: NDArray[np.float64]
    under: NDArray[np.float64]
    over_temperatures: NDArray[np.float64]
    under_temperatures: NDArray[np.float64]
    margin_low: float
    margin_high: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (all increments are finite)."""
        return {
            "over": [float(v) for v in self.over],
            "under": [float(v) for v in self.under],
            "over_temperatures": [float(v) for v in self.over_temperatures],
            "under_temperatures": [float(v) for v in self.under_temperatures],
            "margin_low": self.margin_low,
            "margin_high": self.margin_high,
            "n": self.n,
        }


def _check_grid(
    grid: Sequence[float] | None, default: tuple[float, ...], *, func: str, low: float, high: float | None
) -> NDArray[np.float64]:
    values = default if grid is None else grid
    array = _as_array(values, name="grid", func=func)
    if array.ndim != 1 or array.size < 1 or array.dtype.kind not in "iuf":
        raise DataError(
            f"The 'grid' parameter of {func} must be a non-empty 1-D sequence of floats. Got {values!r}."
        )
    out = np.asarray(array, dtype=np.float64)
    for value in out:
        check_float(float(value), name="grid", func=func, low=low, high=high)
    return out


def temperature_increments(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    margin_low: float,
    margin_high: float,
    grid: Sequence[float] | None = None,
) -> SideIncrements:
    r"""Log likelihood-ratio increments of one window against a temperature margin ``[low, high]``.

    The model: :math:`P(y \mid z) = \mathrm{softmax}(\theta z)_y`, :math:`\theta = 1/\tau`, with
    ``z`` the deployed (already temperature-scaled) logits. It is an exponential family in
    :math:`\theta` with statistic :math:`s_i = z_{i, y_i}` and log-partition
    :math:`A_i(\theta) = \log\sum_k e^{\theta z_{ik}}`. For the null :math:`\theta \ge \theta_0`
    (``theta0 = 1 / margin_high``: not over-confident beyond the margin) and an alternative
    :math:`\theta_1 < \theta_0`, the study's likelihood ratio is
    :math:`L_i = \exp\{(\theta_1 - \theta_0) s_i - A_i(\theta_1) + A_i(\theta_0)\}`; the increment is
    :math:`\sum_i \log L_i`. The under-confident side mirrors it: null
    :math:`\theta \le 1/\text{margin\_low}`, alternatives :math:`\theta_1 > 1/\text{margin\_low}`.

    Why :math:`E[L_i \mid z_i] \le 1` under the null, whatever the distribution of ``z``
    (:math:`d = \theta_1 - \theta_0`):

    1. :math:`E_\theta[e^{d s_i} \mid z_i] = e^{A_i(\theta + d) - A_i(\theta)}`, so
       :math:`\log E_\theta[L_i \mid z_i] = g(\theta) - g(\theta_0)` with
       :math:`g(t) = A_i(t + d) - A_i(t)`.
    2. :math:`A_i` is convex, so :math:`g'(t) = A_i'(t + d) - A_i'(t)` has the sign of ``d``.
    3. Over side: :math:`d < 0`, ``g`` is non-increasing and :math:`\theta \ge \theta_0` gives
       :math:`g(\theta) \le g(\theta_0)`; under side: :math:`d > 0`, ``g`` non-decreasing and
       :math:`\theta \le \theta_0` gives the same. Equality at :math:`\theta = \theta_0`. ∎

    The product over studies (labels independent given the logits and the past) and a fixed-weight
    mixture over the alternatives are then test supermartingales for every null :math:`\theta`, even
    one that changes from study to study.

    Parameters
    ----------
    logits : array-like, shape (N, C), or (N,) for one binary logit
        Deployed (calibrated) logits of the window's studies. ``N = 0`` gives zero increments.
    labels : array-like of int, shape (N,)
    margin_low, margin_high : float
        The margin on tau, ``0 < margin_low < margin_high`` (e.g. 0.8 and 1.25). A margin on the
        calibration slope ``[s_lo, s_hi]`` (slope ~ 1/tau) is ``margin_low = 1 / s_hi``,
        ``margin_high = 1 / s_lo``.
    grid : sequence of float > 1, optional
        Factors ``f`` of the alternatives: ``tau1 = f * margin_high`` (over) and
        ``tau1 = margin_low / f`` (under). Default :data:`DEFAULT_TEMPERATURE_FACTORS`.

    Returns
    -------
    SideIncrements

    Examples
    --------
    >>> import numpy as np
    >>> inc = temperature_increments(np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([1, 1]),
    ...                              margin_low=0.8, margin_high=1.25, grid=[2.0])
    >>> inc.over.shape, inc.under.shape
    ((1,), (1,))
    """
    func = "temperature_increments"
    low = check_float(margin_low, name="margin_low", func=func, low=0.0)
    high = check_float(margin_high, name="margin_high", func=func, low=0.0)
    if not low < high:
        raise DataError(
            f"The 'margin_low' parameter of {func} must be below 'margin_high'. Got [{low:g}, {high:g}]."
        )
    factors = _check_grid(grid, DEFAULT_TEMPERATURE_FACTORS, func=func, low=1.0, high=None)
    over_taus = high * factors
    under_taus = low / factors
    raw = _as_array(logits, name="logits", func=func)
    if raw.ndim >= 1 and raw.shape[0] == 0:
        zeros = np.zeros(factors.size)
        check_labels(labels, n=0, n_classes=2, func=func)
        return SideIncrements(zeros, zeros.copy(), over_taus, under_taus, low, high, 0)
    z = check_logits(raw, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    s = z[np.arange(z.shape[0]), y]
    over = _log_ratio_sums(z, s, 1.0 / high, 1.0 / over_taus)
    under = _log_ratio_sums(z, s, 1.0 / low, 1.0 / under_taus)
    return SideIncrements(over, under, over_taus, under_taus, low, high, int(z.shape[0]))


def _log_ratio_sums(
    z: NDArray[np.float64], s: NDArray[np.float64], theta0: float, theta1: NDArray[np.float64]
) -> NDArray[np.float64]:
    """``sum_i (theta1 - theta0) s_i - A_i(theta1) + A_i(theta0)`` for each ``theta1``, shape (A,).

    With ``m_i = max_k z_ik`` and ``d = z - m <= 0``, ``A_i(theta) = theta m_i + log sum_k exp(theta d_ik)``
    for ``theta > 0``: every exponent is <= 0 and one is 0, so nothing overflows, and the study's term is
    ``(theta1 - theta0) d_{i,y_i} - log sum_k e^{theta1 d_ik} + log sum_k e^{theta0 d_ik}``, each O(1).
    """
    top = z.max(axis=1)
    d = z - top[:, None]
    d_y = s - top
    log_z0 = np.log(np.exp(theta0 * d).sum(axis=1))
    out = np.empty(theta1.size, dtype=np.float64)
    for a, theta in enumerate(theta1):  # a handful of alternatives; each step is vectorised over studies
        log_z1 = np.log(np.exp(theta * d).sum(axis=1))
        out[a] = float(np.sum((theta - theta0) * d_y - log_z1 + log_z0))
    return out


def bounded_mean_increments(
    x: ArrayLike,
    *,
    margin: float,
    side: str,
    lower: float,
    upper: float,
    grid: Sequence[float] | None = None,
) -> NDArray[np.float64]:
    r"""Log capital of one window of betting against a bounded mean, one entry per bet.

    Per-study values :math:`X_i \in [\text{lower}, \text{upper}]`. ``side="greater"`` tests
    :math:`H_0: E X \le m` (alarm when the mean rises above the margin) with the capital
    :math:`\prod_i \{1 + \lambda (X_i - m)\}`, :math:`0 \le \lambda < 1 / (m - \text{lower})`;
    ``side="less"`` tests :math:`H_0: E X \ge m` with :math:`\prod_i \{1 + \lambda (m - X_i)\}`,
    :math:`0 \le \lambda < 1 / (\text{upper} - m)`. Every factor is positive and, under the null,
    :math:`E[1 + \lambda (X_i - m) \mid \text{past}] = 1 + \lambda (E[X_i \mid \text{past}] - m) \le 1`,
    so each constant bet is a test supermartingale and so is a fixed-weight mixture of them
    (Waudby-Smith & Ramdas 2023). With constant bets the window's capital does not depend on the
    order of its studies, which is what lets a store keep one number per bet and window.

    Uses:

    - a top-label ECE margin ``below: m`` (``ece``, ``ece_debiased``, l1 or l2, any bins): with
      :math:`X_i = \mathrm{conf}_i - \mathrm{correct}_i \in [-1, 1]`, the population binned ECE is
      :math:`\sum_b w_b |E[X \mid b]| \ge |E X|` (and the l2 one is larger still, by Jensen), so
      "ECE <= m" implies :math:`-m \le E X \le m`. Testing :math:`E X \le m` (``side="greater"``)
      and :math:`E X \ge -m` (``side="less"``, ``margin=-m``) is a valid, conservative test of the
      ECE criterion: an alarm means ECE > m. It cannot see miscalibration whose signed gaps cancel
      (over-confident in some bins, under-confident in others).
    - an accuracy margin ``above: m``: :math:`X_i = \mathrm{correct}_i \in [0, 1]`, ``side="less"``.

    Parameters
    ----------
    x : array-like of float, shape (N,)
        The window's per-study values, inside ``[lower, upper]``. ``N = 0`` gives zero increments.
    margin : float
        ``m``, strictly inside ``(lower, upper)``.
    side : {"greater", "less"}
        The alternative that raises the alarm: mean above ``margin`` or below it.
    lower, upper : float
        Bounds of ``x`` known in advance (not the window's observed range).
    grid : sequence of float in (0, 1), optional
        Bets as fractions ``c`` of the largest allowed bet: ``lambda = c / (m - lower)``
        (``"greater"``) or ``c / (upper - m)`` (``"less"``). Default :data:`DEFAULT_BET_FRACTIONS`.

    Returns
    -------
    numpy.ndarray, shape (len(grid),)
        :math:`\sum_i \log\{1 + \lambda_a (\pm(X_i - m))\}` for each bet.

    Examples
    --------
    >>> bounded_mean_increments([1.0, 0.0], margin=0.5, side="less", lower=0.0, upper=1.0, grid=[0.5])
    array([-0.28768207])
    """
    func = "bounded_mean_increments"
    side = check_option(side, name="side", func=func, options=_SIDES)
    lo = check_float(lower, name="lower", func=func)
    hi = check_float(upper, name="upper", func=func, low=lo)
    m = check_float(margin, name="margin", func=func, low=lo, high=hi)
    fractions = _check_grid(grid, DEFAULT_BET_FRACTIONS, func=func, low=0.0, high=1.0)
    array = _as_array(x, name="x", func=func)
    if array.ndim != 1 or array.dtype.kind not in "biuf":
        raise DataError(
            f"The 'x' parameter of {func} must be a 1-D array of floats, one per study. "
            f"Got shape {array.shape}, dtype {array.dtype}."
        )
    values = np.asarray(array, dtype=np.float64)
    bad = ~((values >= lo) & (values <= hi))  # NaN is bad too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"The 'x' parameter of {func} must hold values in [{lo:g}, {hi:g}] (the bounds declared by "
            f"'lower' and 'upper'). Got {float(values[i])!r} at index {i}."
        )
    if side == "greater":
        bets, signed = fractions / (m - lo), values - m
    else:
        bets, signed = fractions / (hi - m), m - values
    return np.asarray(np.log1p(bets[:, None] * signed[None, :]).sum(axis=1), dtype=np.float64)


def changepoint_evalues(
    increments: ArrayLike, *, alt_weights: ArrayLike | None = None, horizon: int
) -> NDArray[np.float64]:
    r"""Log e-value at the end of each window, mixing over the window a drift starts in.

    .. math:: E_t = \sum_{s \le \min(t, H)} w_s M_{s,t} + \sum_{t < s \le H} w_s, \qquad
              M_{s,t} = \sum_a v_a \exp\Bigl(\sum_{u=s}^{t} l_{u,a}\Bigr), \quad w_s = 1/H,

    with ``l`` the per-window log increments, ``v`` the alternatives' weights and ``H`` the declared
    horizon (windows). Evidence against the alternatives gathered before a drift starts (negative
    increments) does not mask it: the term of the start ``s`` ignores the windows before ``s``.
    After ``H`` windows no new start is added; the process stays valid, only slower to react.

    Why it is a test supermartingale (nonnegative, starts at 1, :math:`E[E_t \mid F_{t-1}] \le E_{t-1}`):
    for each start ``s`` the process :math:`P^s_t = 1` for ``t < s`` and :math:`M_{s,t}` for
    ``t >= s`` is one (constant until ``s``; from there a fixed mixture of products of factors with
    conditional mean <= 1 under the null, starting from 1 at ``s - 1``); :math:`E_t = \sum_s w_s P^s_t`
    with :math:`\sum_s w_s = 1` is a fixed convex mixture of them. ∎ Ville's inequality gives
    :math:`P(\exists t: E_t \ge 1/a) \le a`.

    Computed in log space by the recursion
    :math:`R_{t,a} = \mathrm{logaddexp}(R_{t-1,a}, \log w_t) + l_{t,a}` (the ``log w_t`` term only
    while ``t <= H``), :math:`\log E_t = \mathrm{logsumexp}(\log v_a + R_{t,a}, \log((H - t)/H))`.

    Parameters
    ----------
    increments : array-like of float, shape (..., W, A)
        Log e-value increments of W windows (in time order) for A alternatives, e.g. stacked
        ``SideIncrements.over`` or :func:`bounded_mean_increments` outputs. Leading axes are
        independent series (each gets its own e-process).
    alt_weights : array-like of float, shape (A,), optional
        Weights ``v`` of the alternatives, >= 0, normalised to sum 1 here. Default: equal.
    horizon : int
        ``H >= 1``, the number of windows a drift may start in, fixed in advance.

    Returns
    -------
    numpy.ndarray of float64, shape (..., W)
        :math:`\log E_t` at the end of each window (0, up to rounding of order 1e-16, where all
        increments are 0).

    Examples
    --------
    >>> bool(np.allclose(changepoint_evalues([[0.0], [0.0]], horizon=12), 0.0))  # no evidence: E_t = 1
    True
    >>> changepoint_evalues([[-3.0], [5.0]], horizon=2).round(4)  # log(e^-3/2 + 1/2), log(e^2/2 + e^5/2)
    array([-0.6446,  4.3554])
    """
    func = "changepoint_evalues"
    array = _as_array(increments, name="increments", func=func)
    if array.ndim < 2 or array.shape[-1] < 1 or array.dtype.kind not in "biuf":
        raise DataError(
            f"The 'increments' parameter of {func} must be an array of floats of shape (..., W, A) with "
            f"A >= 1 (one row per window, one column per alternative). Got shape {array.shape}."
        )
    inc = np.asarray(array, dtype=np.float64)
    if not np.isfinite(inc).all():
        raise DataError(f"The 'increments' parameter of {func} must be finite. Got a NaN or infinite value.")
    h = check_int(horizon, name="horizon", func=func, minimum=1)
    n_alt = inc.shape[-1]
    if alt_weights is None:
        log_v = np.full(n_alt, -math.log(n_alt))
    else:
        v = np.asarray(_as_array(alt_weights, name="alt_weights", func=func), dtype=np.float64)
        if v.shape != (n_alt,) or not np.isfinite(v).all() or (v < 0).any() or not v.sum() > 0:
            raise DataError(
                f"The 'alt_weights' parameter of {func} must be {n_alt} finite weights >= 0 (one per column "
                f"of 'increments') with a positive sum. Got {v.tolist()!r}."
            )
        with np.errstate(divide="ignore"):
            log_v = np.log(v / v.sum())
    n_windows = inc.shape[-2]
    out = np.empty(inc.shape[:-1], dtype=np.float64)
    running = np.full((*inc.shape[:-2], n_alt), -np.inf)
    log_w = -math.log(h)
    for t in range(n_windows):  # t + 1 is the window number
        if t < h:
            running = np.logaddexp(running, log_w)
        running = running + inc[..., t, :]
        started = logsumexp(running + log_v, axis=-1)
        waiting = max(h - (t + 1), 0)
        out[..., t] = np.logaddexp(started, math.log(waiting / h)) if waiting else started
    return out


def alarm_threshold(alpha: float, n_tests: int) -> float:
    r"""Log e-value an alarm needs: :math:`\log(n_\text{tests} / \alpha)`.

    Bonferroni over the family (groups x criteria x sides) fixed in advance, with Ville's inequality
    for each: :math:`P(\text{any false alarm, ever}) \le \sum_k \alpha / n = \alpha`.

    Examples
    --------
    >>> round(alarm_threshold(0.05, 1), 4)
    2.9957
    """
    func = "alarm_threshold"
    a = check_float(alpha, name="alpha", func=func, low=0.0, high=1.0)
    n = check_int(n_tests, name="n_tests", func=func, minimum=1)
    return math.log(n) - math.log(a)


def first_alarm(log_evalues: ArrayLike, threshold: float) -> int:
    """Index of the first window whose log e-value reaches ``threshold``; -1 if none.

    An alarm stays raised once raised: later windows' e-values may fall back below the threshold
    without withdrawing it (Ville's inequality bounds the first crossing).

    Examples
    --------
    >>> first_alarm([0.0, 3.5, 1.0], 3.0)
    1
    """
    func = "first_alarm"
    values = np.asarray(_as_array(log_evalues, name="log_evalues", func=func), dtype=np.float64)
    if values.ndim != 1:
        raise DataError(f"The 'log_evalues' parameter of {func} must be 1-D. Got shape {values.shape}.")
    level = check_float(threshold, name="threshold", func=func)
    hits = np.flatnonzero(values >= level)
    return int(hits[0]) if hits.size else -1
