"""How the kernels are compiled: numba's ``njit`` on first use, cached on disk, and their scratch arrays."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["compiled", "count_scratch"]


@functools.cache
def _jit() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The kernels' ``numba.njit`` (numba is loaded here, on first use)."""
    import numba

    def jit(func: Callable[..., Any]) -> Callable[..., Any]:
        try:
            out: Callable[..., Any] = numba.njit(nogil=True, cache=True, boundscheck=False)(func)
        except RuntimeError:  # no writable cache folder (a read-only install, no home): compile per process
            out = numba.njit(nogil=True, cache=False, boundscheck=False)(func)
        return out

    return jit


@functools.cache
def compiled(loop: Callable[..., None]) -> Callable[..., Any]:
    """``loop`` compiled by numba, on first use (importing the numeric core does not load numba).

    The functions a kernel calls on each row are named in its module's ``_HELPERS``: they are compiled
    first and put in the module's namespace in their place, so that the kernel calls them compiled.
    """
    jit = _jit()
    namespace = loop.__globals__
    for name in namespace.get("_HELPERS", ()):  # a loop over the module's helpers
        helper = namespace[name]
        namespace[name] = jit(getattr(helper, "py_func", helper))  # compiled already: from its py_func
    return jit(loop)


_SCRATCH = threading.local()


def count_scratch(r: int, k: int, name: str = "counts") -> NDArray[np.int32]:
    """An (r, k) int32 array to count draws in, this thread's own, reused by the next call.

    The counting loops run once per chunk of resamples on arrays of tens of MiB: a fresh array would
    cost its page faults again in every call. ``name``: which of the thread's arrays (a loop that
    needs two asks for each by its own name).
    """
    held: NDArray[np.int32] | None = getattr(_SCRATCH, name, None)
    if held is None or held.shape[0] < r * k:
        held = np.empty(r * k, dtype=np.int32)
        setattr(_SCRATCH, name, held)
    return held[: r * k].reshape(r, k)
