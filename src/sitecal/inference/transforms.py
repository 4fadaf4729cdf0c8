"""The protocol's MONAI transform chain, and its fingerprint (for the logit cache and provenance)."""

from __future__ import annotations

import hashlib
import inspect
import json
import warnings
from collections.abc import Mapping, Sequence

import monai
import monai.transforms as mt

from sitecal.errors import ProtocolError
from sitecal.inference.reader import DEFAULT_MAX_VALUES, DicomImageReader
from sitecal.protocol import TransformSettings, transform_problem

__all__ = ["build_transforms", "dicom_loader", "loaded_size_multiple", "transform_fingerprint"]

#: What an array transform holds at its peak beyond its input, in float32 copies of the input: measured
#: (peak RSS added) on MONAI 1.6 with a 1 x 4096 x 4096 float32 image, rounded up to a half: ScaleIntensity,
#: ScaleIntensityRange and ScaleIntensityRangePercentiles 3.1 to 3.2, NormalizeIntensity 2.2,
#: ThresholdIntensity 1.3, ClipIntensityPercentiles 1.1, Flip 1.2, SpatialPad (to 4200 x 4200) 1.2,
#: Rotate90 1.1, CropForeground 0.6, Spacing (to twice the pixel spacing) 4.9. Orientation (a permutation,
#: not measured: it needs nibabel) is charged as a flip. Spacing to a finer pixel spacing makes a larger
#: image than it was given, which this does not cover. EnsureChannelFirst is a view; a transform not
#: listed holds less than a copy.
_COPIES = {
    "ScaleIntensity": 3.5,
    "ScaleIntensityRange": 3.5,
    "ScaleIntensityRangePercentiles": 3.5,
    "NormalizeIntensity": 2.5,
    "ThresholdIntensity": 1.5,
    "ClipIntensityPercentiles": 1.5,
    "Flip": 1.5,
    "SpatialPad": 1.5,
    "Rotate90": 1.5,
    "Orientation": 1.5,
    "CropForeground": 1.0,
    "Spacing": 5.0,
}
#: Transforms after which the image has at most their own spatial size, no longer the size it was loaded
#: at (the allowlist bounds that size): what follows them no longer scales with the file's image.
_TO_FIXED_SIZE = frozenset({"Resize", "ResizeWithPadOrCrop", "CenterSpatialCrop"})


def loaded_size_multiple(specs: Sequence[TransformSettings]) -> float:
    """What the protocol's transforms hold at their peak while the image has its loaded size, in images.

    The image the reader returns is held by one transform at a time: each holds its input (the image, or
    ``RepeatChannel``'s copies of it) and its own copies (:data:`_COPIES`), until a transform brings it to
    a fixed size (``Resize``, ``ResizeWithPadOrCrop``, ``CenterSpatialCrop``). 1 means the image alone.
    :class:`~sitecal.inference.reader.DicomImageReader` counts it in the image's memory budget.

    Examples
    --------
    >>> from sitecal.protocol import TransformSettings as T
    >>> loaded_size_multiple([T(name="EnsureChannelFirst", args={"channel_dim": "no_channel"}),
    ...                       T(name="Resize", args={"spatial_size": [64, 64]}), T(name="ScaleIntensity")])
    1.0
    >>> loaded_size_multiple([T(name="ScaleIntensity"), T(name="Resize", args={"spatial_size": [64, 64]})])
    4.5
    """
    size, peak = 1.0, 1.0
    for spec in specs:
        if spec.name in _TO_FIXED_SIZE:
            break
        if spec.name == "RepeatChannel":  # the allowlist makes repeats an integer from 1 to 16
            repeats = int(spec.args.get("repeats", 1))
            peak = max(peak, size * (1 + repeats))
            size *= repeats
            continue
        peak = max(peak, size * (1 + _COPIES.get(spec.name, 0.0)))
    return peak


