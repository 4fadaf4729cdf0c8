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

__all__ = ["build_transforms", "dicom_loader", "transform_fingerprint"]


def dicom_loader(voi: str = "none", *, max_values: int = DEFAULT_MAX_VALUES) -> mt.LoadImage:
    """``monai.transforms.LoadImage`` with :class:`DicomImageReader` as its only reader.

    ``LoadImage`` instantiates every default reader first (some warn when their optional decoders are
    missing) and, when the given reader fails, retries the file with each of them; sitecal's files are
    DICOM and a failure is an exclusion, so the defaults are dropped.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = mt.LoadImage(
            reader=DicomImageReader(voi=voi, max_values=max_values), image_only=True, dtype=None
        )
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
    MONAI's lookup of readers, functions or dtypes.

    Raises
    ------
    ProtocolError
        When an entry is not allowlisted, the installed MONAI lacks the transform, or MONAI rejects the
        arguments; the message names the entry and field, ``inputs.transforms[i].args.mode``.
    """
    chain: list[mt.Transform] = []
    if load:
        chain.append(dicom_loader(voi, max_values=max_values))
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
