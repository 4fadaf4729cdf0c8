"""sitecal: site- and scanner-level calibration validation of imaging AI models.

The command line (``sitecal run``, ``check``, ``predict``, ``evaluate``, ``report``, ``demo``) runs
protocols; from a notebook, :func:`evaluate_arrays` evaluates arrays of scores, labels and subgroups the
same way (imported on first use, so ``import sitecal`` stays light).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("sitecal")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

if TYPE_CHECKING:
    from sitecal.arrays import ArrayEvaluation, evaluate_arrays

__all__ = ["ArrayEvaluation", "__version__", "evaluate_arrays"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate_arrays", "ArrayEvaluation"):
        from sitecal import arrays

        return getattr(arrays, name)
    raise AttributeError(f"module 'sitecal' has no attribute {name!r}")
