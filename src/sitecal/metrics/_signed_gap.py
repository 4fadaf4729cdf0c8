r"""The signed top-label calibration gap: mean confidence minus accuracy, and its sum form.

.. math:: \Delta = \frac{1}{N} \sum_i \bigl(\max_k p_{ik} - 1[\arg\max_k p_{ik} = y_i]\bigr)

Positive: over-confident (the model states more confidence than it earns), negative: under-confident,
0: calibrated in the large for the top label. Unlike the ECE it keeps the sign, so it is an unbiased
mean of per-study terms at every group size (no absolute value of noisy bin gaps), and a group that is
over-confident against an under-confident rest shows the whole difference. It is blind to
miscalibration that cancels across confidence levels (over-confident at high confidence,
under-confident at low); the ECE family sees that.

No library computes it with its sign (netcal and torchmetrics give the unsigned, binned ECE); the tests
check it against numpy by hand. For the top-label event it is the difference whose ratio is O:E:
``accuracy / mean confidence`` (:func:`~sitecal.metrics.observed_expected_ratio` with more than two
classes).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_probs
from sitecal.metrics._calibration_error import top_label
from sitecal.metrics._statistics import ece_sums

__all__ = ["signed_calibration_gap", "signed_gap_sums"]


def signed_calibration_gap(probs: ArrayLike, labels: ArrayLike) -> float:
    """Mean top-label confidence minus accuracy (positive: over-confident).

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
    labels : array_like, shape (N,)

    Returns
    -------
    float
        In [-1, 1]: ``mean_i max_k p_ik - mean_i 1[argmax_k p_ik = y_i]`` (ties: the lowest class).

    Examples
    --------
    Confidences 0.9, 0.6, 0.7 (mean 0.7333); the first two are right (accuracy 0.6667):

    >>> round(signed_calibration_gap([[0.9, 0.1], [0.4, 0.6], [0.7, 0.3]], [0, 1, 1]), 4)
    0.0667
    """
    func = "signed_calibration_gap"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    confidence, correct = top_label(p, y)
    return float(np.mean(confidence - correct))


# The sum form keeps the ECE's terms, (1, per-bin correct - confidence) (and so the compiled refit loop's
# ``("top_label", "g")`` program): their total over the bins is the signed gap's numerator, so the refit and
# permutation engines evaluate it in the same pass as the ECE family, whatever ``n_bins``.


def _from_sums(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
    out: NDArray[np.float64] = -sums[:, 1:].sum(axis=1) / sums[:, 0]
    return out


#: The signed gap as ``g(sum_i w_i t_i)``: ``t_i`` = (1, per-bin correct - confidence), ``g`` = minus the
#: blocks' total over the count.
signed_gap_sums = replace(ece_sums, from_sums=_from_sums)
