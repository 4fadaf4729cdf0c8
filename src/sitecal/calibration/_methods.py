r"""Recalibration methods beyond one temperature, fitted many times at once for a refit bootstrap.

:func:`fit_method` fits one of :data:`METHODS` to logits and labels, once or under ``R`` row weightings
(bootstrap multiplicities), and returns a :class:`FittedMethod` whose :meth:`~FittedMethod.probabilities`
maps new logits through each of the ``R`` fitted maps.

Notes
-----
The maps of :func:`fit_method`, with ``p = softmax(z)``:

- **temperature** (Guo et al. 2017): ``softmax(z / T)``, fitted over ``log T`` in ``bounds``.
  Unweighted, this is :func:`~sitecal.calibration.fit_temperature` itself; weighted, the
  :class:`~sitecal.calibration.BatchedTemperatureSolver` (certified to 1e-9 in ``log T``).
- **vector** (Guo et al. 2017): ``softmax(a * z + b)``, ``a, b`` in R^K, unpenalised. ``b_0`` is fixed
  at 0: adding one constant to every ``b_k`` leaves the softmax unchanged, so it is not identified.
- **matrix** (Kull et al. 2019, ODIR): ``softmax(W z + b)`` minimising

  .. math:: \mathrm{NLL} + \lambda\,\frac{\sum_{i\ne j} W_{ij}^2}{K(K-1)} + \mu\,\frac{\sum_j b_j^2}{K}.

  The default ``lambda = mu = 1e-2`` is a mild, fixed shrinkage of the off-diagonal terms and the
  intercepts toward the identity map (on the mean-NLL scale, a Gaussian prior whose strength is
  that of about ``0.01 N`` rows' worth of log-likelihood curvature at ``N`` rows): enough to keep
  ``K^2 + K`` parameters finite on a small site sample, too weak to matter at a few hundred rows.
  Kull et al. choose both by cross-validation; a refit bootstrap needs one fixed rule, so they
  are options. ``lambda = 0`` (``mu = 0``) holds ``W``'s first row (``b_0``) at its identity value
  (the softmax is unchanged by adding one vector to every row of ``W``, or one number to every
  ``b_k``); the probabilities are then those of unpenalised multinomial logistic regression.
- **dirichlet** (Kull et al. 2019): the same model and penalty on the features
  ``ln max(p, eps)`` (``eps`` = machine epsilon) instead of ``z``.
- **histogram** (Zadrozny & Elkan 2001): ``n_bins`` equal-width bins on [0, 1]; each bin's value
  is the weighted frequency of the class among the fit rows whose score falls in it. Exactly
  ``netcal.binning.HistogramBinning``: fit scores clipped to ``[eps, 1 - eps]`` and binned
  ``[e_j, e_{j+1})``; new scores binned ``(e_j, e_{j+1}]`` (0 in the first bin); **an empty bin
  gets its midpoint** ``(e_j + e_{j+1}) / 2``. With ``K > 2`` one-vs-rest per class, then each row
  is divided by its sum (a class with no weight gets 0, as netcal; a row summing to 0 gets the
  uniform ``1/K``, where netcal gives NaN).
- **isotonic** (Zadrozny & Elkan 2002): scikit-learn's ``IsotonicRegression(out_of_bounds="clip",
  y_min=0, y_max=1)`` with sample weights (scores within 1e-15 merged as scikit-learn does, linear
  interpolation between thresholds, clipping outside them); with ``K > 2`` one-vs-rest and the
  renormalisation of ``CalibratedClassifierCV`` (a row whose classes all get 0 becomes uniform).
- **beta** (Kull, Silva Filho & Flach 2017), binary only:
  ``q = sigmoid(a ln p_1 - b ln(1 - p_1) + c)``, ``ln p`` from the log-softmax of the logits (no
  clipping). As betacal: if the fitted ``a < 0`` it is fixed at 0 and the fit repeated, else if
  ``b < 0`` the same for ``b``; if the remaining coefficient then comes out negative it is fixed at
  0 too (a constant map), where betacal would keep a decreasing map. A note lists the resamples.

References
----------
C. Guo et al. "On Calibration of Modern Neural Networks." ICML 2017.
M. Kull et al. "Beyond temperature scaling: Obtaining well-calibrated multiclass probabilities with
Dirichlet calibration." NeurIPS 2019.
M. Kull, T. Silva Filho, P. Flach. "Beta calibration: a well-founded and easily implemented
improvement on logistic calibration for binary classifiers." AISTATS 2017.
B. Zadrozny, C. Elkan. ICML 2001 (histogram binning); KDD 2002 (isotonic, one-vs-rest).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_float, check_int, check_labels, check_logits, check_option
from sitecal.calibration._binning_methods import (
    fit_histogram,
    fit_isotonic,
    predict_histogram,
    predict_isotonic,
)
from sitecal.calibration._method_common import Params, RawFit
from sitecal.calibration._scaling_methods import (
    fit_beta,
    fit_linear,
    fit_temperature_batch,
    predict_beta,
    predict_linear,
    predict_temperature,
)
from sitecal.calibration._temperature import DEFAULT_BOUNDS, temperature_bounds
from sitecal.errors import DataError

__all__ = ["METHODS", "FittedMethod", "check_weights", "fit_method"]

#: The recalibration methods :func:`fit_method` knows, in order of flexibility (beta: binary only).
METHODS = ("temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "beta")

FORMAT = "sitecal.fitted_method"
FORMAT_VERSION = 1

_NEWTON = {"tol": 1e-10, "max_iter": 50}
_ODIR = {"reg_lambda": 1e-2, "reg_mu": 1e-2, **_NEWTON}
#: Options of each method and their defaults.
DEFAULT_OPTIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "temperature": MappingProxyType({"bounds": DEFAULT_BOUNDS, "tol": 1e-10, "max_iter": 100}),
        "vector": MappingProxyType(dict(_NEWTON)),
        "matrix": MappingProxyType(dict(_ODIR)),
        "dirichlet": MappingProxyType(dict(_ODIR)),
        "histogram": MappingProxyType({"n_bins": 15}),
        "isotonic": MappingProxyType({}),
        "beta": MappingProxyType(dict(_NEWTON)),
    }
)

_PREDICT: dict[str, Callable[[Params, NDArray[np.float64]], NDArray[np.float64]]] = {
    "temperature": predict_temperature,
    "vector": lambda p, z: predict_linear("vector", p, z),
    "matrix": lambda p, z: predict_linear("matrix", p, z),
    "dirichlet": lambda p, z: predict_linear("dirichlet", p, z),
    "histogram": predict_histogram,
    "isotonic": predict_isotonic,
    "beta": predict_beta,
}


@dataclass(frozen=True, eq=False)
class FittedMethod:
    """``R`` fitted recalibration maps of one method (``R = 1`` for a plain fit).

    Attributes
    ----------
    name : str
        One of :data:`METHODS`.
    n_classes : int
        ``K``, the number of classes (columns of the logits) it was fitted on.
    options : Mapping[str, Any]
        The options used, defaults filled in (read-only).
    params : Mapping[str, numpy.ndarray]
        Parameters, each with leading axis ``R`` (read-only mapping). temperature: ``temperature``,
        ``log_temperature`` (R,); vector: ``a``, ``b`` (R, K); matrix / dirichlet: ``W`` (R, K, K),
        ``b`` (R, K); beta: ``a``, ``b``, ``c`` (R,); histogram: ``bin_values`` (R, C, n_bins);
        isotonic: ``x_thresholds``, ``y_thresholds`` (R, C, L) padded with their last value and
        ``n_thresholds`` (R, C). ``C`` is 1 (the positive class) when ``K = 2``, else ``K``. The Newton
        methods add ``iterations`` (R,).
    notes : tuple of str
        Sentences for the report: resamples left at the identity, bounds hit, fixed coefficients.
    converged : numpy.ndarray of bool, shape (R,)
        Whether each fit met its tolerance (always True for histogram and isotonic).
    """

    name: str
    n_classes: int
    options: Mapping[str, Any]
    params: Mapping[str, NDArray[Any]]
    notes: tuple[str, ...]
    converged: NDArray[np.bool_]

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def n_fits(self) -> int:
        """``R``, the number of fitted maps."""
        return int(self.converged.shape[0])

    def probabilities(self, logits: ArrayLike) -> NDArray[np.float64]:
        """Recalibrated probabilities of logits (M, K) under each fit: shape (R, M, K), rows sum to 1."""
        z = check_logits(logits, func=f"FittedMethod.probabilities ({self.name})")
        if z.shape[1] != self.n_classes:
            raise DataError(
                f"The 'logits' parameter of FittedMethod.probabilities must have {self.n_classes} columns, "
                f"as the logits the {self.name!r} map was fitted on. Got shape {z.shape}."
            )
        return _PREDICT[self.name](self.params, z)

    def select(self, index: int) -> FittedMethod:
        """Fit number ``index`` alone, as a FittedMethod with ``R = 1`` (e.g. to store it)."""
        i = check_int(index, name="index", func="FittedMethod.select", minimum=0)
        if i >= self.n_fits:
            raise DataError(f"The 'index' parameter of FittedMethod.select must be < {self.n_fits}. Got {i}.")
        return FittedMethod(
            self.name,
            self.n_classes,
            self.options,
            {k: v[i : i + 1] for k, v in self.params.items()},
            self.notes,
            self.converged[i : i + 1],
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of a single fit (``R = 1``); :meth:`from_dict` restores it with identical floats."""
        if self.n_fits != 1:
            raise DataError(
                f"FittedMethod.to_dict stores one fit; this one holds R = {self.n_fits}. "
                "Take one with .select(index) first."
            )
        params = {}
        for key, value in self.params.items():
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise DataError(
                    f"FittedMethod.to_dict: parameter {key!r} is not finite; it cannot be stored."
                )
            kind = "int64" if value.dtype.kind in "iub" else "float64"
            params[key] = {"dtype": kind, "shape": list(value.shape), "data": value.reshape(-1).tolist()}
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "name": self.name,
            "n_classes": self.n_classes,
            "options": {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()},
            "params": params,
            "notes": list(self.notes),
            "converged": bool(self.converged[0]),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FittedMethod:
        """Inverse of :meth:`to_dict`."""
        if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
            raise DataError(
                f"FittedMethod.from_dict expects format {FORMAT!r} version {FORMAT_VERSION}; got format "
                f"{data.get('format')!r} version {data.get('version')!r}. Pass what to_dict() wrote, "
                "or refit."
            )
        try:
            name = check_option(data["name"], name="name", func="FittedMethod.from_dict", options=METHODS)
            params = {
                key: np.asarray(entry["data"], dtype=entry["dtype"]).reshape(entry["shape"])
                for key, entry in data["params"].items()
            }
            out = cls(
                name,
                int(data["n_classes"]),
                {k: tuple(v) if isinstance(v, list) else v for k, v in data["options"].items()},
                params,
                tuple(str(n) for n in data["notes"]),
                np.array([bool(data["converged"])]),
            )
            out.probabilities(np.zeros((1, out.n_classes)))  # the parameters the map needs are all there
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"FittedMethod.from_dict got a malformed dict ({exc!r}); pass what to_dict() wrote."
            ) from exc
        return out


