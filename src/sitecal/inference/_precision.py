"""Mixed precision for inference, used only where it moves no calibrated probability by more than a tolerance.

``inputs.precision: float16 | bfloat16`` runs the model under :func:`torch.autocast` (CUDA; bfloat16 also on
CPU). Before the run, the first :data:`CHECK_STUDIES` studies that load are run in float32 and in the
requested precision, and the largest change of any class probability is measured over the temperatures of
:data:`TEMPERATURES` (:func:`max_probability_change`): a temperature fitted later divides the logits, and a
small one magnifies their rounding error, so the check covers the probabilities any plausible temperature
could give, not only the raw softmax. Above ``inputs.precision_tolerance`` the run falls back to float32,
with a logged warning naming the measured change; so does a device that cannot run the precision (float16 on
CPU, bfloat16 on a GPU without it) and a model that fails under autocast. :class:`PrecisionCheck` records
what was asked, what ran and what was measured; the logit cache keeps each precision's logits apart
(:meth:`sitecal.inference.LogitCache.for_precision`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

__all__ = [
    "CHECK_STUDIES",
    "PRECISIONS",
    "TEMPERATURES",
    "Precision",
    "PrecisionCheck",
    "autocast",
    "max_probability_change",
    "supported",
]

Precision = Literal["float32", "float16", "bfloat16"]
#: The precisions ``inputs.precision`` accepts; float32 is the reference every other is checked against.
PRECISIONS: tuple[Precision, ...] = ("float32", "float16", "bfloat16")
#: Temperatures over which :func:`max_probability_change` compares probabilities: 2^(k/2), k = -4..4, i.e.
#: 0.25 to 4 (a fitted temperature outside this range is rare; below 1 it magnifies logit error).
TEMPERATURES: tuple[float, ...] = tuple(float(2.0 ** (k / 2)) for k in range(-4, 5))
#: Studies run in both precisions before the run (the first that load, in input order).
CHECK_STUDIES = 32

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}

#: What a check found, as codes (the report words them): the precision was float32 anyway, the change was
#: within the tolerance, it exceeded it, the device cannot run the precision, the model failed under it,
#: or no study loaded to check it on.
Outcome = Literal["float32", "passed", "exceeded", "unsupported", "model_failed", "no_studies"]


@dataclass(frozen=True)
class PrecisionCheck:
    """The precision asked for, the one the logits were computed in, and the check between them.

    Attributes
    ----------
    requested, used : {"float32", "float16", "bfloat16"}
        ``used`` is ``requested`` when the check passed, else ``"float32"``.
    outcome : str
        ``"float32"`` (nothing to check), ``"passed"``, ``"exceeded"`` (the change was above the
        tolerance), ``"unsupported"`` (the device cannot run ``requested``), ``"model_failed"`` (the model
        raised, or returned non-finite logits, under ``requested`` on a study it runs on in float32) or
        ``"no_studies"`` (no study loaded to check on).
    max_change : float or None
        The largest change of any class probability between float32 and ``requested`` over the checked
        studies and :data:`TEMPERATURES` (:func:`max_probability_change`); ``None`` when nothing was
        compared, ``inf`` when ``requested`` gave a non-finite logit where float32 did not.
    tolerance : float
        The largest change accepted (``inputs.precision_tolerance``).
    n_studies : int
        Studies compared.
    """

    requested: Precision = "float32"
    used: Precision = "float32"
    outcome: Outcome = "float32"
    max_change: float | None = None
    tolerance: float = 1e-3
    n_studies: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON values, for provenance; the temperatures compared over are :data:`TEMPERATURES`."""
        return {
            "requested": self.requested,
            "used": self.used,
            "outcome": self.outcome,
            "max_change": self.max_change,
            "tolerance": self.tolerance,
            "n_studies": self.n_studies,
            "temperatures": list(TEMPERATURES),
        }


def max_probability_change(
    reference: np.ndarray, other: np.ndarray, *, temperatures: tuple[float, ...] = TEMPERATURES
) -> float:
    r"""The largest change of any class probability between two sets of logits, over temperatures.

    .. math:: \max_{T,\,i,\,k} \left| \mathrm{softmax}(z_i / T)_k - \mathrm{softmax}(z'_i / T)_k \right|

    Parameters
    ----------
    reference, other : ndarray of shape (n, C)
        Logits of the same studies (``reference`` finite), e.g. float32 and mixed precision.
    temperatures : tuple of float, default :data:`TEMPERATURES`
        Each > 0.

    Returns
    -------
    float
        In [0, 1]; ``inf`` when ``other`` holds a non-finite value, 0.0 for no rows.

    Examples
    --------
    >>> import numpy as np
    >>> z = np.array([[0.0, 1.0]])
    >>> change = max_probability_change(z, z + [[0.0, 0.01]], temperatures=(1.0,))
    >>> round(change, 6)  # sigmoid(1.01) - sigmoid(1)
    0.001962
    """
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"logits of shapes {a.shape} and {b.shape}: expected two arrays of one shape (n, C)")
    if not np.isfinite(b).all():
        return float("inf")
    if not len(a):
        return 0.0
    return max(float(np.abs(_softmax(a / t) - _softmax(b / t)).max()) for t in temperatures)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return out


def supported(precision: Precision, device: torch.device) -> bool:
    """Whether ``device`` runs ``precision``.

    float32 anywhere; float16 and bfloat16 on CUDA (bfloat16 where the GPU has it); bfloat16 on CPU (float16
    autocast on CPU is slow, and not what a CPU site would choose).
    """
    if precision == "float32":
        return True
    if device.type == "cuda":
        return precision == "float16" or bool(torch.cuda.is_bf16_supported())
    return device.type == "cpu" and precision == "bfloat16"


@contextlib.contextmanager
def autocast(precision: Precision, device: torch.device) -> Iterator[None]:
    """:func:`torch.autocast` to ``precision`` on ``device``; nothing at all for float32."""
    if precision == "float32":
        yield
        return
    with torch.autocast(device_type=device.type, dtype=_DTYPES[precision]):
        yield
