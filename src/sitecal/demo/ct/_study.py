"""One simulated CT study: the series a scanner writes for it, as geometries and stored pixel values.

:func:`simulate_study` is shared by the generator (which adds headers and writes files) and by training
(which uses the primary series only), so the bundled model learns from exactly what the files hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from ._scanners import CtScanner
from ._synthesis import (
    INTERCEPT,
    SLICE_SPACING,
    SeriesGeometry,
    acquire,
    axial_geometry,
    hu_at,
    localizer_geometry,
)
from ._synthesis import sample_phantom as _sample_phantom

__all__ = ["MIN_SLICES", "SeriesImage", "SimulatedStudy", "StudyKind", "simulate_study", "synthesize_volumes"]

#: Fewest slices a qualifying series has (the protocol's ``data.series.min_slices``).
MIN_SLICES = 12
#: Share of the studies with a nodule.
PREVALENCE = 0.4


class StudyKind(StrEnum):
    """How a study's series are laid out, i.e. what the selection rules must do with it.

    - ``single``: one qualifying axial series.
    - ``fewer``: a second qualifying series (sharp kernel) with fewer slices: most slices wins.
    - ``tie_number``: a second one with as many slices and a higher SeriesNumber: lowest number wins.
    - ``tie_uid``: a second one with as many slices and the same SeriesNumber: lowest UID wins.
    - ``too_short``: the only axial series has fewer than :data:`MIN_SLICES` slices: no series qualifies.
    """

    SINGLE = "single"
    FEWER = "fewer"
    TIE_NUMBER = "tie_number"
    TIE_UID = "tie_uid"
    TOO_SHORT = "too_short"


@dataclass(frozen=True)
class SeriesImage:
    """A series as written: geometry (slices in ascending normal projection) and stored values."""

    geometry: SeriesGeometry
    stored: NDArray[np.uint16]  # (n_slices, ROWS, COLUMNS)


@dataclass(frozen=True)
class SimulatedStudy:
    """All series of one study.

    Attributes
    ----------
    primary : SeriesImage
        The soft-kernel axial series (too short in ``too_short`` studies).
    secondary : SeriesImage or None
        The sharp-kernel axial series, in ``fewer``/``tie_*`` studies.
    localizers : tuple of SeriesImage
        One or two single-slice localizer images (frontal, lateral).
    """

    primary: SeriesImage
    secondary: SeriesImage | None
    localizers: tuple[SeriesImage, ...]


def simulate_study(
    rng: np.random.Generator,
    scanner: CtScanner,
    *,
    nodule: bool,
    kind: StudyKind = StudyKind.SINGLE,
    with_localizers: bool = True,
) -> SimulatedStudy:
    """Simulate one study on ``scanner``.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of every choice; the primary series' pixels depend on the draws up to them only, so
        ``kind`` does not change them (except ``too_short``, which also shortens the series).
    scanner : CtScanner
        Geometry conventions and physics.
    nodule : bool
        Whether a nodule is planted (inside the primary series' coverage).
    kind : StudyKind, default single
        Which extra series are made.
    with_localizers : bool, default True
        False skips the localizer images (training needs only the primary series; the draws before it
        are the same either way).

    Returns
    -------
    SimulatedStudy
    """
    n = int(rng.integers(16, 29))
    n_short = int(rng.integers(6, MIN_SLICES))
    n_fewer = n - int(rng.integers(3, 9))
    n_localizers = int(rng.integers(1, 3))
    pixel_spacing = round(float(rng.uniform(5.0, 5.6)), 3)
    offset = (round(float(rng.uniform(-6.0, 6.0)), 2), round(float(rng.uniform(-6.0, 6.0)), 2))
    z_start = round(float(rng.uniform(-260.0, -200.0)), 2)
    dose = float(rng.uniform(0.8, 1.25))
    if kind is StudyKind.TOO_SHORT:
        n = n_short
    extent = (n - 1) * SLICE_SPACING
    phantom = _sample_phantom(rng, nodule=nodule, z_range=(z_start, z_start + extent))

    def axial(n_slices: int, start: float) -> SeriesGeometry:
        return axial_geometry(
            scanner,
            n_slices=n_slices,
            z_start=start,
            spacing=SLICE_SPACING,
            pixel_spacing=pixel_spacing,
            offset=offset,
        )

    geometry = axial(n, z_start)
    primary = SeriesImage(
        geometry, acquire(hu_at(phantom, *geometry.points()), scanner.primary, scanner, rng, dose=dose)
    )
    secondary = None
    if kind in (StudyKind.FEWER, StudyKind.TIE_NUMBER, StudyKind.TIE_UID):
        # A lung reconstruction: the same scan, a sharp kernel; FEWER covers a centred sub-range.
        n2 = n_fewer if kind is StudyKind.FEWER else n
        g2 = axial(n2, z_start + (n - n2) // 2 * SLICE_SPACING)
        secondary = SeriesImage(
            g2, acquire(hu_at(phantom, *g2.points()), scanner.secondary, scanner, rng, dose=dose)
        )
    localizers = []
    for lateral in (False, True)[: n_localizers if with_localizers else 0]:
        g = localizer_geometry(lateral=lateral, z_centre=z_start + extent / 2.0)
        localizers.append(SeriesImage(g, acquire(hu_at(phantom, *g.points()), scanner.primary, scanner, rng)))
    return SimulatedStudy(primary, secondary, tuple(localizers))


def synthesize_volumes(
    n: int, scanner: CtScanner, rng: np.random.Generator
) -> tuple[list[NDArray[np.float32]], NDArray[np.int64]]:
    """HU volumes (as the pipeline's reader returns them) and labels of ``n`` single-series studies.

    The in-memory twin of :func:`sitecal.demo.ct.generate_ct_demo`: the primary series of
    :func:`simulate_study`, without localizers, headers or files. The CT demo model is trained on these
    (``examples/demo/train.py --ct``).

    Parameters
    ----------
    n : int
        Number of studies.
    scanner : CtScanner
        The scanner that acquires them.
    rng : numpy.random.Generator
        Source of the labels and of each study's own stream.

    Returns
    -------
    volumes : list of ndarray of float32, each (n_slices, 48, 48)
        HU = stored + RescaleIntercept, slices in ascending projection on the normal.
    labels : ndarray of int64, shape (n,)
        1 for a nodule, else 0.
    """
    labels = (rng.uniform(size=n) < PREVALENCE).astype(np.int64)
    seeds = rng.integers(0, 2**63, n)
    volumes = []
    for label, s in zip(labels, seeds, strict=True):
        study = simulate_study(
            np.random.default_rng(int(s)), scanner, nodule=bool(label), with_localizers=False
        )
        volumes.append(study.primary.stored.astype(np.float32) + np.float32(INTERCEPT))
    return volumes, labels
