"""Synthetic chest CT: an analytic phantom in patient coordinates (mm, HU), sampled on a series' geometry.

A :class:`Phantom` is one study's anatomy (body, two lungs, heart, spine, pulmonary vessels) and, in
positive studies, a nodule: a small sphere denser than the lung around it. It is evaluated at the patient
coordinates of every voxel of a :class:`SeriesGeometry`, so a tilted gantry shows oblique sections and the
second reconstruction of a study shows the same anatomy. :func:`acquire` then applies a scanner's
kernel blur, HU offset and noise and returns the stored values (HU + 1024, 12 bits).

Coordinates are DICOM patient coordinates (LPS): x towards the patient's left, y posterior, z towards the
head. Volumes are indexed ``(slice, row, column)`` with slices in ascending order of the projection of
ImagePositionPatient onto the slice normal (row direction x column direction): the order the pipeline's
reader gives and the bundled model was trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage
from scipy.special import expit

from ._scanners import CtScanner, Reconstruction

__all__ = [
    "COLUMNS",
    "INTERCEPT",
    "MAX_STORED",
    "ROWS",
    "SLICE_SPACING",
    "Phantom",
    "SeriesGeometry",
    "acquire",
    "axial_geometry",
    "hu_at",
    "localizer_geometry",
    "sample_phantom",
]

ROWS = COLUMNS = 48
#: RescaleIntercept of every demo CT image (RescaleSlope is 1): HU = stored - 1024.
INTERCEPT = -1024.0
#: Largest stored value (BitsStored 12).
MAX_STORED = 4095
#: Slice spacing (= SliceThickness) of the axial reconstructions, mm.
SLICE_SPACING = 5.0

_N_VESSELS = 6
_EDGE_MM = 2.0  # width of the soft edges: a crude partial-volume effect
_AIR, _BONE = -1000.0, 450.0


@dataclass(frozen=True)
class Phantom:
    """One study's anatomy and finding, in patient millimetres and HU.

    Attributes
    ----------
    body : ndarray, shape (3,)
        Semi-axes in x and y of the elliptic body cylinder, and its centre's y.
    tissue_hu, lung_hu : float
        Soft tissue and mean lung attenuation.
    lungs : ndarray, shape (2, 6)
        Per lung: centre (x, y, z) and semi-axes (x, y, z) of an ellipsoid.
    heart : ndarray, shape (6,)
        Centre and semi-axes of the heart ellipsoid (cut out of the lungs).
    spine : ndarray, shape (3,)
        Centre (x, y) and radius of the vertebral column (a cylinder along z).
    vessels : ndarray, shape (K, 8)
        Per vessel: a point (3), a unit direction (3), a radius (mm) and its attenuation (HU).
    nodule : ndarray, shape (5,) or None
        Centre (3), radius (mm) and attenuation (HU) of the nodule; None in negative studies.
    """

    body: NDArray[np.float64]
    tissue_hu: float
    lung_hu: float
    lungs: NDArray[np.float64]
    heart: NDArray[np.float64]
    spine: NDArray[np.float64]
    vessels: NDArray[np.float64]
    nodule: NDArray[np.float64] | None


@dataclass(frozen=True)
class SeriesGeometry:
    """Where a series' voxels lie: one orientation, one position per slice, square pixels.

    Attributes
    ----------
    orientation : tuple of 6 float
        ImageOrientationPatient: row direction cosines, then column direction cosines.
    positions : ndarray, shape (n_slices, 3)
        ImagePositionPatient of each slice (centre of its first pixel), in ascending order of projection
        onto :attr:`normal`.
    pixel_spacing : float
        PixelSpacing (rows and columns alike), mm.
    thickness : float
        SliceThickness, mm.
    """

    orientation: tuple[float, ...]
    positions: NDArray[np.float64]
    pixel_spacing: float
    thickness: float

    @property
    def normal(self) -> NDArray[np.float64]:
        """Slice normal, row direction x column direction."""
        o = np.asarray(self.orientation)
        return np.cross(o[:3], o[3:])

    @property
    def n_slices(self) -> int:
        """Number of slices."""
        return int(self.positions.shape[0])

    def points(self) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float32]]:
        """Patient coordinates (x, y, z) of every voxel, each an array (n_slices, ROWS, COLUMNS)."""
        o = np.asarray(self.orientation)
        r = np.arange(ROWS, dtype=np.float64)[:, None, None] * self.pixel_spacing
        c = np.arange(COLUMNS, dtype=np.float64)[None, :, None] * self.pixel_spacing
        plane = c * o[:3] + r * o[3:]  # (ROWS, COLUMNS, 3): pixel (r, c) = IPP + c*dc*row + r*dr*col
        p = (self.positions[:, None, None, :] + plane[None]).astype(np.float32)
        return p[..., 0], p[..., 1], p[..., 2]


def _soft(inside_mm: NDArray[np.float32]) -> NDArray[np.float32]:
    out: NDArray[np.float32] = expit(inside_mm * (1.0 / _EDGE_MM))
    return out


def _ellipsoid(
    x: NDArray[np.float32], y: NDArray[np.float32], z: NDArray[np.float32], e: NDArray[np.float64]
) -> NDArray[np.float32]:
    cx, cy, cz, rx, ry, rz = e.tolist()  # Python floats keep float32 arithmetic float32
    q = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 + ((z - cz) / rz) ** 2
    # (1 - sqrt(q)) times the smallest semi-axis: a signed distance, exact on that axis.
    return _soft((1.0 - np.sqrt(q)) * min(rx, ry, rz))


def sample_phantom(rng: np.random.Generator, *, nodule: bool, z_range: tuple[float, float]) -> Phantom:
    """Draw one study's anatomy; with ``nodule``, a nodule inside a lung between ``z_range`` (mm).

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of every choice (a fixed number of draws whatever the outcome).
    nodule : bool
        Whether the study is positive.
    z_range : tuple of float
        z interval the primary series covers; lungs are centred in it and a nodule lies 6 mm inside it.

    Returns
    -------
    Phantom
    """
    lo, hi = z_range
    zc = (lo + hi) / 2.0 + rng.uniform(-15.0, 15.0)
    body = np.array([rng.uniform(102.0, 118.0), rng.uniform(72.0, 84.0), rng.uniform(-4.0, 4.0)])
    dx, ly = rng.uniform(50.0, 56.0), body[2] + rng.uniform(-4.0, 4.0)
    rx, ry, rz = rng.uniform(38.0, 44.0), rng.uniform(52.0, 60.0), rng.uniform(110.0, 135.0)
    lungs = np.array([[-dx, ly, zc, rx, ry, rz], [dx, ly, zc, rx * 0.95, ry, rz]])
    heart = np.array([rng.uniform(4.0, 15.0), ly - 22.0, zc - 60.0, 30.0, 26.0, 55.0])
    spine = np.array([0.0, body[2] + body[1] - 22.0, rng.uniform(10.0, 13.0)])

    side = rng.integers(0, 2, _N_VESSELS)
    u = rng.standard_normal((_N_VESSELS, 3))
    u *= (0.8 * rng.uniform(size=(_N_VESSELS, 1)) ** (1 / 3)) / np.linalg.norm(u, axis=1, keepdims=True)
    points = lungs[side, :3] + u * lungs[side, 3:]
    direction = rng.standard_normal((_N_VESSELS, 3)) * np.array([1.0, 1.0, 1.6])
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    vessels = np.column_stack(
        [points, direction, rng.uniform(0.8, 1.8, _N_VESSELS), rng.uniform(-350.0, -150.0, _N_VESSELS)]
    )

    # The nodule's candidates are drawn in every study so that the stream does not depend on the label.
    cand_side = rng.integers(0, 2, 64)
    cand = rng.standard_normal((64, 3))
    cand *= (0.7 * rng.uniform(size=(64, 1)) ** (1 / 3)) / np.linalg.norm(cand, axis=1, keepdims=True)
    cand = lungs[cand_side, :3] + cand * lungs[cand_side, 3:]
    radius = rng.uniform(6.0, 14.0)
    density = rng.uniform(0.0, 1.0)
    found = np.flatnonzero((cand[:, 2] > lo + 6.0) & (cand[:, 2] < hi - 6.0))
    centre = cand[found[0]] if found.size else np.array([lungs[0, 0], ly, (lo + hi) / 2.0])
    # Attenuation from part-solid (-550 HU) to solid (+30 HU); small faint ones are the hard cases.
    nodule_row = np.array([*centre, radius, -550.0 + 580.0 * density]) if nodule else None
    return Phantom(
        body=body,
        tissue_hu=float(rng.uniform(25.0, 50.0)),
        lung_hu=float(rng.uniform(-880.0, -830.0)),
        lungs=lungs,
        heart=heart,
        spine=spine,
        vessels=vessels,
        nodule=nodule_row,
    )


def hu_at(
    phantom: Phantom, x: NDArray[np.float32], y: NDArray[np.float32], z: NDArray[np.float32]
) -> NDArray[np.float32]:
    """Attenuation (HU) of ``phantom`` at patient coordinates ``(x, y, z)`` (float32 arrays of one shape)."""
    a, b, by = phantom.body.tolist()
    body = _soft((1.0 - np.sqrt((x / a) ** 2 + ((y - by) / b) ** 2)) * b)
    lung = np.maximum(_ellipsoid(x, y, z, phantom.lungs[0]), _ellipsoid(x, y, z, phantom.lungs[1]))
    lung = lung * (1.0 - _ellipsoid(x, y, z, phantom.heart)) * body
    sx, sy, sr = phantom.spine.tolist()
    spine = _soft(sr - np.sqrt((x - sx) ** 2 + (y - sy) ** 2)) * body

    tissue, lung_mean = phantom.tissue_hu, phantom.lung_hu
    hu = _AIR + body * (tissue - _AIR) + spine * (_BONE - tissue)
    # Vessels and nodule only matter inside the lungs: evaluate them there alone (a third of the voxels).
    inside = np.flatnonzero(lung.ravel() > 1e-4)
    xi, yi, zi, li = x.ravel()[inside], y.ravel()[inside], z.ravel()[inside], lung.ravel()[inside]
    # Dependent lung is denser: +40 HU from front to back.
    lung_hu = lung_mean + 40.0 * (yi - float(phantom.lungs[0, 1])) / float(phantom.lungs[0, 4])
    local = lung_hu - tissue
    vessel = np.zeros_like(xi)
    for px, py, pz, ux, uy, uz, radius, v_hu in phantom.vessels.tolist():
        dx, dy, dz = xi - px, yi - py, zi - pz
        along = dx * ux + dy * uy + dz * uz
        dist2 = np.maximum(dx * dx + dy * dy + dz * dz - along * along, 0.0)
        vessel = np.maximum(vessel, _soft(radius - np.sqrt(dist2)) * (v_hu - lung_mean))
    local = local + vessel
    if phantom.nodule is not None:
        nx, ny, nz, radius, n_hu = phantom.nodule.tolist()
        dist = np.sqrt((xi - nx) ** 2 + (yi - ny) ** 2 + (zi - nz) ** 2)
        local = local + _soft(radius - dist) * (n_hu - lung_hu)
    flat = hu.ravel()
    flat[inside] += li * local
    out: NDArray[np.float32] = flat.reshape(x.shape).astype(np.float32, copy=False)
    return out


def axial_geometry(
    scanner: CtScanner,
    *,
    n_slices: int,
    z_start: float,
    spacing: float,
    pixel_spacing: float,
    offset: tuple[float, float],
) -> SeriesGeometry:
    """Geometry of an axial series: ``n_slices`` slices ``spacing`` mm apart along the normal.

    The table moves along z; with a gantry tilt of angle a the slice planes are tilted by a about the x
    axis (column direction ``(0, cos a, -sin a)``), so the table step is ``spacing / cos a``.
    """
    tilt = math.radians(scanner.tilt_deg)
    row = np.array([1.0, 0.0, 0.0])
    col = np.array([0.0, math.cos(tilt), -math.sin(tilt)])
    half_c, half_r = pixel_spacing * (COLUMNS - 1) / 2.0, pixel_spacing * (ROWS - 1) / 2.0
    # The first slice's centre pixel sits at (offset, z_start); IPP is the centre of its first pixel.
    first = np.array([offset[0], offset[1], z_start]) - half_c * row - half_r * col
    step = spacing / math.cos(tilt)
    positions = first[None, :] + np.arange(n_slices)[:, None] * np.array([0.0, 0.0, step])
    return SeriesGeometry(
        orientation=tuple(float(v) for v in np.round(np.concatenate([row, col]), 6)),
        positions=np.round(positions, 4),
        pixel_spacing=pixel_spacing,
        thickness=spacing,
    )


def localizer_geometry(*, lateral: bool, z_centre: float) -> SeriesGeometry:
    """A coronal (or, with ``lateral``, sagittal) plane through the chest, 6 mm pixels, rows head to feet."""
    spacing = 6.0
    half = spacing * (ROWS - 1) / 2.0
    if lateral:
        orientation = (0.0, 1.0, 0.0, 0.0, 0.0, -1.0)
        position = np.array([[0.0, -half, z_centre + half]])
    else:
        orientation = (1.0, 0.0, 0.0, 0.0, 0.0, -1.0)
        position = np.array([[-half, 0.0, z_centre + half]])
    return SeriesGeometry(orientation, np.round(position, 4), spacing, 0.6)


@lru_cache(maxsize=16)
def _noise_gain(sigma: float) -> float:
    """Standard deviation of unit white noise after a 2-D Gaussian filter of ``sigma`` pixels."""
    delta = np.zeros(41)
    delta[20] = 1.0
    w = ndimage.gaussian_filter1d(delta, sigma, mode="constant")
    return float(np.sum(w**2))  # separable: (sum w^2)^(1/2) per axis, squared for two axes


def acquire(
    hu: NDArray[np.float32],
    recon: Reconstruction,
    scanner: CtScanner,
    rng: np.random.Generator,
    *,
    dose: float = 1.0,
) -> NDArray[np.uint16]:
    """Stored values of a reconstruction of the true attenuation ``hu`` (n_slices, ROWS, COLUMNS).

    The kernel blurs in-plane (plus a fixed slice profile along z), the calibration adds the scanner's
    HU offset, and the noise (white, then lightly correlated in-plane) has standard deviation
    ``recon.noise_hu / sqrt(dose)``. Stored = round(HU + 1024), clipped to 12 bits.
    """
    v = ndimage.gaussian_filter(hu, (0.35, recon.blur_px, recon.blur_px), mode="nearest")
    noise = ndimage.gaussian_filter(rng.standard_normal(hu.shape, dtype=np.float32), (0.0, 0.6, 0.6))
    v = v + scanner.hu_offset + noise * np.float32(recon.noise_hu / math.sqrt(dose) / _noise_gain(0.6))
    stored: NDArray[np.uint16] = np.clip(np.rint(v - INTERCEPT), 0, MAX_STORED).astype(np.uint16)
    return stored
