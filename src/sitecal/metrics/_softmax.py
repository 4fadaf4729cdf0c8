"""Numerically stable softmax with a temperature."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_logits, check_temperature

__all__ = ["PROBABILITY_FLOOR", "log_probabilities", "softmax"]

#: Probabilities below this are taken as this before their logarithm (0 has none).
PROBABILITY_FLOOR = 1e-12


def softmax(logits: ArrayLike, *, temperature: float | ArrayLike = 1.0) -> NDArray[np.float64]:
    r"""Class probabilities from logits, ``softmax(logits / T)``, computed stably in float64.

    Parameters
    ----------
    logits : array_like, shape (N, C) with C >= 2, or (N,) / (N, 1)
        Finite logits. A single binary logit ``z`` per row is read as the sigmoid model and
        returns the two columns ``[1 - sigmoid(z / T), sigmoid(z / T)]``.
    temperature : float or array_like of shape (N,), default 1.0
        Temperature ``T > 0``, one for all rows or one per row (e.g. from
        :meth:`sitecal.calibration.GroupTemperatures.temperatures_for`).

    Returns
    -------
    numpy.ndarray, shape (N, C), float64
        Rows sum to 1.

    Notes
    -----
    .. math:: p_{ik} = \frac{\exp((z_{ik} - m_i)/T_i)}{\sum_j \exp((z_{ij} - m_i)/T_i)},
              \quad m_i = \max_j z_{ij},

    subtracting the row maximum so no exponential overflows (Guo et al., 2017, use the same map for
    temperature scaling).

    References
    ----------
    C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger. "On Calibration of Modern Neural Networks."
    ICML 2017.

    Examples
    --------
    >>> softmax([[0.0, 0.0], [0.0, 2.0]], temperature=2.0).round(4)
    array([[0.5   , 0.5   ],
           [0.2689, 0.7311]])
    """
    z = check_logits(logits, func="softmax")
    t = check_temperature(temperature, n=z.shape[0], func="softmax")
    return _softmax(z / t)


#: Up to this many classes a row's reductions are plain left-to-right loops in numpy, so they can run
#: class-major (over contiguous columns, several times faster) with the same result bit for bit.
_CLASS_MAJOR_MAX = 7


def _softmax(scaled: NDArray[Any]) -> NDArray[np.float64]:
    """Row softmax of already scaled, validated float64 logits."""
    if scaled.ndim == 2 and 1 < scaled.shape[1] <= _CLASS_MAJOR_MAX:
        # a copy (the transpose of a single row or column is contiguous: ascontiguousarray would not copy)
        return np.ascontiguousarray(softmax_class_major(np.array(scaled.T, order="C", copy=True)).T)
    shifted = scaled - scaled.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    out: NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out


def softmax_class_major(scaled: NDArray[np.float64]) -> NDArray[np.float64]:
    """Softmax over axis 0 of class-major scaled logits (C, N) -> probabilities (C, N), in place.

    The hot loops of the refit bootstraps keep probabilities class-major: each class a contiguous row,
    so a row's max and sum are elementwise passes over C arrays. With fewer than 8 classes the values
    equal :func:`softmax`'s bit for bit (numpy sums so few terms left to right either way).
    """
    scaled -= scaled.max(axis=0)
    np.exp(scaled, out=scaled)
    scaled /= scaled.sum(axis=0)
    return scaled


def log_probabilities(probabilities: ArrayLike, *, floor: float = PROBABILITY_FLOOR) -> NDArray[np.float64]:
    r"""Scores whose softmax gives ``probabilities`` back: ``log(max(p, floor))``, in float64.

    A model known only by its probabilities is temperature-scaled on these scores:
    ``softmax(log p / T)`` is ``p`` at ``T = 1`` (rows are renormalised, so a row summing to 1 within
    rounding comes back summing to 1 exactly) and is sharpened or softened as ``T`` moves from 1.
    A probability of 0 has no logarithm: it is floored at ``floor``.

    Examples
    --------
    >>> z = log_probabilities([[0.2, 0.8], [1.0, 0.0]])
    >>> softmax(z).round(6).tolist()
    [[0.2, 0.8], [1.0, 0.0]]
    """
    p = np.asarray(probabilities, dtype=np.float64)
    return np.log(np.clip(p, floor, None))
