"""A recalibration method fitted per group (site, scanner), with the global fit for small or unseen groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_groups, check_int, check_labels, check_logits, check_option
from sitecal.calibration._methods import METHODS, FittedMethod, check_weights, fit_method
from sitecal.errors import DataError

__all__ = ["GroupMethodFit", "GroupMethods", "fit_group_methods"]

FORMAT = "sitecal.group_methods"
FORMAT_VERSION = 1
SOURCES = ("own", "global_fallback")


@dataclass(frozen=True, eq=False)
class GroupMethodFit:
    """One group's entry: its size, where its map comes from and its own fit (None on fallback)."""

    group: str
    n: int
    source: str
    fit: FittedMethod | None


@dataclass(frozen=True, eq=False)
class GroupMethods:
    """A method's global fit plus one fit per group of at least ``min_group_size`` rows.

    Attributes
    ----------
    name : str
        The method, one of :data:`~sitecal.calibration.METHODS`.
    global_fit : FittedMethod
        Fit on all rows; used by groups smaller than ``min_group_size`` (source ``"global_fallback"``)
        and by groups unseen at fitting time.
    groups : Mapping[str, GroupMethodFit]
    min_group_size : int
    """

    name: str
    global_fit: FittedMethod
    groups: Mapping[str, GroupMethodFit]
    min_group_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", MappingProxyType(dict(self.groups)))

    @property
    def n_fits(self) -> int:
        """``R``, the number of fits per group."""
        return self.global_fit.n_fits

    def fit_for(self, group: str) -> FittedMethod:
        """The map a row of ``group`` gets: its own fit, else the global one."""
        entry = self.groups.get(group)
        return self.global_fit if entry is None or entry.fit is None else entry.fit

    def probabilities(self, logits: ArrayLike, groups: ArrayLike) -> NDArray[np.float64]:
        """Each row through its group's map (unseen group: global): shape (R, M, K)."""
        func = "GroupMethods.probabilities"
        z = check_logits(logits, func=func)
        g = check_groups(groups, n=z.shape[0], func=func)
        out = np.empty((self.n_fits, z.shape[0], z.shape[1]))
        names, inverse = np.unique(g, return_inverse=True)
        for j, name in enumerate(names.tolist()):  # a loop over groups present
            rows = np.flatnonzero(inverse.reshape(-1) == j)
            out[:, rows] = self.fit_for(name).probabilities(z[rows])
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (``R = 1`` only); :meth:`from_dict` restores it."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "name": self.name,
            "min_group_size": self.min_group_size,
            "global_fit": self.global_fit.to_dict(),
            "groups": {
                key: {
                    "n": e.n,
                    "source": e.source,
                    "fit": None if e.fit is None else e.fit.to_dict(),
                }
                for key, e in self.groups.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupMethods:
        """Inverse of :meth:`to_dict`."""
        if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
            raise DataError(
                f"GroupMethods.from_dict expects format {FORMAT!r} version {FORMAT_VERSION}; got format "
                f"{data.get('format')!r} version {data.get('version')!r}. Pass what to_dict() wrote, "
                "or refit."
            )
        try:
            groups = {}
            for key, e in data["groups"].items():
                source = check_option(
                    e["source"], name="source", func="GroupMethods.from_dict", options=SOURCES
                )
                fit = None if e["fit"] is None else FittedMethod.from_dict(e["fit"])
                groups[str(key)] = GroupMethodFit(str(key), int(e["n"]), source, fit)
            return cls(
                str(data["name"]),
                FittedMethod.from_dict(data["global_fit"]),
                groups,
                int(data["min_group_size"]),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise DataError(
                f"GroupMethods.from_dict got a malformed dict ({exc!r}); pass what to_dict() wrote."
            ) from exc


def fit_group_methods(
    name: str,
    logits: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    min_group_size: int,
    weights: ArrayLike | None = None,
    **options: Any,
) -> GroupMethods:
    """Fit ``name`` on all rows and on each group of at least ``min_group_size`` rows.

    Parameters
    ----------
    name, logits, labels, weights, **options
        As for :func:`~sitecal.calibration.fit_method`; ``weights`` (R, N) weight every fit (a group's
        fit uses its rows' columns).
    groups : array_like of str, shape (N,)
    min_group_size : int
        A group with at least this many rows (rows, not weights) gets its own fit (source ``"own"``);
        a smaller one uses the global fit (source ``"global_fallback"``), as
        :func:`~sitecal.calibration.fit_group_temperatures` with ``fallback="global"``.

    Returns
    -------
    GroupMethods

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 300)
    >>> z = np.stack([np.zeros(300), 3.0 * (2 * y - 1) + rng.normal(0, 2, 300)], axis=1)
    >>> sites = np.where(np.arange(300) < 280, "A", "B")
    >>> fits = fit_group_methods("beta", z, y, sites, min_group_size=50)
    >>> fits.groups["A"].source, fits.groups["B"].source
    ('own', 'global_fallback')
    """
    func = "fit_group_methods"
    method = check_option(name, name="name", func=func, options=METHODS)
    z = check_logits(logits, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    g = check_groups(groups, n=z.shape[0], func=func)
    m = check_int(min_group_size, name="min_group_size", func=func, minimum=1)
    w = None if weights is None else check_weights(weights, n=z.shape[0], func=func)
    global_fit = fit_method(method, z, y, w, **options)
    names, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    entries: dict[str, GroupMethodFit] = {}
    for j, group in enumerate(names.tolist()):  # a loop over groups
        rows = np.flatnonzero(inverse.reshape(-1) == j)
        n_g = int(counts[j])
        if n_g >= m:
            fit = fit_method(method, z[rows], y[rows], None if w is None else w[:, rows], **options)
            entries[group] = GroupMethodFit(group, n_g, "own", fit)
        else:
            entries[group] = GroupMethodFit(group, n_g, "global_fallback", None)
    return GroupMethods(method, global_fit, entries, m)
