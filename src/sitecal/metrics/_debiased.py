"""Debiased top-label calibration error (Kumar, Liang & Ma, 2019), plain and from per-bin sums."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int, check_labels, check_option, check_probs
from sitecal.metrics._binning import Binning, bin_edges, binned_sums
from sitecal.metrics._calibration_error import BINNINGS, top_label

__all__ = [
    "debiased_expected_calibration_error",
    "debiased_squared_from_sums",
    "debiased_squared_se_from_sums",
    "plugin_squared_from_sums",
]


def debiased_squared_from_sums(
    count: NDArray[np.float64], sum_correct: NDArray[np.float64], sum_confidence: NDArray[np.float64]
) -> NDArray[np.float64]:
    r"""Debiased squared l2 calibration error from per-bin sums, row-wise: (B, n_bins) each -> (B,).

    ``count`` may be a weighted count (a bootstrap resample's integer weights count repeated rows as
    distinct rows). Bins with ``count < 2`` contribute 0, as in the authors' reference code. The result
    can be negative: it is an unbiased estimate of a non-negative quantity.
    """
    total = count.sum(axis=1)
    usable = count >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        safe = np.where(usable, count, 2.0)
        accuracy = sum_correct / safe
        gap = accuracy - sum_confidence / safe
        variance = accuracy * (1.0 - accuracy) / (safe - 1.0)
        per_bin = np.where(usable, count * (gap * gap - variance), 0.0)
        out: NDArray[np.float64] = per_bin.sum(axis=1) / total
    return out


def debiased_squared_se_from_sums(
    count: NDArray[np.float64], sum_correct: NDArray[np.float64], sum_confidence: NDArray[np.float64]
) -> NDArray[np.float64]:
    r"""Standard error of :func:`debiased_squared_from_sums`, from the same sums: (B, n_bins) each -> (B,).

    Given the bin counts and independent rows, :math:`\widehat D = \sum_b p_b (\hat g_b^2 - \hat v_b)`
    with :math:`p_b = n_b / N` has variance :math:`\sum_b p_b^2 [4 g_b^2 s_b^2 / n_b + 2 s_b^4 / (n_b
    (n_b - 1))]` (:math:`s_b^2` the correctness variance of bin b, :math:`g_b` its gap; the second term
    is the variance of a debiased square at :math:`g_b = 0`). The gaps are not known one by one, so the
    first term spreads :math:`\max(\widehat D, 0)` evenly over the bins:
    :math:`4 \max(\widehat D, 0) \sum_b p_b s_b^2 / N`. Bins with ``count < 2`` add nothing, as in
    :math:`\widehat D`. Measured on 400 samples of 300 (``tests/stats/test_scale.py``): within 10 % of
    the estimate's spread for miscalibrated models, about 20 % above it for a calibrated one (where
    :math:`\max(\widehat D, 0) > 0` in half the samples adds a first term whose true value is 0). The
    bootstrap engines only *studentise* by it (:mod:`sitecal.stats._scale`): the
    resampled patients set the interval's scale, so the ignored clustering and the rough first term do
    not enter the interval as they would a normal one.

    >>> import numpy as np
    >>> # one bin of 5 with 2 correct, mean confidence 0.86: s2 = 0.4 * 0.6 * 5/4 = 0.3, D = 0.1516
    >>> se = debiased_squared_se_from_sums(np.array([[5.0]]), np.array([[2.0]]), np.array([[4.3]]))
    >>> round(float(se[0]), 6), round((4 * 0.1516 * 0.3 / 5 + 2 * 0.3**2 / (5 * 4)) ** 0.5, 6)
    (0.213035, 0.213035)
    """
    total = count.sum(axis=1)
    usable = count >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        safe = np.where(usable, count, 2.0)
        accuracy = sum_correct / safe
        s2 = np.where(usable, accuracy * (1.0 - accuracy) * safe / (safe - 1.0), 0.0)
        share = np.where(usable, safe / total[:, None], 0.0)
        null = (2.0 * share * share * s2 * s2 / (safe * (safe - 1.0))).sum(axis=1)
        d = debiased_squared_from_sums(count, sum_correct, sum_confidence)
        spread = (share * s2).sum(axis=1)
        out: NDArray[np.float64] = np.sqrt(4.0 * np.maximum(d, 0.0) * spread / total + null)
    return out


def plugin_squared_from_sums(
    count: NDArray[np.float64], sum_correct: NDArray[np.float64], sum_confidence: NDArray[np.float64]
) -> NDArray[np.float64]:
    r"""The plug-in squared binned l2 error :math:`\sum_b (n_b / N) (\bar y_b - \bar c_b)^2`: (B,).

    What :func:`debiased_squared_from_sums` estimates, evaluated on the sample itself: the true value in
    the bootstrap's world, where the population is the sample, and so the centre of its studentised
    replicates (:mod:`sitecal.stats._scale`). Every non-empty bin counts.

    >>> import numpy as np
    >>> round(float(plugin_squared_from_sums(np.array([[5.0]]), np.array([[2.0]]), np.array([[4.3]]))[0]), 4)
    0.2116
    """
    total = count.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        filled = count > 0
        per_bin = np.where(filled, (sum_correct - sum_confidence) ** 2 / np.where(filled, count, 1.0), 0.0)
        out: NDArray[np.float64] = per_bin.sum(axis=1) / total
    return out


def debiased_expected_calibration_error(
    probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 15, binning: Binning = "width"
) -> float:
    r"""Debiased top-label l2 calibration error (Kumar, Liang & Ma, 2019), clamped at 0.

    The plug-in binned ECE is biased upward on small groups: even a perfectly calibrated model gets
    ``ECE ~ sqrt(n_bins / N)`` from sampling noise alone. This estimator removes the noise term of the
    *squared* error bin by bin.

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
        Predicted class probabilities; rows sum to 1 within 1e-6.
    labels : array_like, shape (N,)
        True class indices in ``[0, C)``.
    n_bins : int, default 15
        Number of bins, >= 1.
    binning : {"width", "mass"}, default "width"
        Bin edges as in :func:`~sitecal.metrics.expected_calibration_error` (``(lo, hi]``, a
        confidence of 0 in the first bin).

    Returns
    -------
    float
        :math:`\sqrt{\max(\widehat{D}, 0)}` in [0, 1], an estimate of the binned **l2** (root mean
        square) top-label calibration error, not of the l1 ECE.

    Notes
    -----
    With top-label confidence :math:`c_i`, correctness :math:`y_i = \mathbb{1}[\hat y_i = y_i]`, bins
    :math:`B_b` holding :math:`n_b` samples, :math:`\bar y_b` and :math:`\bar c_b` their means:

    .. math:: \widehat{D} = \sum_{b:\, n_b \ge 2} \frac{n_b}{N}
              \Bigl[(\bar y_b - \bar c_b)^2 - \frac{\bar y_b (1 - \bar y_b)}{n_b - 1}\Bigr]

    :math:`\bar y_b(1-\bar y_b)/(n_b-1)` is the unbiased estimate of :math:`\mathrm{Var}(\bar y_b)`
    given :math:`n_b`, so :math:`\widehat{D}` is unbiased for the squared binned l2 error
    :math:`\sum_b P(b)\,(E[y \mid b] - E[c \mid b])^2` except for two terms that the authors also leave
    in: the within-bin spread of the confidences, :math:`\mathrm{Var}(\bar c_b) - 2\,\mathrm{Cov}(\bar
    y_b, \bar c_b)`, of order :math:`(\text{bin width})^2 / n_b` (``Var(cbar_b) <= width^2 / (4 n_b)``),
    and the bins with :math:`n_b < 2`, which contribute 0 (not their plug-in value). This is
    ``unbiased_square_ce`` of the authors' ``calibration`` package
    (``calibration.utils``, ``p-lambda/verified_calibration``), and the returned value is their
    ``unbiased_l2_ce``: ``max(D, 0) ** 0.5``.

    Why l2 and how to read it beside the l1 ECE: the debiasing is exact only for the square (an
    absolute value has no unbiased estimator from a bin mean), so the estimand is the l2 error.
    By Cauchy–Schwarz, :math:`\sum_b w_b |g_b| \le (\sum_b w_b g_b^2)^{1/2}`: the binned l2 error is
    an *upper* bound on the binned l1 ECE with the same bins, equal to it when every bin has the same
    gap. So a debiased value near 0 means "no detectable miscalibration" on the l1 scale too, and a
    value of 0.05 means the l1 ECE is at most about 0.05 (up to estimation error). A negative
    :math:`\widehat{D}` (clamped to 0) means the observed gaps are smaller than sampling noise. Only
    :math:`\widehat{D}` is unbiased; its clamped square root is not (it is biased up when the true error
    is 0 and slightly down otherwise), but far less than the plug-in ECE on small groups
    (``benchmarks/coverage_ece.md``).

    References
    ----------
    A. Kumar, P. Liang, T. Ma. "Verified Uncertainty Calibration." NeurIPS 2019 (section 5, the
    debiased estimator). J. Bröcker. "Estimating reliability and resolution of probability
    forecasts through decomposition of the empirical score." Climate Dynamics 39, 2012.

    Examples
    --------
    >>> probs = [[0.1, 0.9], [0.1, 0.9], [0.2, 0.8], [0.2, 0.8], [0.1, 0.9]]
    >>> # one bin of 5: ybar = 0.4, cbar = 0.86, D = 0.46**2 - 0.4 * 0.6 / 4 = 0.1516
    >>> round(debiased_expected_calibration_error(probs, [1, 0, 0, 1, 0], n_bins=1), 6)
    0.389358
    """
    func = "debiased_expected_calibration_error"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    how: Any = check_option(binning, name="binning", func=func, options=BINNINGS)
    confidence, correct = top_label(p, y)
    count, s_conf, s_acc = binned_sums(confidence, correct, bin_edges(confidence, bins, how))
    squared = debiased_squared_from_sums(count[None, :].astype(np.float64), s_acc[None, :], s_conf[None, :])
    return float(np.sqrt(max(float(squared[0]), 0.0)))
