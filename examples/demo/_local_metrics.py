"""Top-label ECE and a temperature fit, as small local functions of the demo models' training and checks.

They are independent of :mod:`sitecal.metrics` and :mod:`sitecal.calibration` on purpose: ``verify.py``
is a check of the demo data and models, not a use of the pipeline's own code.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from scipy.optimize import minimize_scalar

__all__ = ["ece", "fit_temperature"]


def ece(probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int = 15) -> float:
    """Top-label ECE: equal-width bins on (lo, hi], weighted by bin size (Guo et al., 2017).

    Parameters
    ----------
    probs : ndarray, shape (N, C)
        Class probabilities.
    labels : ndarray of int, shape (N,)
        True classes.
    n_bins : int, default 15

    Returns
    -------
    float
        ``sum_b |correct_b - confidence_b| / N`` over the bins (sums, not means, per bin).
    """
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    count = np.bincount(bins, minlength=n_bins)
    gap = np.abs(np.bincount(bins, correct, n_bins) - np.bincount(bins, conf, n_bins))
    return float(gap.sum() / max(count.sum(), 1))


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The temperature T in [e^-3, e^3] that minimises the NLL of ``softmax(logits / T)``.

    Solved over log T by bounded Brent search to 1e-6 in log T.
    """
    z = logits.double()

    def nll(log_t: float) -> float:
        return float(F.cross_entropy(z / np.exp(log_t), labels))

    res = minimize_scalar(nll, bounds=(-3.0, 3.0), method="bounded", options={"xatol": 1e-6})
    return float(np.exp(res.x))