def dicom_loader(
    voi: str = "none", *, max_values: int = DEFAULT_MAX_VALUES, transform_multiple: float = 1.0
) -> mt.LoadImage:
    """``monai.transforms.LoadImage`` with :class:`DicomImageReader` as its only reader.

    ``LoadImage`` instantiates every default reader first (some warn when their optional decoders are
    missing) and, when the given reader fails, retries the file with each of them; sitecal's files are
    DICOM and a failure is an exclusion, so the defaults are dropped. ``LoadImage`` (``dtype=None``) takes
    the reader's float32 array as its tensor without a copy.
    """
    reader = DicomImageReader(voi=voi, max_values=max_values, transform_multiple=transform_multiple)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = mt.LoadImage(reader=reader, image_only=True, dtype=None)
    loader.readers = [reader for reader in loader.readers if isinstance(reader, DicomImageReader)]
    return loader


def build_transforms(
    specs: Sequence[TransformSettings],
    *,
    load: bool = True,
    voi: str = "none",
    max_values: int = DEFAULT_MAX_VALUES,
) -> mt.Compose:
    """Compose ``LoadImage(DicomImageReader(voi))`` (when ``load``) and the protocol's array transforms.

    Each entry is checked against :data:`sitecal.protocol.TRANSFORM_ALLOWLIST` again here, whatever built
    it (``TransformSettings.model_construct`` skips the schema): only an allowlisted class of
    ``monai.transforms`` is instantiated, and only with plain arguments, so no name in a protocol reaches
    MONAI's lookup of readers, functions or dtypes. The reader's memory budget (``max_values`` x 6 bytes)
    also covers what these transforms hold while the image has its loaded size
    (:func:`loaded_size_multiple`); ``EnsureType`` at the end converts without copying.

    Raises
    ------
    ProtocolError
        When an entry is not allowlisted, the installed MONAI lacks the transform, or MONAI rejects the
        arguments; the message names the entry and field, ``inputs.transforms[i].args.mode``.
    """
    chain: list[mt.Transform] = []
    checked: list[TransformSettings] = []
    for i, spec in enumerate(specs):
        # one snapshot, checked and then used: what is checked is what MONAI receives
        name, args = getattr(spec, "name", None), getattr(spec, "args", None)
        args = dict(args) if isinstance(args, Mapping) else args
        problem = transform_problem(name, args)
        if problem is not None:
            where, message = problem
            raise ProtocolError(f"inputs.transforms[{i}].{'.'.join(where)}: {message}")
        assert isinstance(name, str) and isinstance(args, dict)
        cls = _transform_class(name)
        if cls is None:
            raise ProtocolError(
                f"inputs.transforms[{i}].name: '{name}' is not in the installed MONAI "
                f"{monai.__version__}. Install a MONAI version that has it, or use another transform."
            )
        try:
            chain.append(cls(**args))
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"inputs.transforms[{i}] ({name}): invalid arguments: {exc}") from None
        checked.append(TransformSettings.model_construct(name=name, args=args))
    if load:
        multiple = loaded_size_multiple(checked)
        chain.insert(0, dicom_loader(voi, max_values=max_values, transform_multiple=multiple))
    chain.append(mt.EnsureType(data_type="tensor", dtype=None, track_meta=False))
    return mt.Compose(chain, map_items=False)  # a list of files is one series, not several items


def _transform_class(name: str) -> type[mt.Transform] | None:
    """The allowlisted array transform class ``monai.transforms.<name>``, or None when MONAI lacks it."""
    cls = getattr(mt, name, None)
    if inspect.isclass(cls) and issubclass(cls, mt.Transform) and not issubclass(cls, mt.MapTransform):
        return cls
    return None


def transform_fingerprint(specs: Sequence[TransformSettings], voi: str = "none") -> str:
    """sha256 of the canonical JSON of the transform chain (reader included by name, version and VOI).

    The arguments are plain JSON values (the allowlist admits nothing else), so the JSON is canonical.
    """
    canonical = json.dumps(
        {
            "reader": "sitecal.DicomImageReader/3",
            "voi": voi,
            "monai": monai.__version__,
            "transforms": [{"name": s.name, "args": s.args} for s in specs],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()
