"""The MONAI array transforms a protocol may name, and the arguments each may take: data, not code.

A protocol's ``inputs.transforms`` becomes ``monai.transforms.<name>(**args)``. MONAI resolves some
arguments by name (a reader given as ``"os.system"``, a ``func`` or ``select_fn``, a dtype string, a
``_target_``), so a free choice of transform and arguments would let a protocol file run code. Only what
:data:`TRANSFORM_ALLOWLIST` lists is accepted: per transform, argument names with plain values (integers
and numbers within bounds, booleans, words from a fixed vocabulary, and short lists of those). Nothing here
imports MONAI: loading a protocol stays cheap, and the list is read, never executed.

The names, defaults and vocabularies were read from MONAI 1.6 (``monai.transforms.spatial.array``,
``croppad.array``, ``intensity.array``, ``utility.array`` and the enums in ``monai.utils.enums``); a test
checks every listed argument and word against the installed MONAI, and a transform the installed MONAI
lacks is refused by :func:`sitecal.inference.build_transforms` with its name.

Bounds where they matter: a spatial size is at most 4096 per axis and 2**28 voxels in all (1 GiB of
float32), a scalar size (applied to every axis) at most 512; CropForeground's margin and divisor at most
64; Spacing's pixel spacing from 0.05 to 50 mm (finer spacing multiplies the voxel count); RepeatChannel
at most 16 copies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sitecal.protocol._base import _spelling_guess

__all__ = ["TRANSFORM_ALLOWLIST", "Argument", "transform_problem"]

#: A spatial size may hold at most this many voxels in all (1 GiB as float32).
MAX_VOXELS = 2**28


@dataclass(frozen=True)
class _Integer:
    low: int
    high: int
    also: tuple[int, ...] = ()
    note: str = ""

    def accepts(self, value: object) -> bool:
        # bool is a subclass of int: `true` is not a size
        return type(value) is int and (self.low <= value <= self.high or value in self.also)

    def describe(self) -> str:
        also = "".join(f" or {a}" for a in self.also)
        return f"an integer from {self.low} to {self.high}{also}{self.note}"


@dataclass(frozen=True)
class _Number:
    low: float | None = None
    high: float | None = None

    def accepts(self, value: object) -> bool:
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range
            return False
        return (
            math.isfinite(number)
            and (self.low is None or number >= self.low)
            and (self.high is None or number <= self.high)
        )

    def describe(self) -> str:
        if self.low is None and self.high is None:
            return "a finite number"
        if self.high is None:
            return f"a number >= {self.low:g}"
        if self.low is None:
            return f"a number <= {self.high:g}"
        return f"a number from {self.low:g} to {self.high:g}"


@dataclass(frozen=True)
class _Flag:
    def accepts(self, value: object) -> bool:
        return type(value) is bool

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class _Word:
    options: tuple[str, ...]

    def accepts(self, value: object) -> bool:
        return type(value) is str and value in self.options

    def describe(self) -> str:
        return "one of " + ", ".join(f"'{o}'" for o in self.options)


@dataclass(frozen=True)
class _Axcodes:
    """Orientation codes: one letter from each of 2 or 3 of the pairs L/R, A/P, I/S, e.g. ``RAS``."""

    def accepts(self, value: object) -> bool:
        if type(value) is not str or not 2 <= len(value) <= 3:
            return False
        axes = [next((pair for pair in ("LR", "AP", "IS") if letter in pair), None) for letter in value]
        return None not in axes and len(set(axes)) == len(axes)

    def describe(self) -> str:
        return "2 or 3 letters, at most one from each of L/R, A/P and I/S (e.g. 'RAS')"


@dataclass(frozen=True)
class _Null:
    def accepts(self, value: object) -> bool:
        return value is None

    def describe(self) -> str:
        return "null"


_Scalar = _Integer | _Number | _Flag | _Word | _Axcodes | _Null


@dataclass(frozen=True)
class _ListOf:
    item: _Scalar
    min_len: int
    max_len: int
    max_product: int | None = None

    def accepts(self, value: object) -> bool:
        # exact types: a subclass could carry behaviour of its own
        if type(value) not in (list, tuple):
            return False
        assert isinstance(value, list | tuple)
        if not self.min_len <= len(value) <= self.max_len:
            return False
        if not all(self.item.accepts(v) for v in value):
            return False
        # -1 keeps the image's own size on that axis: the reader's pixel limits bound that one
        return self.max_product is None or math.prod(v for v in value if v > 0) <= self.max_product

    def describe(self) -> str:
        count = f"{self.min_len}" if self.min_len == self.max_len else f"{self.min_len} to {self.max_len}"
        product = f", at most {self.max_product} voxels in all" if self.max_product else ""
        return f"a list of {count} items, each {self.item.describe()}{product}"


_Form = _Scalar | _ListOf


@dataclass(frozen=True)
class Argument:
    """What one keyword argument of an allowed transform accepts.

    Parameters
    ----------
    forms : tuple
        The accepted forms; a value must match one of them.
    required : bool
        MONAI gives the argument no default, so the protocol must.
    only_with : tuple of (str, object), optional
        ``(other argument, value)``: this argument is accepted only when the other one has that value
        (its default counts), e.g. a padding ``value`` only with ``mode: constant``.
    default : object
        The MONAI default of ``only_with``'s argument, used when the protocol does not give it.
    """

    forms: tuple[_Form, ...]
    required: bool = False
    only_with: tuple[str, object] | None = None
    default: object = None

    def accepts(self, value: object) -> bool:
        """Whether ``value`` matches one of the forms."""
        return any(form.accepts(value) for form in self.forms)

    def describe(self) -> str:
        """The accepted forms, in words."""
        return ", or ".join(form.describe() for form in self.forms)


def _arg(
    *forms: _Form, required: bool = False, only_with: tuple[str, object] | None = None, default: object = None
) -> Argument:
    return Argument(forms=forms, required=required, only_with=only_with, default=default)


# Building blocks. Vocabularies are MONAI's enums (monai.utils.enums), minus what is never wanted: the
# numpy pad mode 'empty' leaves memory uninitialised, so it is not a padding mode here.
_BOOL = _Flag()
_NULL = _Null()
_NUMBER = _Number()
_SIZE_AXIS = _Integer(1, 4096, also=(-1,), note=" (-1: the image's own size on that axis)")
_SIZE = (
    _Integer(1, 512, note=" (applied to every spatial axis)"),
    _ListOf(_SIZE_AXIS, 1, 3, max_product=MAX_VOXELS),
)
_AXIS = _Integer(-3, 2)
_INTERPOLATE = _Word(("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area"))
_GRID_SAMPLE = _Word(("nearest", "bilinear", "bicubic"))
_GRID_PADDING = _Word(("zeros", "border", "reflection"))
_PAD_MODE = _Word(
    (
        "constant",
        "edge",
        "reflect",
        "replicate",
        "circular",
        "symmetric",
        "wrap",
        "linear_ramp",
        "maximum",
        "mean",
        "median",
        "minimum",
    )
)
_PAD_METHOD = _Word(("symmetric", "end"))
_PAD_VALUE = _arg(_NUMBER, only_with=("mode", "constant"), default="constant")
_PERCENTILE = _Number(0.0, 100.0)
_OPTIONAL_NUMBER = _arg(_NUMBER, _NULL)
_REQUIRED_NUMBER = _arg(_NUMBER, required=True)
_REQUIRED_OPTIONAL_NUMBER = _arg(_NUMBER, _NULL, required=True)
_REQUIRED_SIZE = _arg(*_SIZE, required=True)
_PER_CHANNEL = _arg(_NUMBER, _ListOf(_NUMBER, 1, 16), _NULL)
_PIXDIM = _Number(0.05, 50.0)

#: Transform name in ``monai.transforms`` -> argument name -> what it accepts. Arguments left out keep
#: MONAI's defaults; among them every one MONAI resolves by name (``dtype``, ``select_fn``, ``labels``),
#: ``lazy`` (the chain runs eagerly), and those that change what a transform returns
#: (``return_coords``, ``return_clipping_values``).
TRANSFORM_ALLOWLIST: Mapping[str, Mapping[str, Argument]] = {
    "EnsureChannelFirst": {
        "channel_dim": _arg(_Integer(-4, 3), _Word(("no_channel",)), _NULL),
        "strict_check": _arg(_BOOL),
    },
    "Resize": {
        "spatial_size": _REQUIRED_SIZE,
        "size_mode": _arg(_Word(("all", "longest"))),
        "mode": _arg(_INTERPOLATE),
        "align_corners": _arg(_BOOL, _NULL),
        "anti_aliasing": _arg(_BOOL),
        "anti_aliasing_sigma": _arg(_Number(0.0, 100.0), _ListOf(_Number(0.0, 100.0), 1, 3), _NULL),
    },
    "ResizeWithPadOrCrop": {
        "spatial_size": _REQUIRED_SIZE,
        "method": _arg(_PAD_METHOD),
        "mode": _arg(_PAD_MODE),
        "value": _PAD_VALUE,
    },
    "SpatialPad": {
        "spatial_size": _REQUIRED_SIZE,
        "method": _arg(_PAD_METHOD),
        "mode": _arg(_PAD_MODE),
        "value": _PAD_VALUE,
    },
    "CenterSpatialCrop": {
        "roi_size": _REQUIRED_SIZE,
    },
    "CropForeground": {
        "margin": _arg(_Integer(0, 64), _ListOf(_Integer(0, 64), 1, 3)),
        "k_divisible": _arg(_Integer(1, 64), _ListOf(_Integer(1, 64), 1, 3)),
        "allow_smaller": _arg(_BOOL),
        "mode": _arg(_PAD_MODE),
        "value": _PAD_VALUE,
    },
    "ScaleIntensity": {
        "minv": _OPTIONAL_NUMBER,
        "maxv": _OPTIONAL_NUMBER,
        "factor": _OPTIONAL_NUMBER,
        "channel_wise": _arg(_BOOL),
    },
    "ScaleIntensityRange": {
        "a_min": _REQUIRED_NUMBER,
        "a_max": _REQUIRED_NUMBER,
        "b_min": _OPTIONAL_NUMBER,
        "b_max": _OPTIONAL_NUMBER,
        "clip": _arg(_BOOL),
    },
    "ScaleIntensityRangePercentiles": {
        "lower": _arg(_PERCENTILE, required=True),
        "upper": _arg(_PERCENTILE, required=True),
        "b_min": _REQUIRED_OPTIONAL_NUMBER,
        "b_max": _REQUIRED_OPTIONAL_NUMBER,
        "clip": _arg(_BOOL),
        "relative": _arg(_BOOL),
        "channel_wise": _arg(_BOOL),
    },
    "NormalizeIntensity": {
        "subtrahend": _PER_CHANNEL,
        "divisor": _PER_CHANNEL,
        "nonzero": _arg(_BOOL),
        "channel_wise": _arg(_BOOL),
    },
    "ThresholdIntensity": {
        "threshold": _REQUIRED_NUMBER,
        "above": _arg(_BOOL),
        "cval": _arg(_NUMBER),
    },
    "ClipIntensityPercentiles": {
        "lower": _arg(_PERCENTILE, _NULL, required=True),
        "upper": _arg(_PERCENTILE, _NULL, required=True),
        "sharpness_factor": _arg(_Number(0.0, 1e6), _NULL),
        "channel_wise": _arg(_BOOL),
    },
    "Orientation": {
        "axcodes": _arg(_Axcodes()),
        "as_closest_canonical": _arg(_BOOL),
    },
    "Spacing": {
        "pixdim": _arg(_PIXDIM, _ListOf(_PIXDIM, 1, 3), required=True),
        "diagonal": _arg(_BOOL),
        "mode": _arg(_GRID_SAMPLE),
        "padding_mode": _arg(_GRID_PADDING),
        "align_corners": _arg(_BOOL),
        "scale_extent": _arg(_BOOL),
        "recompute_affine": _arg(_BOOL),
        "min_pixdim": _arg(_PIXDIM, _ListOf(_PIXDIM, 1, 3), _NULL),
        "max_pixdim": _arg(_PIXDIM, _ListOf(_PIXDIM, 1, 3), _NULL),
    },
    "Flip": {
        "spatial_axis": _arg(_AXIS, _ListOf(_AXIS, 1, 3), _NULL),
    },
    "Rotate90": {
        "k": _arg(_Integer(-3, 3)),
        "spatial_axes": _arg(_ListOf(_AXIS, 2, 2)),
    },
    "RepeatChannel": {
        "repeats": _arg(_Integer(1, 16), required=True),
    },
    "Transpose": {
        "indices": _arg(_ListOf(_Integer(0, 3), 2, 4), _NULL, required=True),
    },
}


def transform_problem(name: object, args: object) -> tuple[tuple[str, ...], str] | None:
    """Why a protocol may not give this transform entry, or ``None`` when it may.

    Parameters
    ----------
    name : object
        The entry's ``name``.
    args : object
        The entry's ``args``: a mapping of argument names to plain values.

    Returns
    -------
    tuple of (location, message), or None
        ``location`` is the field within the entry, ``("name",)``, ``("args",)`` or ``("args", argument)``;
        ``message`` says what was wrong and what is allowed. It quotes the protocol's own text, which holds
        no patient data, shortened.

    Examples
    --------
    >>> transform_problem("Resize", {"spatial_size": [64, 64]}) is None
    True
    >>> transform_problem("LoadImage", {"reader": "os.system"})[0]
    ('name',)
    """
    allowed = TRANSFORM_ALLOWLIST.get(name) if type(name) is str else None
    if allowed is None:
        names = sorted(TRANSFORM_ALLOWLIST)
        guess = _spelling_guess(name, names) if type(name) is str else ""
        return ("name",), (
            f"{_shown(name)} is not a transform a protocol may name: sitecal reads the images itself and "
            f"accepts these MONAI array transforms: {', '.join(names)}.{guess}"
        )
    if not isinstance(args, Mapping):
        return ("args",), f"{name} args must be a mapping of argument names to values. Got {_shown(args)}"
    for key, value in args.items():
        if type(key) is not str or key not in allowed:
            guess = _spelling_guess(key, allowed) if type(key) is str else ""
            listed = ", ".join(sorted(allowed)) or "none"
            return ("args", str(key)), (
                f"{_shown(key)} is not an argument a protocol may give {name} (arguments are plain numbers, "
                f"booleans and fixed words: nothing that names code, a reader or a data type). "
                f"Allowed: {listed}.{guess}"
            )
        spec = allowed[key]
        if not spec.accepts(value):
            guess = ""
            if type(value) is str:
                words = [o for f in spec.forms if isinstance(f, _Word) for o in f.options]
                guess = _spelling_guess(value, words)
            return ("args", key), f"{name} '{key}' must be {spec.describe()}. Got {_shown(value)}.{guess}"
        if spec.only_with is not None:
            other, needed = spec.only_with
            if args.get(other, spec.default) != needed:
                return ("args", key), (
                    f"{name} '{key}' applies only with '{other}: {needed}'. Remove '{key}' or set "
                    f"'{other}: {needed}'."
                )
    for key, spec in allowed.items():
        if spec.required and key not in args:
            return ("args", key), f"{name} needs '{key}': {spec.describe()}. Add it under args."
    return None


def _shown(value: Any) -> str:
    """A short rendering of a protocol value for a message: scalars as written, containers by kind."""
    if type(value) is int and value.bit_length() > 64:  # repr of a huge int is long, or refused
        return "an integer beyond 64 bits"
    if _is_scalar(value):
        return repr(value if type(value) is not str or len(value) <= 40 else value[:37] + "...")
    if isinstance(value, list | tuple):
        if all(_is_scalar(v) for v in value):
            return "[" + ", ".join(_shown(v) for v in value[:8]) + (", ...]" if len(value) > 8 else "]")
        return "a list holding " + _kind(next(v for v in value if not _is_scalar(v)))
    return _kind(value)


def _is_scalar(value: Any) -> bool:
    return value is None or type(value) in (bool, int, float, str)


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__} value"
