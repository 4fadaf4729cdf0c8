r"""The smooth recalibration maps: temperature, vector, matrix (ODIR), Dirichlet (ODIR) and beta scaling.

Each ``fit_*`` takes validated logits ``z`` (N, K), labels ``y`` (N,) and row weights ``w`` (R, N) and
returns a :class:`~._method_common.RawFit`; each ``predict_*`` maps parameters with leading axis ``R``
and logits (M, K) to probabilities (R, M, K). Temperature scaling uses the existing solvers of
:mod:`._temperature` / :mod:`._batched`; the others are linear-predictor softmax models solved by
:func:`._newton.solve_newton`.

Weightings with no weight at all, or with a class of zero total weight (the unpenalised optimum then
lies at infinity: that class's logit is pushed to minus infinity), are not solved: they keep the
identity map (no recalibration) and a note says which resamples.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sitecal.calibration._batched import BatchedTemperatureSolver
from sitecal.calibration._method_common import (
    Params,
    RawFit,
    batch_softmax,
    class_weights,
    log_softmax_rows,
    resamples_phrase,
)
from sitecal.calibration._newton import solve_newton
from sitecal.calibration._temperature import bound_note, fit_validated

__all__ = [
    "DIRICHLET_EPSILON",
    "fit_beta",
    "fit_linear",
    "fit_temperature_batch",
    "linear_features",
    "predict_beta",
    "predict_linear",
    "predict_temperature",
]

#: Probabilities are floored here before the log in Dirichlet calibration's features (machine epsilon,
#: as the reference implementation of Kull et al. 2019 clips them).
DIRICHLET_EPSILON = float(np.finfo(np.float64).eps)


# -- temperature ---------------------------------------------------------------------------------------
def fit_temperature_batch(
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    w: NDArray[np.float64] | None,
    *,
    bounds: tuple[float, float],
    tol: float,
    max_iter: int,
) -> RawFit:
    """``T`` per weighting; ``w`` None is exactly :func:`~sitecal.calibration.fit_temperature`."""
    low, high = bounds
    if w is None:
        fit = fit_validated(z, y, tol=tol, max_iter=max_iter, low=low, high=high)
        # a fit stopped on a bound of T is finished (the note says why); only max_iter counts as not converged
        converged = fit.converged or fit.log_temperature in (math.log(low), math.log(high))
        return RawFit(
            {"temperature": np.array([fit.temperature]), "log_temperature": np.array([fit.log_temperature])},
            np.array([converged]),
            [fit.note] if fit.note else [],
        )
    r = w.shape[0]
    s = np.zeros(r)
    bound = np.zeros(r, dtype=np.int8)
    usable = w.sum(axis=1) > 0
    notes: list[str] = []
    if usable.any():
        n = z.shape[0]
        solver = BatchedTemperatureSolver(
            z,
            y,
            np.arange(n, dtype=np.int64),
            n,
            bounds=bounds,
            func="fit_method",
            tol=tol,
            max_iter=max_iter,
        )
        solution = solver.solve(w[usable])
        s[usable], bound[usable] = solution.log_temperature, solution.bound
    for code, side in ((-1, "lower"), (1, "upper")):
        if (bound == code).any():
            notes.append(resamples_phrase(bound == code) + bound_note(side, low, high))
    notes += _empty_notes(~usable)
    present = class_weights(w, y, z.shape[1]) > 0
    single = usable & (present.sum(axis=1) == 1)
    if single.any():
        notes.append(resamples_phrase(single) + "only one class has positive weight; T is poorly identified.")
    return RawFit({"temperature": np.exp(s), "log_temperature": s}, np.ones(r, dtype=bool), notes)


def predict_temperature(params: Params, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """softmax(z / T) for each of the R temperatures: (R, M, K)."""
    t = np.asarray(params["temperature"], dtype=np.float64)
    return batch_softmax(z[None, :, :] / t[:, None, None])


# -- linear-predictor models (vector, matrix, dirichlet) ----------------------------------------------
def linear_features(method: str, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Features ``[g(z), 1]`` (M, K + 1): ``g`` is the identity, or the clipped log-softmax for Dirichlet."""
    g = np.maximum(log_softmax_rows(z), math.log(DIRICHLET_EPSILON)) if method == "dirichlet" else z
    return np.concatenate([g, np.ones((z.shape[0], 1))], axis=1)


