"""Per-row metric terms from class-major probabilities (C, N), as (columns, values) pairs (k, N).

The refit bootstraps recompute every row's probabilities in every resample; kept class-major, each
class is one contiguous array and a row's arg-max, confidence or true-class probability is a pass over
C arrays instead of a strided reduction over rows. Each function here gives the values its row-major
counterpart in :mod:`sitecal.metrics._scores` / :mod:`._calibration_error` gives (a test pins them).

A metric's terms come as ``columns`` and ``values``, each (k, N): entry ``j`` of row ``i`` adds
``values[j, i]`` to term column ``columns[j, i]`` (row ``i`` of the dense (N, J) terms is zero elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels import top_label_entries as compiled_top_label_entries
from sitecal.metrics._binning import bin_edges
from sitecal.metrics._scores import NLL_CLIP

__all__ = ["SparseTerms", "accuracy_t", "brier_t", "nll_t", "score_entries", "top_label_entries"]

SparseTerms = tuple[NDArray[np.int64], NDArray[np.float64]]


def _predicted(probs_t: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Arg-max class (lowest index on ties, as ``numpy.argmax``) and its probability, per row."""
    predicted = np.zeros(probs_t.shape[1], dtype=np.int64)
    best = probs_t[0].copy()
    for k in range(1, probs_t.shape[0]):  # a loop over classes
        better = probs_t[k] > best
        predicted[better] = k
        np.maximum(best, probs_t[k], out=best)
    return predicted, best


def _true_class(probs_t: NDArray[np.float64], labels: NDArray[np.int64]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = np.take_along_axis(probs_t, labels[None, :], axis=0)[0]
    return out


def nll_t(probs_t: NDArray[np.float64], labels: NDArray[np.int64]) -> NDArray[np.float64]:
    """``-log max(p_y, 1e-12)`` per row (:func:`~sitecal.metrics._scores.nll_terms`)."""
    out: NDArray[np.float64] = -np.log(np.maximum(_true_class(probs_t, labels), NLL_CLIP))
    return out


def brier_t(probs_t: NDArray[np.float64], labels: NDArray[np.int64]) -> NDArray[np.float64]:
    """``sum_k (p_k - 1[y = k])^2`` per row (:func:`~sitecal.metrics._scores.brier_terms`)."""
    out = np.zeros(probs_t.shape[1])
    for k in range(probs_t.shape[0]):  # a loop over classes, summed in class order
        d = probs_t[k] - (labels == k)
        out += d * d
    return out


def accuracy_t(probs_t: NDArray[np.float64], labels: NDArray[np.int64]) -> NDArray[np.float64]:
    """``1[argmax = y]`` per row (:func:`~sitecal.metrics._scores.accuracy_terms`)."""
    out: NDArray[np.float64] = (_predicted(probs_t)[0] == labels).astype(np.float64)
    return out


def score_entries(
    score: Callable[[NDArray[np.float64], NDArray[np.int64]], NDArray[np.float64]],
    probs_t: NDArray[np.float64],
    labels: NDArray[np.int64],
) -> SparseTerms:
    """A mean score's terms: column 0 (ones) and column 1 (the row's ``score``, e.g. :func:`nll_t`)."""
    n = labels.shape[0]
    values = np.empty((2, n))
    values[0] = 1.0
    values[1] = score(probs_t, labels)
    return np.broadcast_to(np.array([[0], [1]], dtype=np.int64), (2, n)), values


def top_label_entries(
    probs_t: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int, parts: str
) -> SparseTerms:
    """Top-label terms: column 0 (ones), then one per-bin block per letter of ``parts``.

    The blocks, ``n_bins`` columns each, in the order given: ``n`` count, ``g`` correctness minus
    confidence, ``a`` correctness, ``c`` confidence; equal-width bins on (lo, hi].
    """
    edges = bin_edges(np.empty(0), n_bins, "width")
    return compiled_top_label_entries(probs_t, labels, edges, parts)
