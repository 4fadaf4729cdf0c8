"""Bin edges and bin membership for the ECE family; the one place the edge convention lives.

Convention (pinned by ``tests/metrics/test_binning.py``): bins are half-open on the left,
``(lo, hi]``; a value equal to an edge belongs to the bin on its left, and a value of exactly 0
belongs to the first bin. Equal-width edges are ``numpy.linspace(0, 1, n_bins + 1)``. Equal-mass
edges are ``[0, q_1, ..., q_{B-1}, 1]`` with ``q_k`` the ``k/B`` quantile of the values by the
inverted-CDF rule (``q_k`` is the ``ceil(k N / B)``-th smallest value, an observed value), so with
distinct values and ``B`` dividing ``N`` every bin holds exactly ``N / B`` values. Ties never split:
all copies of a value go to the same bin (the one whose upper edge it is or lies in), so bins can
hold more or fewer than ``N / B`` values and some can be empty (kept, with count 0). This rule
depends only on the multiset of values, so results do not depend on sample order.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

__all__ = ["Binning", "assign_bins", "bin_edges", "binned_sums", "mass_edge_positions"]

Binning = Literal["width", "mass"]


def mass_edge_positions(n: int, n_bins: int) -> NDArray[np.int64]:
    """0-based positions in the sorted values of the inner equal-mass edges, shape (n_bins - 1,).

    ``ceil(k n / B) - 1`` for ``k = 1 .. B - 1``, computed in integers so no rounding can move an edge.
    """
    k = np.arange(1, n_bins, dtype=np.int64)
    out: NDArray[np.int64] = -((-k * n) // n_bins) - 1
    return out


def bin_edges(values: NDArray[np.float64], n_bins: int, binning: Binning) -> NDArray[np.float64]:
    """Edges of ``n_bins`` bins on [0, 1], shape (n_bins + 1,); ``values`` is 1-D in [0, 1]."""
    if binning == "width":
        return np.linspace(0.0, 1.0, n_bins + 1)
    ordered = np.sort(values)
    inner = ordered[mass_edge_positions(ordered.shape[0], n_bins)]
    return np.concatenate([[0.0], inner, [1.0]])


def assign_bins(values: NDArray[np.float64], edges: NDArray[np.float64]) -> NDArray[np.int64]:
    """Index in [0, len(edges) - 2] of the ``(lo, hi]`` bin of each value; 0 goes to bin 0."""
    idx = np.searchsorted(edges, values, side="left") - 1
    out: NDArray[np.int64] = np.clip(idx, 0, edges.shape[0] - 2).astype(np.int64)
    return out


def binned_sums(
    values: NDArray[np.float64], targets: NDArray[np.float64], edges: NDArray[np.float64]
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Per-bin count, sum of ``values`` and sum of ``targets``, each of shape (n_bins,)."""
    n_bins = edges.shape[0] - 1
    idx = assign_bins(values, edges)
    count = np.bincount(idx, minlength=n_bins).astype(np.int64)
    sum_values = np.bincount(idx, weights=values, minlength=n_bins).astype(np.float64)
    sum_targets = np.bincount(idx, weights=targets, minlength=n_bins).astype(np.float64)
    return count, sum_values, sum_targets