def check_weights(value: Any, *, n: int, func: str) -> NDArray[np.float64]:
    """Validate row weights: shape (R, n), R >= 1, finite and >= 0. Returns float64."""
    array = np.asarray(value)
    if array.ndim != 2 or array.shape[1] != n or array.shape[0] < 1:
        raise DataError(
            f"The 'weights' parameter of {func} must have shape (R, {n}): one row of weights per fit, "
            f"one column per row of the logits. Got shape {array.shape}; for one fit pass weights[None, :]."
        )
    if array.dtype.kind not in "biuf":
        raise DataError(f"The 'weights' parameter of {func} must hold numbers. Got dtype {array.dtype}.")
    w = array.astype(np.float64)
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"The 'weights' parameter of {func} must be finite and >= 0. Got {float(w[where])!r} at "
            f"index {where}."
        )
    return w


def _options(name: str, given: Mapping[str, Any], *, func: str) -> dict[str, Any]:
    defaults = DEFAULT_OPTIONS[name]
    for key in given:
        if key not in defaults:
            allowed = ", ".join(repr(k) for k in defaults) or "none"
            message = f"{func} got an unknown option {key!r} for method {name!r}; its options are {allowed}."
            guess = difflib.get_close_matches(key, list(defaults), n=1, cutoff=0.5)
            if guess:
                message += f" Did you mean {guess[0]!r}?"
            raise DataError(message)
    out = {**defaults, **given}
    checked: dict[str, Any] = {}
    for key, value in out.items():
        if key == "bounds":
            checked[key] = temperature_bounds(value, func=func)
        elif key == "tol":
            checked[key] = check_float(value, name="tol", func=func, low=0.0)
        elif key in ("max_iter", "n_bins"):
            checked[key] = check_int(value, name=key, func=func, minimum=1)
        else:  # reg_lambda, reg_mu
            checked[key] = check_float(value, name=key, func=func, low=0.0, low_open=False)
    return checked


