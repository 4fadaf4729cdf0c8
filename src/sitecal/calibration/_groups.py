r"""Per-group temperatures (one per site or scanner): fallback, penalised or empirical-Bayes shrinkage.

Notes
-----
In the notation of :func:`fit_group_temperatures`: shrinkage (``fallback="shrink"``) minimises, over
``s = log T``,

.. math:: \mathrm{NLL}_g(s) + \frac{\lambda}{2}(s - \hat s_{\mathrm{global}})^2,
          \qquad \lambda = \frac{m\, H}{n_g},

with ``m = min_group_size``, ``n_g`` the group's size and ``H`` the second derivative of the
global mean NLL at its optimum (floored at 1e-8). In sum form this is a Gaussian prior on log T
centred on the global value and worth ``m`` rows of the global data's information, so a group of
``n_g`` rows moves from the global T toward its own optimum with weight about ``n_g / (n_g + m)``
(exactly so for quadratic NLLs). The penalised objective is solved by the same safeguarded Newton,
started at the global log T; its minimiser lies between the global and the group's own optimum.
The weight is written in the fit's ``note``.

Empirical Bayes (``fallback="empirical_bayes"``; Efron & Morris 1975): each group ``g``, whatever
its size, gets its own unpenalised fit :math:`s_g = \log \hat T_g` and the patient-cluster-robust
(sandwich) variance :math:`v_g = \sum_c U_c^2 / H^2` (:math:`U_c`: the summed score of cluster
``c``'s rows at :math:`s_g`, :math:`H`: the curvature of the group's summed NLL there). The mean
:math:`\mu` and variance :math:`\tau^2` of log T across groups are estimated by REML (as
:func:`sitecal.stats.random_effects_meta_analysis`), and

.. math:: \log T_g = \hat\mu + w_g (s_g - \hat\mu), \qquad w_g = \hat\tau^2 / (\hat\tau^2 + v_g),

continuous in the group's size: a large group keeps about its own T, a small one moves toward
:math:`e^{\hat\mu}`, and with :math:`\hat\tau^2 = 0` all groups take :math:`e^{\hat\mu}`. A group
whose own fit stopped on a bound of T, whose curvature is not positive or that has a single
cluster gets infinite variance (weight 0: it takes :math:`e^{\hat\mu}` and does not inform the
REML estimate). With fewer than two groups of finite variance nothing can be pooled and every
group takes the global T (source ``"global_fallback"``; ``mean_log_temperature`` and ``tau2``
None). Groups unseen at fitting time get the global T under every policy, as at deployment.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_groups, check_int, check_labels, check_logits, check_option
from sitecal.calibration._empirical_bayes import cluster_robust_variance, shrink_log_temperatures
from sitecal.calibration._temperature import (
    _NLL,
    DEFAULT_BOUNDS,
    TemperatureFit,
    fit_options,
    fit_validated,
    stored_temperature,
)
from sitecal.errors import DataError

__all__ = ["GroupTemperature", "GroupTemperatures", "fit_group_temperatures"]

Fallback = Literal["global", "shrink", "empirical_bayes"]
FALLBACKS = ("global", "shrink", "empirical_bayes")
SOURCES = ("own", "global_fallback", "shrunk", "empirical_bayes")
FORMAT = "sitecal.calibration.GroupTemperatures"
FORMAT_VERSION = 1

# Floor for the global curvature used in the shrinkage weight (a perfectly flat global NLL would
# otherwise switch shrinkage off silently).
_MIN_CURVATURE = 1e-8


@dataclass(frozen=True)
class GroupTemperature:
    r"""The temperature used for one group.

    Attributes
    ----------
    group : str
        Group name (e.g. a site or scanner model).
    temperature : float
        ``T > 0`` applied to this group's logits.
    n : int
        Rows of this group at fitting time.
    source : {"own", "global_fallback", "shrunk", "empirical_bayes"}
        ``"own"``: fitted on the group alone (``n >= min_group_size``). ``"global_fallback"``: the
        group was too small and takes the global T (``fit`` is None). ``"shrunk"``: too small, and fitted
        with a penalty pulling log T toward the global log T. ``"empirical_bayes"``: the group's own
        fit shrunk toward the REML mean log T of all groups (``fallback="empirical_bayes"``, any size).
    fit : TemperatureFit or None
        The group's own or penalised fit (for ``"empirical_bayes"``: its own, unshrunk fit).
    weight : float or None
        ``"empirical_bayes"`` only: :math:`w_g = \tau^2 / (\tau^2 + v_g)` in [0, 1], so that
        ``log(temperature) = mu + weight * (fit.log_temperature - mu)``.
    variance : float or None
        ``"empirical_bayes"`` only: :math:`v_g`, the patient-cluster-robust variance of the own fit's
        log T; ``inf`` (weight 0) for a fit on a bound of T, zero curvature or a single patient.
    """

    group: str
    temperature: float
    n: int
    source: str
    fit: TemperatureFit | None
    weight: float | None = None
    variance: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; ``weight`` and ``variance`` only for ``"empirical_bayes"``.

        An infinite variance is left out (read back as ``inf``).
        """
        out: dict[str, Any] = {
            "group": self.group,
            "temperature": self.temperature,
            "n": self.n,
            "source": self.source,
            "fit": None if self.fit is None else self.fit.to_dict(),
        }
        if self.weight is not None:
            out["weight"] = self.weight
        if self.variance is not None and math.isfinite(self.variance):
            out["variance"] = self.variance
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupTemperature:
        """Inverse of :meth:`to_dict`."""
        source = str(data["source"])
        if source not in SOURCES:
            raise DataError(
                f"GroupTemperature.from_dict got source {source!r}; expected one of "
                f"{', '.join(repr(s) for s in SOURCES)}."
            )
        fit = data["fit"]
        eb = source == "empirical_bayes"
        return cls(
            group=str(data["group"]),
            temperature=stored_temperature(data["temperature"]),
            n=int(data["n"]),
            source=source,
            fit=None if fit is None else TemperatureFit.from_dict(fit),
            weight=float(data["weight"]) if eb else None,
            variance=float(data.get("variance", math.inf)) if eb else None,
        )


