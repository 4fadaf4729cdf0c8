"""Temperature scaling: one temperature fitted by minimising the mean NLL over log T."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._kernels import nll_row_terms
from sitecal._validation import check_float, check_int, check_labels, check_logits
from sitecal.errors import ConvergenceWarning, DataError

__all__ = ["DEFAULT_BOUNDS", "TemperatureFit", "fit_temperature", "stored_temperature"]

#: Default search interval for T. Outside it the data, not the model, decide the answer: the NLL
#: keeps falling as T -> 0 on separable data and as T -> inf on uninformative logits.
DEFAULT_BOUNDS = (0.05, 100.0)

# (value, gradient, second derivative) of an objective of s = log T
Objective = Callable[[float], tuple[float, float, float]]


@dataclass(frozen=True)
class TemperatureFit:
    """Result of :func:`fit_temperature`.

    Attributes
    ----------
    temperature : float
        Fitted ``T = exp(log_temperature) > 0``. Divide logits by it.
    log_temperature : float
        ``s = log T``, the variable actually optimised.
    n : int
        Rows used.
    nll_before : float
        Mean NLL (nats) at ``T = 1``, computed from the logits (no clipping).
    nll_after : float
        Mean NLL at the fitted ``T``.
    iterations : int
        Newton / bisection steps taken (0 when a bound or the start already satisfied the test).
    gradient : float
        Derivative of the minimised objective with respect to ``s`` at the result; ``|gradient| <=
        tol`` when the solve converged to an interior optimum.
    converged : bool
        True when the minimiser was located to the tolerance (or to machine precision) inside the
        bounds. False when a bound was hit (see ``note``) or ``max_iter`` ran out.
    note : str
        "" or a sentence for the report: which bound was hit and why, one class only, shrinkage used.
    """

    temperature: float
    log_temperature: float
    n: int
    nll_before: float
    nll_after: float
    iterations: int
    gradient: float
    converged: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; :meth:`from_dict` restores it exactly (floats bit-identical via repr)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TemperatureFit:
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(
                temperature=stored_temperature(data["temperature"]),
                log_temperature=float(data["log_temperature"]),
                n=int(data["n"]),
                nll_before=float(data["nll_before"]),
                nll_after=float(data["nll_after"]),
                iterations=int(data["iterations"]),
                gradient=float(data["gradient"]),
                converged=bool(data["converged"]),
                note=str(data.get("note", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"TemperatureFit.from_dict got a malformed dict ({exc!r}); pass what to_dict() wrote."
            ) from exc


def stored_temperature(value: Any) -> float:
    """A temperature read back from a document: finite and within :data:`DEFAULT_BOUNDS`, else ValueError.

    Every fit is bounded there, so a stored value outside was not written by a fit (``T = 1e-300`` turns
    every prediction one-hot): refused rather than deployed.

    >>> stored_temperature(1.25)
    1.25
    """
    t = float(value)
    low, high = DEFAULT_BOUNDS
    if not (math.isfinite(t) and low * (1 - 1e-9) <= t <= high * (1 + 1e-9)):
        raise ValueError(f"temperature {t!r} outside the range every fit keeps to, [{low:g}, {high:g}]")
    return t


class _NLL:
    """Mean NLL of softmax(x / T) as a function of s = log T, with exact derivatives.

    Works on ``d = x - x_y`` (the true class's logit subtracted from each row), so that
    ``NLL_i = logsumexp(beta * d_i)`` with ``beta = 1 / T``. ``f`` is convex in ``beta`` (a
    logsumexp of a linear map) but not in ``s``; it is unimodal in ``s`` because ``beta = exp(-s)``
    is monotone, which is what the bracketing solver relies on.
    """

    def __init__(self, logits: NDArray[np.float64], labels: NDArray[np.int64]) -> None:
        true = logits[np.arange(logits.shape[0]), labels]
        self.d = logits - true[:, None]
        # class-major (each class one contiguous array): a row's max and sums are elementwise passes
        self._d_t = np.ascontiguousarray(self.d.T)
        self._space: NDArray[np.float64] | None = None  # the per-row passes' workspace, made on first use

    def __call__(self, s: float) -> tuple[float, float, float]:
        beta = math.exp(-s)
        if self._space is None:
            self._space = np.empty((self._d_t.shape[0] + 4, self._d_t.shape[1]))
        # per row, in two compiled passes around numpy's exp: m = max(beta d) (>= 0: the true class has
        # d = 0), the sum of exp(beta d - m), E_p[d] (the d/d(beta) of the row's NLL) and the two-pass
        # variance of d (its d2/d(beta)2), each as ``z = beta * d_t; m = z.max(axis=0); ...`` gives it
        m, total, mean_d, var_d = nll_row_terms(self._d_t, beta, self._space)
        value = float(np.mean(m + np.log(total)))
        g_beta = float(mean_d.mean())
        h_beta = float(var_d.mean())
        # chain rule with d(beta)/ds = -beta
        return value, -beta * g_beta, beta * beta * h_beta + beta * g_beta


@dataclass(frozen=True)
class _Solution:
    s: float
    value: float
    gradient: float
    hessian: float
    iterations: int
    converged: bool
    bound: str  # "", "lower" or "upper"
    stopped: str  # "", "max_iter" or "precision"


def solve_log_temperature(
    objective: Objective, *, lo: float, hi: float, start: float, tol: float, max_iter: int
) -> _Solution:
    """Minimise a unimodal objective of s on [lo, hi] by safeguarded Newton on its gradient.

    The gradient's sign brackets the minimiser: the bracket [a, b] keeps ``g(a) < 0 < g(b)``. Each
    step is Newton's ``s - g / h`` when ``h > 0``, the step lands strictly inside the bracket and it
    at least halves the previous step (Numerical Recipes' ``rtsafe``); otherwise bisection. Stops on
    ``|g| <= tol``, on a bracket at machine precision, or after ``max_iter`` steps.
    """
    v_lo, g_lo, h_lo = objective(lo)
    v_hi, g_hi, h_hi = objective(hi)
    # Unimodality: g >= 0 at lo means the objective rises from lo on; any g > 0 at lo (however
    # small) means it is still falling as s decreases past the bound.
    if g_lo >= 0.0 and g_hi > 0.0:
        return _Solution(lo, v_lo, g_lo, h_lo, 0, False, "lower", "")
    if g_hi <= 0.0 and g_lo < 0.0:
        return _Solution(hi, v_hi, g_hi, h_hi, 0, False, "upper", "")
    # g_lo <= 0 <= g_hi here; both are 0 only when the objective does not depend on s at all
    a, b = lo, hi
    s = min(max(start, lo), hi)
    step_old = b - a
    value, grad, hess = objective(s)
    for iteration in range(1, max_iter + 1):
        if abs(grad) <= tol:
            return _Solution(s, value, grad, hess, iteration - 1, True, "", "")
        if grad < 0.0:
            a = s
        else:
            b = s
        newton = s - grad / hess if hess > 0.0 else math.nan
        if a < newton < b and abs(2.0 * grad) <= abs(step_old * hess):
            step_old, s = abs(newton - s), newton
        else:
            step_old, s = 0.5 * (b - a), 0.5 * (a + b)
        value, grad, hess = objective(s)
        if b - a <= 4.0 * np.finfo(np.float64).eps * max(1.0, abs(s)):
            # the minimiser is pinned to the last representable digits of s; |g| cannot drop further
            return _Solution(s, value, grad, hess, iteration, True, "", "precision")
    converged = abs(grad) <= tol
    return _Solution(s, value, grad, hess, max_iter, converged, "", "" if converged else "max_iter")


def temperature_bounds(value: Any, *, func: str) -> tuple[float, float]:
    """The validated bounds ``(low, high)`` of T, ``0 < low < high``; a DataError naming ``func`` else."""
    try:
        low, high = value
    except (TypeError, ValueError):
        raise DataError(
            f"The 'bounds' parameter of {func} must be a pair (low, high) with 0 < low < high. Got {value!r}."
        ) from None
    low_f = check_float(low, name="bounds[0]", func=func, low=0.0)
    high_f = check_float(high, name="bounds[1]", func=func, low=low_f)
    return low_f, high_f


def bound_note(bound: str, low: float, high: float) -> str:
    """Return the report sentence for a fit that stopped on a bound of T."""
    if bound == "lower":
        return (
            f"NLL still decreasing at the lower bound T = {low:g}: the logits separate the classes "
            "(e.g. every prediction correct), so the unconstrained optimum is T -> 0; T was set to the bound."
        )
    if bound == "upper":
        return (
            f"NLL still decreasing at the upper bound T = {high:g}: the logits carry almost no "
            "information about these labels (or point the wrong way); T was set to the bound."
        )
    return ""


def fit_temperature(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    tol: float = 1e-10,
    max_iter: int = 100,
    bounds: tuple[float, float] = DEFAULT_BOUNDS,
) -> TemperatureFit:
    r"""Fit one temperature by minimising the mean negative log-likelihood over ``s = log T``.

    Parameters
    ----------
    logits : array_like, shape (N, C) with C >= 2, or (N,) / (N, 1)
        Finite logits. A single binary logit ``z`` per row is the sigmoid model
        ``p = [1 - sigmoid(z / T), sigmoid(z / T)]`` (fitted as the two-class logits ``[0, z]``).
    labels : array_like, shape (N,)
        Class indices in ``[0, C)`` (``{0, 1}`` for a single logit).
    tol : float, default 1e-10
        Stop when ``|d NLL / d log T| <= tol`` (nats).
    max_iter : int, default 100
        Newton / bisection steps allowed (about 5 to 10 are used in practice).
    bounds : (float, float), default (0.05, 100.0)
        Search interval for ``T``.

    Returns
    -------
    TemperatureFit

    Notes
    -----
    .. math:: \hat s = \arg\min_s \frac{1}{N}\sum_i
              \Bigl[\log\sum_k e^{z_{ik} e^{-s}} - z_{i y_i} e^{-s}\Bigr],
              \qquad \hat T = e^{\hat s}

    The gradient and second derivative in ``s`` are exact. The NLL is convex in ``1/T`` but not in
    ``s``, so Newton is safeguarded: the sign of the gradient brackets the (unique) minimiser and a
    step that leaves the bracket or converges too slowly is replaced by bisection. The start is
    ``T = 1`` (the seed code's 1.5 start and fixed 50 LBFGS steps are not kept).

    Bounds: if the NLL still decreases at a bound (separable data, often one class only, reach the
    lower bound; logits unrelated to the labels reach the upper one), ``T`` is set to that bound,
    ``converged`` is False and ``note`` says which bound and why. This is a property of the data, not
    a numerical failure, so it is reported on the result and does not warn. A
    :class:`~sitecal.errors.ConvergenceWarning` is issued only when ``max_iter`` steps end before the
    tolerance (which the test suite's ``filterwarnings = error`` turns into a failure).

    References
    ----------
    C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger. "On Calibration of Modern Neural Networks." ICML 2017.
    W. H. Press et al. Numerical Recipes, 3rd ed., section 9.4 (``rtsafe``).

    Examples
    --------
    >>> fit = fit_temperature([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0]], [0, 1, 1, 0])
    >>> round(fit.temperature, 4), fit.converged
    (1.8205, True)
    """
    func = "fit_temperature"
    z = check_logits(logits, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    return fit_validated(z, y, **fit_options(tol, max_iter, bounds, func=func))


def fit_options(tol: Any, max_iter: Any, bounds: Any, *, func: str) -> dict[str, Any]:
    """Check ``tol``, ``max_iter`` and ``bounds``; return them as :func:`fit_validated`'s keywords.

    The keywords are ``tol`` (float >= 0), ``max_iter`` (int >= 1) and ``low``, ``high`` (the bounds of T).
    """
    tol_f = check_float(tol, name="tol", func=func, low=0.0)
    iters = check_int(max_iter, name="max_iter", func=func, minimum=1)
    low, high = temperature_bounds(bounds, func=func)
    return {"tol": tol_f, "max_iter": iters, "low": low, "high": high}


def fit_validated(
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    *,
    tol: float,
    max_iter: int,
    low: float,
    high: float,
    center: float = 0.0,
    penalty: float = 0.0,
    extra_note: str = "",
) -> TemperatureFit:
    """Fit on validated arrays; with ``penalty > 0`` minimise ``NLL(s) + penalty / 2 (s - center)^2``.

    ``nll_before`` / ``nll_after`` are always the unpenalised mean NLL; ``gradient`` is that of the
    minimised (penalised) objective.
    """
    nll = _NLL(z, y)

    def objective(s: float) -> tuple[float, float, float]:
        value, grad, hess = nll(s)
        gap = s - center
        return value + 0.5 * penalty * gap * gap, grad + penalty * gap, hess + penalty

    solution = solve_log_temperature(
        objective if penalty > 0.0 else nll,
        lo=math.log(low),
        hi=math.log(high),
        start=min(max(center, math.log(low)), math.log(high)),
        tol=tol,
        max_iter=max_iter,
    )
    notes = [extra_note, bound_note(solution.bound, low, high)]
    if not nll.d.any():
        notes.append("All logits tie within every row, so the NLL does not depend on T; T is left at 1.")
    present = np.unique(y)
    if present.shape[0] == 1:
        notes.append(f"Only class {int(present[0])} occurs in the labels; T is poorly identified.")
    if solution.stopped == "max_iter":
        notes.append(
            f"Stopped after max_iter={max_iter} steps with |gradient| = {abs(solution.gradient):.3g}."
        )
        warnings.warn(
            f"fit_temperature stopped after max_iter={max_iter} steps with |gradient| = "
            f"{abs(solution.gradient):.3g} > tol = {tol:g}; raise max_iter.",
            ConvergenceWarning,
            stacklevel=3,
        )
    return TemperatureFit(
        temperature=math.exp(solution.s),
        log_temperature=solution.s,
        n=int(z.shape[0]),
        nll_before=nll(0.0)[0],
        nll_after=nll(solution.s)[0] if penalty > 0.0 else solution.value,
        iterations=solution.iterations,
        gradient=solution.gradient,
        converged=solution.converged and not solution.bound,
        note=" ".join(n for n in notes if n),
    )
