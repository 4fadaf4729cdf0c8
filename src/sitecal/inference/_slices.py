"""Order the slices of a series along its orientation normal, and check they form one regular volume."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pydicom

from sitecal.errors import DicomError

__all__ = ["SliceGeometry", "order_slices"]

#: Direction cosines of two slices agree to this (about 0.06°).
_ORIENTATION_TOLERANCE = 1e-3
#: A gap between neighbouring slices may differ from the median gap by this fraction.
_SPACING_TOLERANCE = 0.1


@dataclass(frozen=True)
class SliceGeometry:
    """Where the ordered volume lies in the patient (LPS, millimetres).

    ``affine`` maps the array index ``(slice, row, column, 1)`` to patient coordinates: its columns are
    the normal times the slice spacing, the column direction times the row spacing, the row direction
    times the column spacing, and the first slice's ImagePositionPatient.
    """

    affine: np.ndarray
    spacing: tuple[float, float, float]


def order_slices(datasets: Sequence[pydicom.Dataset]) -> tuple[list[int], SliceGeometry]:
    """The order of ``datasets`` by position along the normal, and the volume's geometry.

    The normal is ``row × column`` of ImageOrientationPatient (0020,0037); each slice's position is its
    ImagePositionPatient (0020,0032) projected on it, in ascending order (InstanceNumber is not used:
    some scanners number slices in the other direction, or not at all).

    Raises
    ------
    DicomError
        When a slice lacks the geometry tags, slices differ in orientation, size or pixel spacing, two
        slices lie at the same position, or the gaps between slices are irregular (a missing slice).
    """
    orientation = [_vector(ds, "ImageOrientationPatient", 6) for ds in datasets]
    positions = np.array([_vector(ds, "ImagePositionPatient", 3) for ds in datasets])
    first = orientation[0]
    if any(np.abs(o - first).max() > _ORIENTATION_TOLERANCE for o in orientation[1:]):
        raise DicomError(
            "ImageOrientationPatient (0020,0037) differs between slices: the series is not one volume."
        )
    for keyword in ("Rows", "Columns"):
        if len({int(ds.get(keyword, 0)) for ds in datasets}) > 1:
            raise DicomError(f"{keyword} differs between slices: the series is not one volume.")
    pixel = [tuple(float(v) for v in ds.get("PixelSpacing", [1.0, 1.0])) for ds in datasets]
    if len(set(pixel)) > 1:
        raise DicomError("PixelSpacing (0028,0030) differs between slices: the series is not one volume.")
    row, column = first[:3], first[3:]
    normal = np.cross(row, column)
    depth = positions @ normal
    order = np.argsort(depth, kind="stable")
    gaps = np.diff(depth[order])
    if len(gaps) and gaps.min() <= 1e-3:
        raise DicomError(
            "two slices lie at the same ImagePositionPatient (0020,0032): the series mixes acquisitions."
        )
    spacing_between = float(np.median(gaps)) if len(gaps) else float(datasets[0].get("SliceThickness", 1.0))
    if len(gaps) and np.abs(gaps - spacing_between).max() > _SPACING_TOLERANCE * spacing_between:
        raise DicomError(
            f"slice gaps are irregular ({gaps.min():.3g} to {gaps.max():.3g} mm): a slice may be missing "
            "from the series."
        )
    row_spacing, column_spacing = pixel[0]
    affine = np.eye(4)
    affine[:3, 0] = normal * spacing_between
    affine[:3, 1] = column * row_spacing
    affine[:3, 2] = row * column_spacing
    affine[:3, 3] = positions[order[0]]
    return [int(i) for i in order], SliceGeometry(affine, (spacing_between, row_spacing, column_spacing))


def _vector(ds: pydicom.Dataset, keyword: str, length: int) -> np.ndarray:
    value = ds.get(keyword)
    try:
        vector = np.array([float(v) for v in value], dtype=np.float64) if value is not None else None
    except (TypeError, ValueError):
        vector = None
    if vector is None or vector.shape != (length,) or not np.isfinite(vector).all():
        raise DicomError(
            f"{keyword} missing or malformed on a slice: the series cannot be put in slice order."
        )
    return vector
