"""The fictional sites and CT scanners of the CT demo, and the series each scanner reconstructs.

A :class:`CtScanner` holds header values (manufacturer, model, series descriptions, geometry conventions)
and acquisition physics (in-plane blur of the reconstruction kernel, noise, HU calibration offset). The
model is trained on ``ct-scanner-1`` only; the other two differ in noise, kernel blur and HU offset, which
moves their volumes away from what the model learned while the intensity window stays fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._scanners import Site

__all__ = [
    "CLASS_NAMES",
    "CT_SOP_CLASS_UID",
    "REFERENCE_SCANNER",
    "SCANNERS",
    "SITES",
    "CtScanner",
    "Reconstruction",
    "Site",
    "scanner_by_key",
]

#: Class names of the CT demo task, in logit order.
CLASS_NAMES: tuple[str, ...] = ("no_nodule", "nodule")

#: CT Image Storage.
CT_SOP_CLASS_UID = "1.2.840.10008.5.1.4.1.1.2"


@dataclass(frozen=True)
class Reconstruction:
    """One reconstruction of the axial scan (a series): its name and kernel physics.

    Attributes
    ----------
    description : str
        SeriesDescription, e.g. ``"Thorax 5.0 B31f"``.
    kernel : str
        ConvolutionKernel (0018,1210).
    blur_px : float
        In-plane Gaussian sigma of the kernel, in pixels (larger: smoother).
    noise_hu : float
        Standard deviation of the image noise, in HU, at the reference dose.
    """

    description: str
    kernel: str
    blur_px: float
    noise_hu: float


@dataclass(frozen=True)
class CtScanner:
    """One fictional CT scanner: header values, geometry conventions and physics.

    Attributes
    ----------
    key : str
        Stable short name (``"ct-scanner-1"``) used in the manifest and the model card.
    site : str
        Key of its site in :data:`SITES` (a :class:`sitecal.demo.Site`, the type the 2-D demo uses too).
    manufacturer, model_name, station_name : str
        Manufacturer, ManufacturerModelName and StationName.
    localizer_description : str
        SeriesDescription of the localizer (scout) series.
    primary, secondary : Reconstruction
        The soft-tissue reconstruction the model reads, and the extra (sharp-kernel) one some studies have.
    hu_offset : float
        Calibration offset added to every HU value (a water phantom would read this instead of 0).
    tilt_deg : float
        Gantry tilt: ImageOrientationPatient's column direction is rotated by this angle about the
        patient's x axis (0 for an identity orientation).
    reversed_instance_numbers : bool
        Whether InstanceNumber runs against the slice order (descending along the slice normal).
    share : float
        Fraction of the site's studies acquired on this scanner.
    """

    key: str
    site: str
    manufacturer: str
    model_name: str
    station_name: str
    localizer_description: str
    primary: Reconstruction
    secondary: Reconstruction
    hu_offset: float
    tilt_deg: float
    reversed_instance_numbers: bool
    share: float


SITES: tuple[Site, ...] = (
    Site("site-1", "Northgate General Hospital", "NGH", 0.6),
    Site("site-2", "Riverside Community Hospital", "RCH", 0.4),
)

SCANNERS: tuple[CtScanner, ...] = (
    # The reference: the scanner the bundled model was trained on. Moderate kernel, low noise, no offset.
    CtScanner(
        key="ct-scanner-1",
        site="site-1",
        manufacturer="SIEMENS",
        model_name="SOMATOM Demo Edge",
        station_name="NGH-CT1",
        localizer_description="Topogram 0.6 T20s",
        primary=Reconstruction("Thorax 5.0 B31f", "B31f", blur_px=0.6, noise_hu=12.0),
        secondary=Reconstruction("Thorax 5.0 B70f", "B70f", blur_px=0.0, noise_hu=45.0),
        hu_offset=0.0,
        tilt_deg=0.0,
        reversed_instance_numbers=False,
        share=0.5,
    ),
    # Same site, older low-dose unit: noisier, with a smoother STANDARD kernel than the reference's (it
    # softens small faint nodules, which the model then misses with confidence), an HU drift upwards;
    # InstanceNumber runs head to feet. Noise alone lowers the model's confidence along with its
    # accuracy (at 100 HU: accuracy 0.68); the kernel blur is what makes it over-confident.
    CtScanner(
        key="ct-scanner-2",
        site="site-1",
        manufacturer="GE MEDICAL SYSTEMS",
        model_name="LightSpeed Demo 16",
        station_name="NGH-CT2",
        localizer_description="Scout",
        primary=Reconstruction("CHEST 5.0 STANDARD", "STANDARD", blur_px=1.4, noise_hu=45.0),
        secondary=Reconstruction("CHEST 5.0 LUNG", "LUNG", blur_px=0.0, noise_hu=150.0),
        hu_offset=35.0,
        tilt_deg=0.0,
        reversed_instance_numbers=True,
        share=0.5,
    ),
    # Other site: a smooth kernel that blurs small nodules, a downward HU offset, and a tilted gantry.
    CtScanner(
        key="ct-scanner-3",
        site="site-2",
        manufacturer="CANON_MEC",
        model_name="Aquilion Demo",
        station_name="RCH-CT1",
        localizer_description="Scanogram",
        primary=Reconstruction("Chest 5.0 FC13", "FC13", blur_px=1.3, noise_hu=20.0),
        secondary=Reconstruction("Chest 5.0 FC51", "FC51", blur_px=0.2, noise_hu=60.0),
        hu_offset=-40.0,
        tilt_deg=12.0,
        reversed_instance_numbers=False,
        share=1.0,
    ),
)

#: Key of the scanner the bundled model was trained on.
REFERENCE_SCANNER = "ct-scanner-1"


def scanner_by_key(key: str) -> CtScanner:
    """Return the CT scanner profile named ``key``.

    Raises
    ------
    KeyError
        If no scanner has that key; the message lists the known keys.
    """
    for scanner in SCANNERS:
        if scanner.key == key:
            return scanner
    known = ", ".join(repr(s.key) for s in SCANNERS)
    raise KeyError(f"No CT demo scanner is called {key!r}. Known scanners: {known}.")
