"""Bootstrap settings and result objects."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from sitecal._validation import check_float, check_int, check_option
from sitecal.errors import DataError

__all__ = ["METHODS", "BootstrapResult", "BootstrapSpec", "Method"]

Method = Literal["percentile", "bca"]
METHODS = ("percentile", "bca")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def validated_options(
    *, n_resamples: Any, level: Any, method: Any, seed: Any, chunk_size: Any, func: str
) -> tuple[int, float, str, int, int | None]:
    """Validate the bootstrap options in one place (messages name ``func``)."""
    b = check_int(n_resamples, name="n_resamples", func=func, minimum=2)
    lvl = check_float(level, name="level", func=func, low=0.0, high=1.0)
    how = check_option(method, name="method", func=func, options=METHODS)
    s = check_int(seed, name="seed", func=func, minimum=0)
    chunk = None if chunk_size is None else check_int(chunk_size, name="chunk_size", func=func, minimum=1)
    return b, lvl, how, s, chunk


@dataclass(frozen=True)
class BootstrapSpec:
    """How to bootstrap: a value passed around instead of global configuration.

    Attributes
    ----------
    n_resamples : int, default 1000
        Bootstrap resamples B (>= 2).
    level : float, default 0.95
        Two-sided confidence level in (0, 1).
    method : {"percentile", "bca"}, default "percentile"
        Interval method (matched case-insensitively, so ``"BCa"`` works).
    seed : int, default 0
        Seed of ``numpy.random.default_rng``; recorded in every result.
    chunk_size : int or None, default None
        Resamples evaluated per batch (memory only: results are identical for any value). None picks
        a batch of about 4 million array elements.
    workers : int or None, default None
        Threads that evaluate chunks in parallel (speed only: results are identical for any value, so
        it is not recorded by :meth:`to_dict`). None uses every core this process may run on.
    """

    n_resamples: int = 1000
    level: float = 0.95
    method: str = "percentile"
    seed: int = 0
    chunk_size: int | None = None
    workers: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        b, lvl, how, s, chunk = validated_options(
            n_resamples=self.n_resamples,
            level=self.level,
            method=self.method,
            seed=self.seed,
            chunk_size=self.chunk_size,
            func="BootstrapSpec",
        )
        for name, value in (("n_resamples", b), ("level", lvl), ("method", how), ("seed", s)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "chunk_size", chunk)
        if self.workers is not None:
            object.__setattr__(
                self, "workers", check_int(self.workers, name="workers", func="BootstrapSpec", minimum=1)
            )

    @property
    def n_workers(self) -> int:
        """Threads to use: ``workers``, or the cores available to this process."""
        return self.workers if self.workers is not None else available_cores()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "n_resamples": self.n_resamples,
            "level": self.level,
            "method": self.method,
            "seed": self.seed,
            "chunk_size": self.chunk_size,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BootstrapSpec:
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(**data)
        except TypeError as exc:
            raise DataError(f"BootstrapSpec.from_dict got a malformed dict ({exc}).") from exc


def _json_float(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class BootstrapResult:
    """A bootstrap confidence interval and what it was computed from.

    Attributes
    ----------
    estimate : float
        The statistic on the original data (all weights 1).
    low, high : float
        Interval ends; NaN when undefined (see ``note``).
    level : float
        Two-sided confidence level.
    method : {"percentile", "bca"}
    n_resamples : int
    seed : int
    n : int
        Rows (studies).
    n_clusters : int
        Resampled units (patients); equals ``n`` without clusters.
    n_strata : int
        Strata resampled independently (1 without strata).
    standard_error : float
        Standard deviation (ddof=1) of the bootstrap replicates.
    bias : float
        Mean of the replicates minus the estimate (binned ECE is biased upward on small groups).
    note : str
        "" or why the interval is degenerate or undefined, in words.
    reason : str
        "" or the same as a code, for documents to store (``sitecal.results.IntervalNote``):
        'replicates_not_finite', 'replicates_equal_one_cluster', 'replicates_equal_no_variation',
        'bca_estimate_below_replicates', 'bca_estimate_above_replicates' or 'bca_acceleration_too_large'.
    """

    estimate: float
    low: float
    high: float
    level: float
    method: str
    n_resamples: int
    seed: int
    n: int
    n_clusters: int
    n_strata: int
    standard_error: float
    bias: float
    note: str = ""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (NaN and infinities become None)."""
        return {
            "estimate": _json_float(self.estimate),
            "low": _json_float(self.low),
            "high": _json_float(self.high),
            "level": self.level,
            "method": self.method,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "n": self.n,
            "n_clusters": self.n_clusters,
            "n_strata": self.n_strata,
            "standard_error": _json_float(self.standard_error),
            "bias": _json_float(self.bias),
            "note": self.note,
            "reason": self.reason,
        }
