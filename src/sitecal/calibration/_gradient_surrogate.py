"""The batched temperature fits' surrogate: each row's NLL gradient in ``s`` interpolated on an interval.

See :mod:`sitecal.calibration._batched`: the per-row gradients' Chebyshev interpolants, summed per cluster,
and a bound on their interpolation error measured at check points between the nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev
from numpy.typing import NDArray

from sitecal._kernels import nll_row_terms

__all__ = ["WIDTH_IN_SE", "Surrogate"]

#: Half-width of the surrogate's interval in cluster-robust standard errors of ``s``.
WIDTH_IN_SE = 8.0
_DEGREES = (8, 12, 16, 24)
_SAFETY = 10.0  # factor on the interpolation error measured at the check points

Sums = tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]


def _cluster_sums(
    values: NDArray[np.float64], cluster_of_row: NDArray[np.int64], k: int
) -> NDArray[np.float64]:
    order = np.argsort(cluster_of_row, kind="stable")
    starts = np.searchsorted(cluster_of_row[order], np.arange(k))
    out: NDArray[np.float64] = np.add.reduceat(values[order], starts, axis=0)
    return out


@dataclass(frozen=True)
class Surrogate:
    """A gradient surrogate of clustered rows.

    Its interval in s, its degree ``Q``, and per cluster its Chebyshev coefficients (K, Q) and the bound
    on their interpolation error (K,).
    """

    interval: tuple[float, float]
    degree: int
    coeffs: NDArray[np.float64]
    errors: NDArray[np.float64]


def _row_terms(d_t: NDArray[np.float64], s: float) -> Sums:
    """Each row's ``ell``, ``d ell / ds`` and ``d2 ell / ds2`` at ``s`` from class-major ``d`` (C, N)."""
    beta = math.exp(-s)
    m, total, mean_d, var_d = nll_row_terms(d_t, beta)  # as the fit's objective computes them
    return m + np.log(total), -beta * mean_d, beta * beta * var_d + beta * mean_d


def _interval_around(
    d_t: NDArray[np.float64],
    cluster_of_row: NDArray[np.int64],
    k: int,
    s0: float,
    bounds: tuple[float, float],
) -> tuple[float, float, float]:
    """The surrogate's interval around a fit ``s0``, and the fit's curvature.

    ``WIDTH_IN_SE`` cluster-robust SEs either side, within ``bounds`` (of s); the curvature is the sum
    of the rows' second derivatives at ``s0``.
    """
    _, g0, h0 = _row_terms(d_t, s0)
    score = _cluster_sums(g0, cluster_of_row, k)
    curvature = float(h0.sum())
    se = math.sqrt(float(np.sum(score * score))) / curvature if curvature > 0 else math.inf
    half = min(max(WIDTH_IN_SE * se, 1e-6), 2.0)
    return max(s0 - half, bounds[0]), min(s0 + half, bounds[1]), curvature


def _interpolant(
    d_t: NDArray[np.float64],
    cluster_of_row: NDArray[np.int64],
    k: int,
    interval: tuple[float, float],
    certified: Callable[[NDArray[np.float64]], bool],
) -> tuple[int, NDArray[np.float64], NDArray[np.float64]]:
    """The rows' gradient interpolated on ``interval``: ``(Q, coefficients, errors)``, per cluster.

    Per cluster, the Chebyshev coefficients (K, Q) of its rows' gradient and the bound on their
    interpolation error (K,), at the first degree of ``_DEGREES`` whose errors ``certified`` accepts
    (else the last).
    """
    a, b = interval
    mid, rad = 0.5 * (a + b), 0.5 * (b - a)
    for q in _DEGREES:  # a loop over candidate degrees, until the interpolation error is tiny
        x = np.cos(np.pi * (np.arange(q) + 0.5) / q)
        nodes = np.stack([_row_terms(d_t, mid + rad * xj)[1] for xj in x], axis=1)  # (N, Q)
        # coefficients of the interpolant through the first-kind Chebyshev nodes
        basis = np.cos(np.pi * np.outer(np.arange(q), np.arange(q) + 0.5) / q) * (2.0 / q)
        basis[0] *= 0.5
        coeffs = np.einsum("nj,kj->nk", nodes, basis)
        checks = np.cos(np.pi * (np.arange(q + 1) + 0.5 / (q + 1)) / (q + 1))
        checks = np.concatenate([[-1.0, 1.0], checks])
        exact = np.stack([_row_terms(d_t, mid + rad * xc)[1] for xc in checks], axis=1)
        approx = chebyshev.chebval(checks, coeffs.T)  # (N, M)
        row_error = _SAFETY * np.abs(approx - exact).max(axis=1)
        errors = _cluster_sums(row_error, cluster_of_row, k)
        if certified(errors):
            break
    return q, _cluster_sums(coeffs, cluster_of_row, k), errors
