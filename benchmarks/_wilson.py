"""The Wilson score interval of a rate, for the benchmarks' coverage and power tables."""

from __future__ import annotations

import math

__all__ = ["wilson", "wilson_text"]

Z975 = 1.959963984540054


def wilson(hits: float, n: int, z: float = Z975) -> tuple[float, float]:
    """Wilson score interval (95 % by default) of the proportion ``hits / n``, clipped to [0, 1].

    >>> [round(x, 4) for x in wilson(5, 100)]
    [0.0215, 0.1118]
    """
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_text(hits: int, n: int) -> str:
    """``"p % [low, high]"`` with one decimal, e.g. ``"5.0 % [2.2, 11.2]"``."""
    low, high = wilson(hits, n)
    return f"{100 * hits / n:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"