def fit_method(
    name: str, logits: ArrayLike, labels: ArrayLike, weights: ArrayLike | None = None, **options: Any
) -> FittedMethod:
    r"""Fit a recalibration map to logits and labels, once or under ``R`` row weightings at once.

    Parameters
    ----------
    name : {"temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"}
        The method (see Notes).
    logits : array_like, shape (N, K) with K >= 2, or (N,) / (N, 1) for one binary logit
        Finite logits; for a model known only by its probabilities pass log-probabilities
        (:func:`sitecal.metrics.log_probabilities`).
    labels : array_like of int, shape (N,)
        Class indices in ``[0, K)``.
    weights : array_like, shape (R, N), optional
        Row weights (bootstrap multiplicities; 0 = row not drawn). Fit ``r`` minimises the weighted
        mean loss :math:`\sum_n w_{rn}\ell_n / \sum_n w_{rn}`, which for integer weights is the fit on
        the rows repeated ``w_rn`` times. Default: one fit with all weights 1.
    **options
        Method options, keyword only (defaults in :data:`DEFAULT_OPTIONS`):

        - temperature: ``bounds=(0.05, 100.0)``, ``tol=1e-10``, ``max_iter=100``, as
          :func:`~sitecal.calibration.fit_temperature`.
        - vector, beta: ``tol=1e-10`` (on the max-norm of the gradient, relative to its value at the
          start when that exceeds 1), ``max_iter=50`` Newton steps.
        - matrix, dirichlet: ``reg_lambda=1e-2``, ``reg_mu=1e-2``, ``tol``, ``max_iter``.
        - histogram: ``n_bins=15``.
        - isotonic: none.

    Returns
    -------
    FittedMethod

    Notes
    -----
    With ``p = softmax(z)``: temperature ``softmax(z / T)``; vector ``softmax(a * z + b)``; matrix
    ``softmax(W z + b)`` with the ODIR penalty; dirichlet the same on ``ln p``; histogram binning;
    isotonic regression; beta ``sigmoid(a ln p_1 - b ln(1 - p_1) + c)`` (binary only). The module
    docstring gives each map's exact model, penalty, edge cases and references.

    The smooth methods (all but histogram and isotonic) are solved by a batched damped Newton method
    over all ``R`` problems (:mod:`._newton`), started at the identity map. A weighting with all weights
    0, or (vector, matrix, dirichlet, beta) with a class of zero total weight, has no finite optimum and
    keeps the identity map; temperature scaling then stops on a bound of ``T``; histogram and isotonic
    fit what there is (an empty weighting: midpoints / the identity). ``notes`` says which resamples.

    Examples
    --------
    >>> z = np.array([[0.0, 2.0], [0.0, -1.0], [0.0, 0.5], [0.0, -2.0], [0.0, 1.0], [0.0, 0.2]])
    >>> y = np.array([1, 0, 0, 0, 1, 1])
    >>> fit = fit_method("isotonic", z, y)
    >>> fit.probabilities(z)[0, :, 1].round(3).tolist()
    [1.0, 0.0, 0.5, 0.0, 1.0, 0.5]
    >>> boot = fit_method("vector", z, y, weights=np.ones((3, 6)))
    >>> boot.n_fits, boot.probabilities(z).shape
    (3, (3, 6, 2))
    """
    func = "fit_method"
    method = check_option(name, name="name", func=func, options=METHODS)
    z = check_logits(logits, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    opts = _options(method, options, func=func)
    k = z.shape[1]
    if method == "beta" and k != 2:
        raise DataError(
            f"The method 'beta' of {func} is binary-only (it maps one probability p); got logits with "
            f"K = {k} classes. For K > 2 use 'temperature', 'vector', 'matrix', 'dirichlet', "
            "'histogram' or 'isotonic'."
        )
    w = None if weights is None else check_weights(weights, n=z.shape[0], func=func)
    raw = _fit(method, z, y, w, opts)
    return FittedMethod(method, k, opts, raw.params, tuple(raw.notes), raw.converged)


def _fit(
    method: str,
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    w: NDArray[np.float64] | None,
    opts: dict[str, Any],
) -> RawFit:
    if method == "temperature":
        return fit_temperature_batch(z, y, w, **opts)
    ones = np.ones((1, z.shape[0])) if w is None else w
    if method in ("vector", "matrix", "dirichlet"):
        lam, mu = opts.get("reg_lambda", 0.0), opts.get("reg_mu", 0.0)
        return fit_linear(
            method, z, y, ones, reg_lambda=lam, reg_mu=mu, tol=opts["tol"], max_iter=opts["max_iter"]
        )
    if method == "histogram":
        return fit_histogram(z, y, ones, n_bins=opts["n_bins"])
    if method == "isotonic":
        return fit_isotonic(z, y, ones)
    return fit_beta(z, y, ones, tol=opts["tol"], max_iter=opts["max_iter"])