@dataclass(frozen=True)
class GroupTemperatures:
    """Temperatures per group plus the global fit; what ``calibration.json`` holds and deployment loads.

    Attributes
    ----------
    global_fit : TemperatureFit
        Fit on all rows; its temperature serves groups that are small (with ``fallback="global"``)
        or unseen at fitting time.
    groups : Mapping[str, GroupTemperature]
        One entry per group seen at fitting time (read-only).
    min_group_size : int
        Groups with at least this many rows got their own fit (not used by ``"empirical_bayes"``).
    fallback : {"global", "shrink", "empirical_bayes"}
        Policy used for the smaller groups (for ``"empirical_bayes"``: for every group).
    mean_log_temperature, tau2 : float or None
        ``"empirical_bayes"`` with at least two pooled groups: the REML estimates of the mean and the
        between-group variance of log T; else None.
    """

    global_fit: TemperatureFit
    groups: Mapping[str, GroupTemperature]
    min_group_size: int
    fallback: str
    mean_log_temperature: float | None = None
    tau2: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", types.MappingProxyType(dict(self.groups)))

    @property
    def global_temperature(self) -> float:
        """The global T."""
        return self.global_fit.temperature

    def temperature_for(self, group: str) -> float:
        """T for one group; a group unseen at fitting time gets the global T (under every policy)."""
        entry = self.groups.get(group)
        return self.global_fit.temperature if entry is None else entry.temperature

    def temperatures_for(self, groups: ArrayLike) -> NDArray[np.float64]:
        """T per row for an (N,) array of group names; unseen groups get the global T. Shape (N,)."""
        shape = np.shape(groups)
        names = check_groups(groups, n=shape[0] if shape else 0, func="temperatures_for")
        unique, inverse = np.unique(names, return_inverse=True)
        per_unique = np.array([self.temperature_for(str(g)) for g in unique], dtype=np.float64)
        out: NDArray[np.float64] = per_unique[inverse.reshape(-1)]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; :meth:`from_dict` restores an equal object with bit-identical floats.

        ``mean_log_temperature`` and ``tau2`` are written only when set (empirical Bayes), so documents of
        the other policies are those earlier versions wrote.
        """
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "min_group_size": self.min_group_size,
            "fallback": self.fallback,
            "global_fit": self.global_fit.to_dict(),
            "groups": {name: entry.to_dict() for name, entry in self.groups.items()},
        }
        if self.mean_log_temperature is not None:
            out["mean_log_temperature"] = self.mean_log_temperature
        if self.tau2 is not None:
            out["tau2"] = self.tau2
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupTemperatures:
        """Inverse of :meth:`to_dict` (e.g. of ``json.load`` of ``calibration.json``)."""
        if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
            raise DataError(
                f"GroupTemperatures.from_dict expects format {FORMAT!r} version {FORMAT_VERSION}; got "
                f"format {data.get('format')!r} version {data.get('version')!r}. Load a calibration.json "
                "written by this sitecal version, or refit."
            )
        try:
            return cls(
                global_fit=TemperatureFit.from_dict(data["global_fit"]),
                groups={str(k): GroupTemperature.from_dict(v) for k, v in data["groups"].items()},
                min_group_size=int(data["min_group_size"]),
                fallback=str(data["fallback"]),
                mean_log_temperature=_optional_float(data.get("mean_log_temperature")),
                tau2=_optional_float(data.get("tau2")),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise DataError(
                f"GroupTemperatures.from_dict got a malformed dict ({exc!r}); pass what to_dict() wrote."
            ) from exc


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def fit_group_temperatures(
    logits: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    min_group_size: int = 50,
    fallback: Fallback = "global",
    clusters: ArrayLike | None = None,
    tol: float = 1e-10,
    max_iter: int = 100,
    bounds: tuple[float, float] = DEFAULT_BOUNDS,
) -> GroupTemperatures:
    r"""Fit a global temperature and one per group, with a policy for small groups.

    Parameters
    ----------
    logits : array_like, shape (N, C) with C >= 2, or (N,) / (N, 1)
        As for :func:`fit_temperature`.
    labels : array_like, shape (N,)
    groups : array_like of str, shape (N,)
        Group of each row (site, scanner, ...).
    min_group_size : int, default 50
        Groups with ``n >= min_group_size`` rows get their own fit (source ``"own"``). Not used by
        ``fallback="empirical_bayes"``, which treats every group alike whatever its size.
    fallback : {"global", "shrink", "empirical_bayes"}, default "global"
        For smaller groups: ``"global"`` uses the global T (source ``"global_fallback"``);
        ``"shrink"`` fits a penalised temperature (source ``"shrunk"``), see Notes.
        ``"empirical_bayes"``: every group's own log T is shrunk toward the REML mean of all groups'
        (source ``"empirical_bayes"``), see Notes.
    clusters : array_like, shape (N,), optional
        Patient (or other cluster) of each row, for the cluster-robust variance of the empirical-Bayes
        policy (studies of one patient are not independent). Default: each row its own cluster.
        Ignored by the other policies.
    tol, max_iter, bounds
        Passed to every fit, as in :func:`fit_temperature`.

    Returns
    -------
    GroupTemperatures

    Notes
    -----
    ``"shrink"`` adds to a small group's NLL a Gaussian prior on log T centred on the global value and
    worth ``min_group_size`` rows of the global data's information; ``"empirical_bayes"`` pulls every
    group's own log T toward the REML mean of all groups' with weight :math:`\tau^2 / (\tau^2 + v_g)`.
    The module docstring gives both in full. Groups unseen at fitting time get the global T under every
    policy, as at deployment.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 300)
    >>> z = 4.0 * (2 * y - 1) + rng.normal(0, 3, 300)
    >>> sites = np.where(np.arange(300) < 280, "A", "B")
    >>> fits = fit_group_temperatures(z, y, sites, min_group_size=50)
    >>> fits.groups["A"].source, fits.groups["B"].source
    ('own', 'global_fallback')
    >>> eb = fit_group_temperatures(z, y, sites, fallback="empirical_bayes")
    >>> eb.groups["B"].source, 0.0 <= eb.groups["B"].weight <= eb.groups["A"].weight <= 1.0
    ('empirical_bayes', True)
    """
    func = "fit_group_temperatures"
    z = check_logits(logits, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    g = check_groups(groups, n=z.shape[0], func=func)
    m = check_int(min_group_size, name="min_group_size", func=func, minimum=1)
    policy = check_option(fallback, name="fallback", func=func, options=FALLBACKS)
    options = fit_options(tol, max_iter, bounds, func=func)

    global_fit = fit_validated(z, y, **options)

    names, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    group_names: list[str] = names.tolist()
    rows_by_group = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    if policy == "empirical_bayes":
        codes = cluster_codes(clusters, n=z.shape[0], func=func)
        return _empirical_bayes(z, y, group_names, rows_by_group, codes, global_fit, m, options)
    entries = _own_or_fallback(z, y, group_names, rows_by_group, global_fit, m, policy, options)
    return GroupTemperatures(global_fit=global_fit, groups=entries, min_group_size=m, fallback=policy)


def _own_or_fallback(
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    names: list[str],
    rows_by_group: list[NDArray[np.intp]],
    global_fit: TemperatureFit,
    m: int,
    policy: str,
    options: dict[str, Any],
) -> dict[str, GroupTemperature]:
    """Own fits for groups of at least ``m`` rows; the global T (``"global"``) or a shrunk fit for the rest.

    The shrinkage penalty's weight scales with the global mean NLL's curvature at its optimum (floored).
    """
    curvature = max(_NLL(z, y)(global_fit.log_temperature)[2], _MIN_CURVATURE)
    entries: dict[str, GroupTemperature] = {}
    for name, rows in zip(names, rows_by_group, strict=True):  # a loop over groups
        n_g = int(rows.shape[0])
        if n_g >= m:
            fit = fit_validated(z[rows], y[rows], **options)
            entries[name] = GroupTemperature(name, fit.temperature, n_g, "own", fit)
        elif policy == "global":
            entries[name] = GroupTemperature(name, global_fit.temperature, n_g, "global_fallback", None)
        else:
            weight = m * curvature / n_g
            fit = fit_validated(
                z[rows],
                y[rows],
                **options,
                center=global_fit.log_temperature,
                penalty=weight,
                extra_note=(
                    f"Shrunk toward the global log T = {global_fit.log_temperature:.6g} with penalty "
                    f"weight {weight:.6g} = min_group_size {m} x global curvature {curvature:.6g} / n {n_g}."
                ),
            )
            entries[name] = GroupTemperature(name, fit.temperature, n_g, "shrunk", fit)
    return entries


def cluster_codes(clusters: ArrayLike | None, *, n: int, func: str) -> NDArray[np.int64]:
    """Integer code per row of a clusters column (ids, str or int); None: each row its own cluster."""
    if clusters is None:
        return np.arange(n, dtype=np.int64)
    array = np.asarray(clusters)
    if array.ndim != 1 or array.shape[0] != n:
        raise DataError(
            f"The 'clusters' parameter of {func} must have shape ({n},), one entry per row. Got shape "
            f"{array.shape}."
        )
    if array.dtype.kind not in "iuUSO" or (
        array.dtype.kind == "O" and array.size and not all(isinstance(x, str | int) for x in array.tolist())
    ):
        raise DataError(
            f"The 'clusters' parameter of {func} must hold ids (str or int). Got dtype {array.dtype}."
        )
    try:
        _, codes = np.unique(array, return_inverse=True)
    except TypeError as exc:
        raise DataError(f"The 'clusters' parameter of {func} must hold ids of one type ({exc}).") from exc
    return codes.reshape(-1).astype(np.int64)


def group_variance(
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    codes: NDArray[np.int64],
    fit: TemperatureFit,
    low: float,
    high: float,
) -> float:
    """Cluster-robust variance of a group's own fit of log T; infinite for a fit on a bound of T."""
    if fit.log_temperature in (math.log(low), math.log(high)):
        return math.inf
    local = np.unique(codes, return_inverse=True)[1].reshape(-1).astype(np.int64)
    k = int(local.max()) + 1 if local.size else 0
    return float(cluster_robust_variance(_NLL(z, y).d, local, k, np.array([fit.log_temperature]))[0])