def fit_linear(
    method: str,
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    w: NDArray[np.float64],
    *,
    reg_lambda: float,
    reg_mu: float,
    tol: float,
    max_iter: int,
) -> RawFit:
    """Vector scaling (``method="vector"``), or matrix / Dirichlet scaling with the ODIR penalty.

    ``theta = [W | b]`` (K, K + 1). Vector scaling frees only the diagonal of ``W`` and ``b_1..b_{K-1}``
    (``b_0 = 0``). Matrix / Dirichlet free everything, except that with ``reg_lambda = 0`` the first
    row of ``W`` and with ``reg_mu = 0`` ``b_0`` are held at their identity values (the softmax is
    unchanged by adding one vector to every row of ``W``, or one number to every ``b_k``).
    """
    r, k = w.shape[0], z.shape[1]
    x = linear_features(method, z)
    identity = np.concatenate([np.eye(k), np.zeros((k, 1))], axis=1)
    free = np.ones((k, k + 1), dtype=bool)
    penalty = np.zeros((k, k + 1))
    if method == "vector":
        free[:, :k] = np.eye(k, dtype=bool)
        free[0, k] = False
    else:
        off = ~np.eye(k, dtype=bool)
        penalty[:, :k][off] = reg_lambda / (k * (k - 1))
        penalty[:, k] = reg_mu / k
        if reg_lambda == 0.0:
            free[0, :k] = False
        if reg_mu == 0.0:
            free[0, k] = False
    theta = np.broadcast_to(identity, (r, k, k + 1)).copy()
    converged = np.ones(r, dtype=bool)
    iterations = np.zeros(r, dtype=np.int64)
    solvable, notes = _solvable(w, y, k)
    if solvable.any():
        result = solve_newton(
            x,
            y,
            w[solvable],
            theta[solvable],
            np.broadcast_to(free, (int(solvable.sum()), k, k + 1)),
            penalty,
            tol=tol,
            max_iter=max_iter,
        )
        theta[solvable], converged[solvable] = result.theta, result.converged
        iterations[solvable] = result.iterations
    notes += _convergence_notes(converged, max_iter)
    if method == "vector":
        params: dict[str, NDArray[Any]] = {
            "a": np.einsum("rkk->rk", theta[:, :, :k]).copy(),
            "b": theta[:, :, k].copy(),
        }
    else:
        params = {"W": theta[:, :, :k].copy(), "b": theta[:, :, k].copy()}
    params["iterations"] = iterations
    return RawFit(params, converged, notes)


