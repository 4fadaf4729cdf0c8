"""Roots of the batched temperature fits' surrogate gradients: safeguarded Newton steps, row by row.

Each row (one weighting of the clusters) is a Chebyshev series of the gradient on [-1, 1]; its root is
found by Newton steps kept inside a bracket, falling back to bisection. Each row runs its own steps to
its own end (a test holds it to the former numpy loop, one array operation per step for all rows: the
same roots bit for bit).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels._compile import compiled

__all__ = ["surrogate_roots"]

#: Functions the kernels here call on each row (see ``compiled``).
_HELPERS = ("_series",)

#: Newton steps at most per row.
_MAX_STEPS = 100


def _series(coeffs: NDArray[np.float64], r: int, x: float) -> float:  # pragma: no cover - compiled
    """Row ``r``'s Chebyshev series at ``x`` (Clenshaw's recurrence)."""
    b1 = 0.0
    b2 = 0.0
    for k in range(coeffs.shape[1] - 1, 0, -1):
        b1, b2 = coeffs[r, k] + 2.0 * x * b1 - b2, b1
    out: float = coeffs[r, 0] + x * b1 - b2
    return out


def _surrogate_roots(
    coeffs: NDArray[np.float64],
    dcoeffs: NDArray[np.float64],
    errors: NDArray[np.float64],
    x_out: NDArray[np.float64],
    slope_out: NDArray[np.float64],
    bracketed: NDArray[np.bool_],
) -> None:  # pragma: no cover - compiled
    for r in range(coeffs.shape[0]):
        x = 0.0
        ok = _series(coeffs, r, -1.0) < -errors[r] and _series(coeffs, r, 1.0) > errors[r]
        if ok:
            a, b = -1.0, 1.0
            for _ in range(_MAX_STEPS):
                g = _series(coeffs, r, x)
                h = _series(dcoeffs, r, x)
                if g < 0:
                    a = x
                else:
                    b = x
                inside = False
                newton = 0.0
                if h > 0:  # else the step is not taken (and g / h is not computed)
                    newton = x - g / h
                    inside = newton > a and newton < b
                new = newton if inside else 0.5 * (a + b)
                ax = abs(x)
                scale = 1.0 if ax <= 1.0 else ax  # numpy.maximum(1.0, |x|), NaN included
                done = g == 0 or abs(new - x) <= 4e-16 * scale or b - a <= 4e-16
                if g != 0:
                    x = new
                if done:
                    break
        x_out[r] = x
        slope_out[r] = _series(dcoeffs, r, x)
        bracketed[r] = ok


def surrogate_roots(
    coeffs: NDArray[np.float64], dcoeffs: NDArray[np.float64], errors: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """Per row, the root on [-1, 1] of the series ``coeffs`` (B, Q) whose derivative is ``dcoeffs``.

    Returns ``x`` (B,), the derivative series at ``x`` (B,), and whether the row's gradient was bracketed
    beyond its error bound ``errors`` (B,) at the ends (``g(-1) < -error`` and ``g(1) > error``); rows not
    bracketed keep ``x = 0``.

    >>> c = np.array([[0.5, 1.0]])  # 0.5 + x: its root at -0.5
    >>> x, slope, ok = surrogate_roots(c, np.array([[1.0]]), np.array([0.0]))
    >>> float(x[0]), float(slope[0]), bool(ok[0])
    (-0.5, 1.0, True)
    """
    n = coeffs.shape[0]
    x, slope, ok = np.empty(n), np.empty(n), np.empty(n, dtype=np.bool_)
    compiled(_surrogate_roots)(
        np.ascontiguousarray(coeffs, dtype=np.float64),
        np.ascontiguousarray(dcoeffs, dtype=np.float64),
        np.ascontiguousarray(errors, dtype=np.float64),
        x,
        slope,
        ok,
    )
    return x, slope, ok


def surrogate_roots_reference(
    coeffs: NDArray[np.float64], dcoeffs: NDArray[np.float64], errors: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """:func:`surrogate_roots` in plain numpy: the reference the tests hold the kernel to, bit for bit.

    The same safeguarded Newton steps as array operations over all rows at once (Clenshaw's recurrence
    in the kernel's arithmetic), each row frozen once its steps are done.
    """
    n = coeffs.shape[0]
    ok = (_series_reference(coeffs, -np.ones(n)) < -errors) & (_series_reference(coeffs, np.ones(n)) > errors)
    a, b, x = -np.ones(n), np.ones(n), np.zeros(n)
    active = ok.copy()
    # rows not active still compute (their values unused): NaNs, overflows and g / 0 are theirs
    with np.errstate(all="ignore"):
        for _ in range(_MAX_STEPS):  # a loop over Newton steps, every active row one step
            g = _series_reference(coeffs, x)
            h = _series_reference(dcoeffs, x)
            a = np.where(active & (g < 0), x, a)
            b = np.where(active & ~(g < 0), x, b)
            newton = x - g / h
            inside = (h > 0) & (newton > a) & (newton < b)
            new = np.where(inside, newton, 0.5 * (a + b))
            done = (g == 0) | (np.abs(new - x) <= 4e-16 * np.maximum(1.0, np.abs(x))) | (b - a <= 4e-16)
            x = np.where(active & (g != 0), new, x)
            active &= ~done
        slope = _series_reference(dcoeffs, x)
    return x, slope, ok


def _series_reference(coeffs: NDArray[np.float64], x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each row's Chebyshev series at its ``x``, by :func:`_series`'s recurrence as array operations."""
    b1, b2 = np.zeros_like(x), np.zeros_like(x)
    for k in range(coeffs.shape[1] - 1, 0, -1):  # a loop over the series' terms, highest first
        b1, b2 = coeffs[:, k] + 2.0 * x * b1 - b2, b1
    out: NDArray[np.float64] = coeffs[:, 0] + x * b1 - b2
    return out
