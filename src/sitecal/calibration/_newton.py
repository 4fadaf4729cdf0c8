r"""Batched damped Newton for penalised multinomial logistic models with linear predictors.

Every smooth recalibration map of :mod:`._scaling_methods` except temperature scaling is a softmax of
a linear predictor of fixed features ``x`` (``N x F``)::

    eta[n, k] = sum_f theta[k, f] * x[n, f],        p[n] = softmax(eta[n]),

with some entries of ``theta`` (``K x F``) pinned (vector scaling pins the off-diagonal ones, beta
calibration the whole class-0 row). For ``R`` row weightings ``w`` (bootstrap multiplicities) the
solver minimises, for each ``r`` on its own,

.. math:: f_r(\theta) = \frac{\sum_n w_{rn}\,\ell_n(\theta)}{\sum_n w_{rn}}
          + \sum_{k,f} L_{kf}\,\theta_{kf}^2,
          \qquad \ell_n = \log\sum_k e^{\eta_{nk}} - \eta_{n y_n},

by Newton's method with the exact gradient and Hessian (``R x P`` and ``R x P x P``, ``P = K F``),
``numpy.linalg.solve`` and a backtracking (Armijo) line search per problem. The work is chunked over
``R`` so that no temporary holds more than about ``CHUNK_ELEMENTS`` floats.

Pinned entries get an identity row and column in the Hessian and a zero gradient, so their Newton step
is zero and every problem keeps the same shape whatever it pins. A tiny ridge (``RIDGE`` times the
largest free diagonal entry, and at least ``RIDGE``) keeps the solve defined where the data leave a
direction flat (a feature that is zero on every row, such as the constant first logit of a
single-logit binary model); the gradient is zero along such a direction, so the ridge changes the
step, never the fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["CHUNK_ELEMENTS", "NewtonResult", "solve_newton"]

#: Largest number of floats in one (resamples x rows x classes x classes) temporary.
CHUNK_ELEMENTS = 20_000_000
#: Relative ridge added to the Newton system (see the module docstring).
RIDGE = 1e-12
_ARMIJO = 1e-4
_MAX_HALVINGS = 60
_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class NewtonResult:
    """Solutions of a batch of problems.

    Attributes
    ----------
    theta : numpy.ndarray, shape (R, K, F)
    converged : numpy.ndarray of bool, shape (R,)
        Gradient test met (or the optimum located to machine precision).
    iterations : numpy.ndarray of int, shape (R,)
    gradient : numpy.ndarray, shape (R,)
        Max-norm of the free gradient at the result.
    """

    theta: NDArray[np.float64]
    converged: NDArray[np.bool_]
    iterations: NDArray[np.int64]
    gradient: NDArray[np.float64]


class _Problem:
    """Weighted objective, gradient and Hessian for a chunk of weightings (shared features).

    Arrays are laid out (weighting, class, row) so that every contraction over rows is one GEMM per
    weighting (``numpy.matmul`` on stacks), whose result does not depend on the other weightings.
    """

    def __init__(
        self, x: NDArray[np.float64], labels: NDArray[np.int64], penalty: NDArray[np.float64]
    ) -> None:
        n, f = x.shape
        self.x = x
        self.xt = np.ascontiguousarray(x.T)
        self.labels = labels
        self.rows = np.arange(n)
        self.penalty = penalty
        self.xx = (x[:, :, None] * x[:, None, :]).reshape(n, f * f)

    def _eta(
        self, theta: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Linear predictor (r, K, N), its log-sum-exp over classes and the per-row NLL (r, N)."""
        eta = np.matmul(theta, self.xt)
        top = eta.max(axis=1, keepdims=True)
        lse = top[:, 0, :] + np.log(np.exp(eta - top).sum(axis=1))
        return eta, lse, lse - eta[:, self.labels, self.rows]

    def _penalty(self, theta: NDArray[np.float64]) -> NDArray[np.float64]:
        out: NDArray[np.float64] = (self.penalty * theta * theta).sum(axis=(1, 2))
        return out

    def value(self, theta: NDArray[np.float64], w: NDArray[np.float64]) -> NDArray[np.float64]:
        _, _, loss = self._eta(theta)
        out: NDArray[np.float64] = np.einsum("rn,rn->r", w, loss) / w.sum(axis=1)
        return out + self._penalty(theta)

    def derivatives(
        self, theta: NDArray[np.float64], w: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        r, k, f = theta.shape
        n = self.x.shape[0]
        eta, lse, loss = self._eta(theta)
        wn = w / w.sum(axis=1, keepdims=True)
        value = np.einsum("rn,rn->r", wn, loss) + self._penalty(theta)
        p = np.exp(eta - lse[:, None, :])
        wp = wn[:, None, :] * p  # (r, K, N)
        resid = wp.copy()
        resid[:, self.labels, self.rows] -= wn
        grad = np.matmul(resid, self.x) + 2.0 * self.penalty * theta
        a = -wp[:, :, None, :] * p[:, None, :, :]  # (r, K, L, N): w p_k (delta_kl - p_l)
        idx = np.arange(k)
        a[:, idx, idx, :] += wp
        # H[(k, f), (l, g)] = sum_n a[k, l, n] x[n, f] x[n, g]: one GEMM per weighting
        h = np.matmul(a.reshape(r, k * k, n), self.xx)
        hess = h.reshape(r, k, k, f, f).transpose(0, 1, 3, 2, 4).reshape(r, k * f, k * f)
        diag = np.arange(k * f)
        hess[:, diag, diag] += 2.0 * self.penalty.reshape(-1)
        return value, grad, hess


def solve_newton(
    x: NDArray[np.float64],
    labels: NDArray[np.int64],
    weights: NDArray[np.float64],
    theta0: NDArray[np.float64],
    free: NDArray[np.bool_],
    penalty: NDArray[np.float64],
    *,
    tol: float,
    max_iter: int,
) -> NewtonResult:
    """Minimise the weighted, penalised multinomial NLL for each row of ``weights``.

    Parameters
    ----------
    x : numpy.ndarray, shape (N, F)
        Features shared by every class.
    labels : numpy.ndarray of int64, shape (N,)
    weights : numpy.ndarray, shape (R, N)
        Nonnegative row weights; every row must have a positive total (the caller sets aside the
        others).
    theta0 : numpy.ndarray, shape (R, K, F)
        Start; pinned entries keep their start value.
    free : numpy.ndarray of bool, shape (R, K, F)
        Entries that are optimised.
    penalty : numpy.ndarray, shape (K, F)
        Nonnegative coefficients ``L`` of the quadratic penalty.
    tol : float
        Stop when the max-norm of the free gradient is at most ``tol * max(1, its value at the start)``.
    max_iter : int
        Newton steps allowed per problem.
    """
    r_total, k = theta0.shape[:2]
    n = x.shape[0]
    problem = _Problem(x, labels, penalty)
    step = max(1, CHUNK_ELEMENTS // max(1, n * k * k))
    theta = theta0.copy()
    converged = np.zeros(r_total, dtype=bool)
    iterations = np.zeros(r_total, dtype=np.int64)
    gradient = np.zeros(r_total)
    for start in range(0, r_total, step):  # a loop over chunks of weightings
        sl = slice(start, start + step)
        t, c, it, g = _solve_chunk(problem, weights[sl], theta[sl], free[sl], tol=tol, max_iter=max_iter)
        theta[sl], converged[sl], iterations[sl], gradient[sl] = t, c, it, g
    return NewtonResult(theta, converged, iterations, gradient)


def _solve_chunk(
    problem: _Problem,
    w: NDArray[np.float64],
    theta0: NDArray[np.float64],
    free: NDArray[np.bool_],
    *,
    tol: float,
    max_iter: int,
) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.int64], NDArray[np.float64]]:
    r, k, f = theta0.shape
    p = k * f
    theta = theta0.reshape(r, p).copy()
    mask = free.reshape(r, p).astype(np.float64)
    value, grad, hess = problem.derivatives(theta0, w)
    g = grad.reshape(r, p) * mask
    g_norm = np.abs(g).max(axis=1)
    target = tol * np.maximum(1.0, g_norm)
    converged = g_norm <= target
    iterations = np.zeros(r, dtype=np.int64)
    active = np.flatnonzero(~converged)
    eye = np.eye(p)
    for _ in range(max_iter):  # a loop over Newton steps (each problem frozen on its own test)
        if not active.shape[0]:
            break
        m = mask[active]
        h = hess[active] * (m[:, :, None] * m[:, None, :]) + eye * (1.0 - m)[:, None, :]
        scale = np.abs(np.einsum("rii->ri", h) * m).max(axis=1)
        h += eye * (RIDGE * np.maximum(scale, 1.0))[:, None, None]
        ga = g[active]
        direction = -np.linalg.solve(h, ga[:, :, None])[:, :, 0] * m
        slope = np.einsum("rp,rp->r", ga, direction)  # < 0 for a descent direction
        f0 = value[active]
        t = np.ones(active.shape[0])
        # a step whose predicted decrease is below the rounding of f is taken whole: near the optimum
        # the Armijo test would compare values equal to the last bit
        accepted = -slope <= 4.0 * _EPS * np.maximum(1.0, np.abs(f0))
        pending = np.flatnonzero(~accepted)
        for _halving in range(_MAX_HALVINGS):  # a loop over backtracking halvings
            if not pending.shape[0]:
                break
            trial = theta[active[pending]] + t[pending, None] * direction[pending]
            # a full step on nearly separable data can overflow; such a trial simply fails the test
            with np.errstate(over="ignore", invalid="ignore"):
                f_new = problem.value(trial.reshape(-1, k, f), w[active[pending]])
            ok = np.isfinite(f_new) & (f_new <= f0[pending] + _ARMIJO * t[pending] * slope[pending])
            accepted[pending[ok]] = True
            pending = pending[~ok]
            t[pending] *= 0.5
        iterations[active] += 1
        moved = active[accepted]
        theta[moved] += t[accepted, None] * direction[accepted]
        if moved.shape[0]:
            v, gr, he = problem.derivatives(theta[moved].reshape(-1, k, f), w[moved])
            value[moved], hess[moved] = v, he
            g[moved] = gr.reshape(-1, p) * mask[moved]
        g_norm = np.abs(g).max(axis=1)
        converged = g_norm <= target
        # no decrease along the Newton direction: f is flat to rounding; accept a gradient near the test
        stuck = active[~accepted]
        converged[stuck] |= g_norm[stuck] <= 1e3 * target[stuck]
        active = moved[~converged[moved]]
    return theta.reshape(r, k, f), converged, iterations, g_norm