def _empirical_bayes(
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    names: list[str],
    rows_by_group: list[NDArray[np.intp]],
    codes: NDArray[np.int64],
    global_fit: TemperatureFit,
    min_group_size: int,
    options: dict[str, Any],
) -> GroupTemperatures:
    fits = [fit_validated(z[rows], y[rows], **options) for rows in rows_by_group]  # a loop over groups
    variances = [
        group_variance(z[rows], y[rows], codes[rows], fit, options["low"], options["high"])
        for rows, fit in zip(rows_by_group, fits, strict=True)
    ]
    pooled = shrink_log_temperatures([f.log_temperature for f in fits], variances)
    entries: dict[str, GroupTemperature] = {}
    if not pooled.pooled[0]:  # fewer than two groups of finite variance: nothing to pool
        for name, rows in zip(names, rows_by_group, strict=True):
            n_g = int(rows.shape[0])
            entries[name] = GroupTemperature(name, global_fit.temperature, n_g, "global_fallback", None)
        return GroupTemperatures(
            global_fit=global_fit, groups=entries, min_group_size=min_group_size, fallback="empirical_bayes"
        )
    for j, (name, rows) in enumerate(zip(names, rows_by_group, strict=True)):
        entries[name] = GroupTemperature(
            name,
            math.exp(float(pooled.shrunk[0, j])),
            int(rows.shape[0]),
            "empirical_bayes",
            fits[j],
            weight=float(pooled.weight[0, j]),
            variance=variances[j],
        )
    return GroupTemperatures(
        global_fit=global_fit,
        groups=entries,
        min_group_size=min_group_size,
        fallback="empirical_bayes",
        mean_log_temperature=float(pooled.mean[0]),
        tau2=float(pooled.tau2[0]),
    )
