"""The protocol's MONAI transform chain, and its fingerprint (for the logit cache and provenance)."""

from __future__ import annotations

import hashlib
import inspect
import json
import warnings
from collections.abc import Sequence

import monai.transforms as mt

from sitecal.errors import ProtocolError
from sitecal.inference.reader import DicomImageReader
from sitecal.protocol import TransformSettings

__all__ = ["build_transforms", "dicom_loader", "transform_fingerprint"]


def _available() -> dict[str, type]:
    return {
        name: obj
        for name, obj in vars(mt).items()
        if inspect.isclass(obj) and issubclass(obj, mt.Transform) and not issubclass(obj, mt.MapTransform)
    }


def dicom_loader(voi: str = "none") -> mt.LoadImage:
    """``monai.transforms.LoadImage`` with :class:`DicomImageReader` as its only reader.

    ``LoadImage`` instantiates every default reader first (some warn when their optional decoders are
    missing) and, when the given reader fails, retries the file with each of them; sitecal's files are
    DICOM and a failure is an exclusion, so the defaults are dropped.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = mt.LoadImage(reader=DicomImageReader(voi=voi), image_only=True, dtype=None)
    loader.readers = [reader for reader in loader.readers if isinstance(reader, DicomImageReader)]
    return loader


def build_transforms(
    specs: Sequence[TransformSettings], *, load: bool = True, voi: str = "none"
) -> mt.Compose:
    """Compose ``LoadImage(DicomImageReader(voi))`` (when ``load``) and the protocol's array transforms.

    Raises
    ------
    ProtocolError
        When a transform name is not a MONAI array transform or its arguments are rejected; the message
        names the entry ``inputs.transforms[i]``.
    """
    available = _available()
    chain: list[mt.Transform] = []
    if load:
        chain.append(dicom_loader(voi))
    for i, spec in enumerate(specs):
        cls = available.get(spec.name)
        if cls is None:
            import difflib

            close = difflib.get_close_matches(spec.name, list(available), n=1)
            guess = f" Did you mean '{close[0]}'?" if close else ""
            raise ProtocolError(
                f"inputs.transforms[{i}].name: '{spec.name}' is not a MONAI array transform.{guess}"
            )
        try:
            chain.append(cls(**spec.args))
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"inputs.transforms[{i}] ({spec.name}): invalid arguments: {exc}") from None
    chain.append(mt.EnsureType(data_type="tensor", dtype=None, track_meta=False))
    return mt.Compose(chain, map_items=False)  # a list of files is one series, not several items


def transform_fingerprint(specs: Sequence[TransformSettings], voi: str = "none") -> str:
    """sha256 of the canonical JSON of the transform chain (reader included by name, version and VOI)."""
    import monai

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