def predict_linear(method: str, params: Params, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """softmax(W g(z) + b) per fit (vector scaling: ``W = diag(a)``): (R, M, K)."""
    x = linear_features(method, z)
    b = np.asarray(params["b"], dtype=np.float64)
    if method == "vector":
        eta = np.asarray(params["a"], dtype=np.float64)[:, None, :] * x[None, :, :-1]
    else:
        eta = np.einsum("mj,rkj->rmk", x[:, :-1], np.asarray(params["W"], dtype=np.float64))
    return batch_softmax(eta + b[:, None, :])


# -- beta calibration -----------------------------------------------------------------------------------
def _beta_features(z: NDArray[np.float64]) -> NDArray[np.float64]:
    log_p = log_softmax_rows(z)
    return np.stack([log_p[:, 1], -log_p[:, 0], np.ones(z.shape[0])], axis=1)


def fit_beta(
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    w: NDArray[np.float64],
    *,
    tol: float,
    max_iter: int,
) -> RawFit:
    """Beta calibration ``sigmoid(a ln p - b ln(1 - p) + c)`` with betacal's rule for negative a or b."""
    r = w.shape[0]
    x = _beta_features(z)
    theta = np.zeros((r, 2, 3))
    theta[:, 1] = (1.0, 1.0, 0.0)  # a = b = 1, c = 0: the identity map
    free = np.zeros((r, 2, 3), dtype=bool)
    free[:, 1] = True
    converged = np.ones(r, dtype=bool)
    iterations = np.zeros(r, dtype=np.int64)
    solvable, notes = _solvable(w, y, 2)
    zero = np.zeros(r, dtype=bool)
    fixed = {"a": zero.copy(), "b": zero.copy()}

    def solve(rows: NDArray[np.bool_]) -> None:
        if rows.any():
            res = solve_newton(
                x, y, w[rows], theta[rows], free[rows], np.zeros((2, 3)), tol=tol, max_iter=max_iter
            )
            theta[rows], converged[rows] = res.theta, res.converged
            iterations[rows] += res.iterations

    solve(solvable)
    # Kull et al. (2017) / betacal: a negative a (else a negative b) is fixed at 0 and the fit repeated
    for first, second in ((0, 1), (1, 0)):
        bad = solvable & ~fixed["a"] & ~fixed["b"] & (theta[:, 1, first] < 0.0)
        theta[bad, 1, first], free[bad, 1, first] = 0.0, False
        fixed["ab"[first]] |= bad
        solve(bad)
        # the remaining coefficient can still come out negative: it is then fixed at 0 as well (a
        # constant map, the weighted base rate), where betacal would keep a decreasing map
        worse = bad & (theta[:, 1, second] < 0.0)
        theta[worse, 1, second], free[worse, 1, second] = 0.0, False
        fixed["ab"[second]] |= worse
        solve(worse)
    for name in ("a", "b"):
        if fixed[name].any():
            notes.append(
                resamples_phrase(fixed[name])
                + f"the fitted {name} was negative, so {name} was fixed at 0 and the fit repeated "
                "(beta calibration's rule)."
            )
    notes += _convergence_notes(converged, max_iter)
    params: dict[str, NDArray[Any]] = {
        "a": theta[:, 1, 0].copy(),
        "b": theta[:, 1, 1].copy(),
        "c": theta[:, 1, 2].copy(),
        "iterations": iterations,
    }
    return RawFit(params, converged, notes)


def predict_beta(params: Params, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """[1 - q, q] with ``q = sigmoid(a ln p - b ln(1 - p) + c)``: (R, M, 2)."""
    x = _beta_features(z)
    coef = np.stack([np.asarray(params[n], dtype=np.float64) for n in ("a", "b", "c")], axis=1)
    eta = np.einsum("mf,rf->rm", x, coef)
    return batch_softmax(np.stack([np.zeros_like(eta), eta], axis=2))


# -- shared ---------------------------------------------------------------------------------------------
def _empty_notes(empty: NDArray[np.bool_]) -> list[str]:
    if not empty.any():
        return []
    return [resamples_phrase(empty) + "every row has weight 0; the identity map (no recalibration) is used."]


def _solvable(w: NDArray[np.float64], y: NDArray[np.int64], k: int) -> tuple[NDArray[np.bool_], list[str]]:
    """Weightings that have weight in every class, and notes on the others (left at the identity)."""
    empty = w.sum(axis=1) <= 0
    present = class_weights(w, y, k) > 0
    missing = ~empty & ~present.all(axis=1)
    notes = _empty_notes(empty)
    if missing.any():
        absent = sorted({int(c) for c in np.flatnonzero((~present[missing]).any(axis=0))})
        notes.append(
            resamples_phrase(missing)
            + f"class(es) {absent} have no weight, so the fit has no finite optimum; the identity map "
            "(no recalibration) is used."
        )
    return ~empty & ~missing, notes


def _convergence_notes(converged: NDArray[np.bool_], max_iter: int) -> list[str]:
    if converged.all():
        return []
    return [
        resamples_phrase(~converged)
        + f"did not converge in {max_iter} Newton steps (often separable data: the NLL keeps falling as "
        "the parameters grow); the last iterate is used."
    ]
