"""What the kernels' property tests share: a small example budget and arrays drawn element by element."""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

# a few examples each: the folder runs in seconds (CI has 2 cores for the whole suite)
SMALL = settings(max_examples=60, deadline=None)


def floats(data: st.DataObject, shape: tuple[int, ...], element: st.SearchStrategy[float]) -> np.ndarray:
    """A float64 array of ``shape`` whose elements are drawn from ``element``."""
    size = int(np.prod(shape))
    flat = data.draw(st.lists(element, min_size=size, max_size=size))
    return np.array(flat, dtype=np.float64).reshape(shape)


def ints(data: st.DataObject, shape: tuple[int, ...], high: int) -> np.ndarray:
    """An int64 array of ``shape`` with elements in ``[0, high)``."""
    size = int(np.prod(shape))
    flat = data.draw(st.lists(st.integers(0, high - 1), min_size=size, max_size=size))
    return np.array(flat, dtype=np.int64).reshape(shape)
