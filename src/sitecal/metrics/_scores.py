"""Proper scores and accuracy: negative log-likelihood, Brier score, accuracy."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_probs

__all__ = ["NLL_CLIP", "accuracy", "brier_score", "negative_log_likelihood"]

#: Probabilities are clipped from below at this value before the log, so a confidently wrong
#: prediction costs at most ``-log(1e-12) ≈ 27.6`` nats instead of infinity.
NLL_CLIP = 1e-12


def _validated(
    probs: ArrayLike, labels: ArrayLike, *, func: str
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    return p, y


def nll_terms(probs: NDArray[np.float64], labels: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per-sample ``-log max(p_{i, y_i}, 1e-12)``, shape (N,)."""
    p_true = probs[np.arange(probs.shape[0]), labels]
    out: NDArray[np.float64] = -np.log(np.maximum(p_true, NLL_CLIP))
    return out


def brier_terms(probs: NDArray[np.float64], labels: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per-sample ``sum_k (p_ik - 1[y_i = k])^2``, shape (N,), each in [0, 2]."""
    diff = probs.copy()
    diff[np.arange(probs.shape[0]), labels] -= 1.0
    out: NDArray[np.float64] = np.asarray(np.einsum("ij,ij->i", diff, diff), dtype=np.float64)
    return out


def accuracy_terms(probs: NDArray[np.float64], labels: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per-sample ``1[argmax_k p_ik = y_i]`` as float (ties: lowest class index), shape (N,)."""
    out: NDArray[np.float64] = (probs.argmax(axis=1) == labels).astype(np.float64)
    return out


def negative_log_likelihood(probs: ArrayLike, labels: ArrayLike) -> float:
    r"""Mean negative log-likelihood (log loss, in nats) of the true class.

    .. math:: \mathrm{NLL} = -\frac{1}{N} \sum_i \log \max(p_{i, y_i}, 10^{-12})

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
        Predicted probabilities; rows sum to 1 within 1e-6.
    labels : array_like, shape (N,)
        True class indices in ``[0, C)``.

    Returns
    -------
    float
        >= 0. The clip at 1e-12 (``NLL_CLIP``) bounds each term by about 27.63, so one confidently
        wrong study cannot make the mean infinite. Where probabilities come from logits, the
        unclipped value is what :func:`sitecal.calibration.fit_temperature` reports.

    Examples
    --------
    >>> round(negative_log_likelihood([[0.5, 0.5], [0.1, 0.9]], [0, 1]), 6)  # (log 2 - log 0.9) / 2
    0.399254
    """
    p, y = _validated(probs, labels, func="negative_log_likelihood")
    return float(nll_terms(p, y).mean())


def brier_score(probs: ArrayLike, labels: ArrayLike) -> float:
    r"""Multiclass Brier score.

    .. math:: \mathrm{BS} = \frac{1}{N} \sum_i \sum_k (p_{ik} - \mathbb{1}[y_i = k])^2 \in [0, 2]

    This is Brier's original multiclass form; for two classes it is twice the binary
    ``mean((p_1 - y)^2)`` that ``sklearn.metrics.brier_score_loss`` reports.

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
    labels : array_like, shape (N,)

    Returns
    -------
    float

    References
    ----------
    G. W. Brier. "Verification of forecasts expressed in terms of probability." Monthly Weather
    Review 78(1), 1950.

    Examples
    --------
    >>> brier_score([[0.5, 0.5], [0.1, 0.9]], [0, 1])  # (0.25 + 0.25 + 0.01 + 0.01) / 2
    0.26
    """
    p, y = _validated(probs, labels, func="brier_score")
    return float(brier_terms(p, y).mean())


def accuracy(probs: ArrayLike, labels: ArrayLike) -> float:
    """Fraction of samples whose argmax class (ties: lowest index) equals the label.

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
    labels : array_like, shape (N,)

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> accuracy([[0.5, 0.5], [0.1, 0.9], [0.8, 0.2]], [0, 1, 1])
    0.6666666666666666
    """
    p, y = _validated(probs, labels, func="accuracy")
    return float(accuracy_terms(p, y).mean())
