"""Per-group temperatures (one per site or scanner) with fallback or shrinkage for small groups."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_float, check_groups, check_int, check_labels, check_logits, check_option
from sitecal.calibration._temperature import (
    _NLL,
    DEFAULT_BOUNDS,
    TemperatureFit,
    _bounds,
    fit_validated,
)
from sitecal.errors import DataError

__all__ = ["GroupTemperature", "GroupTemperatures", "fit_group_temperatures"]

Fallback = Literal["global", "shrink"]
FALLBACKS = ("global", "shrink")
SOURCES = ("own", "global_fallback", "shrunk")
FORMAT = "sitecal.calibration.GroupTemperatures"
FORMAT_VERSION = 1

# Floor for the global curvature used in the shrinkage weight (a perfectly flat global NLL would
# otherwise switch shrinkage off silently).
_MIN_CURVATURE = 1e-8


@dataclass(frozen=True)
class GroupTemperature:
    """The temperature used for one group.

    Attributes
    ----------
    group : str
        Group name (e.g. a site or scanner model).
    temperature : float
        ``T > 0`` applied to this group's logits.
    n : int
        Rows of this group at fitting time.
    source : {"own", "global_fallback", "shrunk"}
        ``"own"``: fitted on the group alone (``n >= min_group_size``). ``"global_fallback"``: the
        group was too small and takes the global T (``fit`` is None). ``"shrunk"``: too small, and fitted
        with a penalty pulling log T toward the global log T.
    fit : TemperatureFit or None
        The group's own or penalised fit.
    """

    group: str
    temperature: float
    n: int
    source: str
    fit: TemperatureFit | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "group": self.group,
            "temperature": self.temperature,
            "n": self.n,
            "source": self.source,
            "fit": None if self.fit is None else self.fit.to_dict(),
        }

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
        return cls(
            group=str(data["group"]),
            temperature=float(data["temperature"]),
            n=int(data["n"]),
            source=source,
            fit=None if fit is None else TemperatureFit.from_dict(fit),
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
        Groups with at least this many rows got their own fit.
    fallback : {"global", "shrink"}
        Policy used for the smaller groups.
    """

    global_fit: TemperatureFit
    groups: Mapping[str, GroupTemperature]
    min_group_size: int
    fallback: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", types.MappingProxyType(dict(self.groups)))

    @property
    def global_temperature(self) -> float:
        """The global T."""
        return self.global_fit.temperature

    def temperature_for(self, group: str) -> float:
        """T for one group; a group unseen at fitting time gets the global T."""
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
        """JSON-safe dict; :meth:`from_dict` restores an equal object with bit-identical floats."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "min_group_size": self.min_group_size,
            "fallback": self.fallback,
            "global_fit": self.global_fit.to_dict(),
            "groups": {name: entry.to_dict() for name, entry in self.groups.items()},
        }

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
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise DataError(
                f"GroupTemperatures.from_dict got a malformed dict ({exc!r}); pass what to_dict() wrote."
            ) from exc


def fit_group_temperatures(
    logits: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    min_group_size: int = 50,
    fallback: Fallback = "global",
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
        Groups with ``n >= min_group_size`` rows get their own fit (source ``"own"``).
    fallback : {"global", "shrink"}, default "global"
        For smaller groups: ``"global"`` uses the global T (source ``"global_fallback"``);
        ``"shrink"`` fits a penalised temperature (source ``"shrunk"``), see Notes.
    tol, max_iter, bounds
        Passed to every fit, as in :func:`fit_temperature`.

    Returns
    -------
    GroupTemperatures

    Notes
    -----
    Shrinkage minimises, over ``s = log T``,

    .. math:: \mathrm{NLL}_g(s) + \frac{\lambda}{2}(s - \hat s_{\mathrm{global}})^2,
              \qquad \lambda = \frac{m\, H}{n_g},

    with ``m = min_group_size``, ``n_g`` the group's size and ``H`` the second derivative of the
    global mean NLL at its optimum (floored at 1e-8). In sum form this is a Gaussian prior on log T
    centred on the global value and worth ``m`` rows of the global data's information, so a group of
    ``n_g`` rows moves from the global T toward its own optimum with weight about ``n_g / (n_g + m)``
    (exactly so for quadratic NLLs). The penalised objective is solved by the same safeguarded Newton,
    started at the global log T; its minimiser lies between the global and the group's own optimum.
    The weight is written in the fit's ``note``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 300)
    >>> z = 4.0 * (2 * y - 1) + rng.normal(0, 3, 300)
    >>> sites = np.where(np.arange(300) < 280, "A", "B")
    >>> fits = fit_group_temperatures(z, y, sites, min_group_size=50)
    >>> fits.groups["A"].source, fits.groups["B"].source
    ('own', 'global_fallback')
    """
    func = "fit_group_temperatures"
    z = check_logits(logits, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    g = check_groups(groups, n=z.shape[0], func=func)
    m = check_int(min_group_size, name="min_group_size", func=func, minimum=1)
    policy = check_option(fallback, name="fallback", func=func, options=FALLBACKS)
    tol_f = check_float(tol, name="tol", func=func, low=0.0)
    iters = check_int(max_iter, name="max_iter", func=func, minimum=1)
    low, high = _bounds(bounds, func=func)
    options: dict[str, Any] = {"tol": tol_f, "max_iter": iters, "low": low, "high": high}

    global_fit = fit_validated(z, y, **options)
    curvature = max(_NLL(z, y)(global_fit.log_temperature)[2], _MIN_CURVATURE)

    names, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    rows_by_group = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    entries: dict[str, GroupTemperature] = {}
    for name, rows in zip(names.tolist(), rows_by_group, strict=True):  # a loop over groups
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
    return GroupTemperatures(global_fit=global_fit, groups=entries, min_group_size=m, fallback=policy)
