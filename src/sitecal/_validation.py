"""Boundary validation shared by the numeric core (``metrics``, ``calibration``, ``stats``).

Every public numeric function validates its inputs once, here, and then works on clean float64 /
int64 arrays. Messages follow one pattern so users can act on them::

    The 'n_bins' parameter of expected_calibration_error must be an int >= 1. Got 0.
    The 'binning' parameter of expected_calibration_error must be one of 'width', 'mass'. Got 'mas'.
    Did you mean 'mass'?

All failures raise :class:`sitecal.errors.DataError` (a ``ValueError``).
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sitecal.errors import DataError

__all__ = [
    "ROW_SUM_TOLERANCE",
    "check_float",
    "check_groups",
    "check_int",
    "check_labels",
    "check_logits",
    "check_option",
    "check_probs",
    "check_same_length",
    "check_temperature",
]

#: Rows of a probability matrix must sum to 1 within this absolute tolerance.
ROW_SUM_TOLERANCE = 1e-6


def _prefix(name: str, func: str) -> str:
    return f"The {name!r} parameter of {func}"


def _shown(value: Any) -> str:
    """Short representation of a received value for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(value: Any, *, name: str, func: str, minimum: int | None = None) -> int:
    """Return ``value`` as a Python int, or raise a DataError naming the parameter.

    ``bool`` is rejected (``True`` is not a bin count); numpy integers are accepted.
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)
    if ok and (minimum is None or int(value) >= minimum):
        return int(value)
    bound = "" if minimum is None else f" >= {minimum}"
    raise DataError(f"{_prefix(name, func)} must be an int{bound}. Got {_shown(value)}.")


def check_float(
    value: Any,
    *,
    name: str,
    func: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = True,
    high_open: bool = True,
) -> float:
    """Return ``value`` as a finite Python float inside the stated interval, or raise DataError."""
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    number = float(value) if is_real else math.nan
    ok = is_real and math.isfinite(number)
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number < high if high_open else number <= high
    if ok:
        return number
    if low is not None and high is not None:
        left, right = ("(" if low_open else "["), (")" if high_open else "]")
        what = f"a float in {left}{low:g}, {high:g}{right}"
    elif low is not None:
        what = f"a float {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        what = f"a float {'<' if high_open else '<='} {high:g}"
    else:
        what = "a finite float"
    raise DataError(f"{_prefix(name, func)} must be {what}. Got {_shown(value)}.")


def check_option(value: Any, *, name: str, func: str, options: Sequence[str]) -> str:
    """Return the option ``value`` (matched case-insensitively) or raise with a spelling guess."""
    if isinstance(value, str):
        lowered = value.lower()
        for option in options:
            if option.lower() == lowered:
                return option
    allowed = ", ".join(repr(o) for o in options)
    message = f"{_prefix(name, func)} must be one of {allowed}. Got {_shown(value)}."
    if isinstance(value, str):
        guess = difflib.get_close_matches(value.lower(), [o.lower() for o in options], n=1, cutoff=0.5)
        if guess:
            original = next(o for o in options if o.lower() == guess[0])
            message += f" Did you mean {original!r}?"
    raise DataError(message)


def _as_array(value: Any, *, name: str, func: str) -> NDArray[Any]:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor: copy to host explicitly
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise DataError(f"{_prefix(name, func)} must be an array. Got {_shown(value)} ({exc}).") from exc


def _check_real_finite(array: NDArray[Any], *, name: str, func: str) -> NDArray[np.float64]:
    if array.dtype.kind not in "biuf":
        raise DataError(f"{_prefix(name, func)} must hold real numbers. Got an array of dtype {array.dtype}.")
    out = np.asarray(array, dtype=np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"{_prefix(name, func)} must be finite. Got {float(out[where])!r} at index {where} "
            f"({int(bad.sum())} non-finite value(s) in all); drop or repair those rows first."
        )
    return out


def check_probs(value: Any, *, func: str, name: str = "probs") -> NDArray[np.float64]:
    """Validate an (N, C) probability matrix: C >= 2, N >= 1, entries in [0, 1], rows summing to 1."""
    array = _as_array(value, name=name, func=func)
    if array.ndim != 2 or array.shape[1] < 2 or array.shape[0] < 1:
        raise DataError(
            f"{_prefix(name, func)} must be a 2-D array of shape (N, C) with N >= 1 and C >= 2. "
            f"Got shape {array.shape}. For a binary model with one score per row, stack "
            "[1 - p, p] as two columns."
        )
    probs = _check_real_finite(array, name=name, func=func)
    outside = (probs < 0.0) | (probs > 1.0)
    if outside.any():
        where = tuple(int(i) for i in np.argwhere(outside)[0])
        raise DataError(
            f"{_prefix(name, func)} must hold probabilities in [0, 1]. Got {float(probs[where])!r} at index "
            f"{where}. Pass probabilities (e.g. sitecal.metrics.softmax(logits)), not logits."
        )
    sums = probs.sum(axis=1)
    off = np.abs(sums - 1.0) > ROW_SUM_TOLERANCE
    if off.any():
        row = int(np.flatnonzero(off)[0])
        raise DataError(
            f"{_prefix(name, func)} must have rows that sum to 1 (within {ROW_SUM_TOLERANCE:g}). "
            f"Row {row} sums to {float(sums[row])!r} ({int(off.sum())} such row(s)). Pass probabilities "
            "(e.g. sitecal.metrics.softmax(logits)), not logits or scores."
        )
    return probs


def check_logits(
    value: Any, *, func: str, name: str = "logits", allow_single: bool = True
) -> NDArray[np.float64]:
    """Validate logits and return them as float64 of shape (N, C).

    ``(N, C)`` with C >= 2 is returned as is. With ``allow_single``, a single binary logit per row,
    ``(N,)`` or ``(N, 1)``, is returned as the equivalent two-class logits ``[0, z]`` (the sigmoid
    model: ``softmax([0, z]) = [1 - sigmoid(z), sigmoid(z)]``).
    """
    array = _as_array(value, name=name, func=func)
    single = array.ndim == 1 or (array.ndim == 2 and array.shape[1] == 1)
    shape_ok = (array.ndim == 2 and array.shape[1] >= 2) or (allow_single and single)
    if not shape_ok or array.shape[0] < 1:
        allowed = (
            "(N, C) with C >= 2, or (N,) / (N, 1) for one binary logit"
            if allow_single
            else ("(N, C) with C >= 2")
        )
        raise DataError(
            f"{_prefix(name, func)} must have shape {allowed}, with N >= 1. Got shape {array.shape}."
        )
    logits = _check_real_finite(array, name=name, func=func)
    if single:
        z = logits.reshape(-1)
        return np.stack([np.zeros_like(z), z], axis=1)
    return logits


def check_labels(value: Any, *, n: int, n_classes: int, func: str, name: str = "labels") -> NDArray[np.int64]:
    """Validate class indices: shape (n,), integer-valued, each in [0, n_classes)."""
    array = _as_array(value, name=name, func=func)
    if array.ndim != 1 or array.shape[0] != n:
        raise DataError(
            f"{_prefix(name, func)} must have shape ({n},), one class index per row of the scores. "
            f"Got shape {array.shape}."
        )
    if array.dtype.kind == "f":
        if not np.isfinite(array).all() or not (array == np.round(array)).all():
            raise DataError(
                f"{_prefix(name, func)} must hold integer class indices. Got non-integer floats "
                "(e.g. NaN for a missing label); exclude unlabelled rows first."
            )
    elif array.dtype.kind not in "biu":
        raise DataError(
            f"{_prefix(name, func)} must hold integer class indices. Got an array of dtype {array.dtype}."
        )
    labels = array.astype(np.int64)
    bad = (labels < 0) | (labels >= n_classes)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{_prefix(name, func)} must hold class indices in [0, {n_classes}). "
            f"Got {int(labels[i])} at index {i}."
        )
    return labels


def check_same_length(n: int, other: int, *, name: str, func: str, other_name: str) -> None:
    """Raise DataError unless two arrays that must be paired row by row have the same length."""
    if n != other:
        raise DataError(
            f"{_prefix(name, func)} must have one entry per row of {other_name!r} ({other}). Got {n}."
        )


def check_groups(value: Any, *, n: int, func: str, name: str = "groups") -> NDArray[np.str_]:
    """Validate an (n,) array of group names (str) and return it as a numpy str array."""
    if isinstance(value, str):
        raise DataError(f"{_prefix(name, func)} must be an array of str, one per row. Got a single str.")
    array = _as_array(value, name=name, func=func)
    if array.ndim != 1 or array.shape[0] != n:
        raise DataError(
            f"{_prefix(name, func)} must have shape ({n},), one group name per row. Got shape {array.shape}."
        )
    if array.dtype.kind == "U":
        return array
    if array.dtype.kind == "O":
        as_str = array.astype(str)
        # element-wise comparison in C: a non-str element (int, None, float) never equals its str()
        same = as_str == array
        if bool(np.all(same)):
            return as_str
        i = int(np.flatnonzero(~np.asarray(same, dtype=bool))[0])
        raise DataError(
            f"{_prefix(name, func)} must hold str group names. Got {_shown(array[i])} at index {i}; "
            "convert the column with .astype(str) if that is what you mean."
        )
    raise DataError(
        f"{_prefix(name, func)} must hold str group names. Got an array of dtype {array.dtype}; "
        "convert the column with .astype(str) if that is what you mean."
    )


def check_temperature(value: Any, *, n: int, func: str, name: str = "temperature") -> NDArray[np.float64]:
    """Validate a temperature: a float > 0 or an (n,) array of floats > 0. Returns shape (n, 1)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_):
        t = check_float(value, name=name, func=func, low=0.0)
        return np.full((n, 1), t)
    array = _as_array(value, name=name, func=func)
    if array.ndim != 1 or array.shape[0] != n or array.dtype.kind not in "iuf":
        raise DataError(
            f"{_prefix(name, func)} must be a float > 0 or an array of shape ({n},) of floats > 0. "
            f"Got {'shape ' + str(array.shape) if array.ndim else _shown(value)}."
        )
    t_arr = np.asarray(array, dtype=np.float64)
    bad = ~(np.isfinite(t_arr) & (t_arr > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        value = float(t_arr[i])
        raise DataError(f"{_prefix(name, func)} must be > 0 and finite. Got {value!r} at index {i}.")
    return t_arr[:, None]
