"""The fictional sites and scanners of the demo cohort and how each one acquires an image.

Each :class:`ScannerProfile` holds two kinds of fields: what goes into the DICOM header (manufacturer,
model, photometric interpretation, bit depth, rescale) and the acquisition physics the synthesis applies
(blur, contrast curve, noise, heel-effect gradient, edge enhancement). The physics is what moves images
away from the reference scanner; everything linear is undone by the model's per-image intensity
normalisation, so the shift lives in the non-linear and noise terms.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CLASS_NAMES",
    "CR_SOP_CLASS_UID",
    "DX_SOP_CLASS_UID",
    "REFERENCE_SCANNER",
    "SCANNERS",
    "SITES",
    "ScannerProfile",
    "Site",
    "scanner_by_key",
]

#: Class names of the demo task, in logit order.
CLASS_NAMES: tuple[str, ...] = ("normal", "nodule", "effusion")

#: Digital X-Ray Image Storage - For Presentation.
DX_SOP_CLASS_UID = "1.2.840.10008.5.1.4.1.1.1.1"
#: Computed Radiography Image Storage.
CR_SOP_CLASS_UID = "1.2.840.10008.5.1.4.1.1.1"


@dataclass(frozen=True)
class Site:
    """One fictional institution.

    Attributes
    ----------
    key : str
        Folder name under ``dicom/`` (``"site-1"``); carries no identifier.
    institution_name : str
        Written to InstitutionName (0008,0080).
    id_prefix : str
        Prefix of this site's synthetic PatientIDs and AccessionNumbers.
    share : float
        Fraction of the cohort's patients seen at this site.
    """

    key: str
    institution_name: str
    id_prefix: str
    share: float


@dataclass(frozen=True)
class ScannerProfile:
    """One fictional scanner: header values and acquisition physics.

    Attributes
    ----------
    key : str
        Short stable name used in the manifest and training metadata (``"scanner-1"``).
    site : str
        Key of the :class:`Site` the scanner stands in.
    manufacturer, model_name, station_name : str
        Manufacturer (0008,0070), ManufacturerModelName (0008,1090), StationName (0008,1010).
    modality : str
        ``"DX"`` or ``"CR"``; selects the SOP class.
    photometric : str
        ``"MONOCHROME1"`` (stored values inverted) or ``"MONOCHROME2"``.
    bits_stored : int
        BitsStored (12 or 16); BitsAllocated is always 16, HighBit is ``bits_stored - 1``.
    slope, intercept : float
        RescaleSlope and RescaleIntercept: presentation value = stored * slope + intercept
        (after the MONOCHROME1 inversion).
    gain, dark : float
        Digital value = dark + gain * signal, before quantisation; the signal lies roughly in [0, 1].
    blur_sigma : float
        Gaussian point-spread sigma in pixels of the 128 x 128 image.
    gamma : float
        Power of the detector/processing contrast curve applied to the blurred signal.
    noise_sd : float
        Standard deviation of the additive quantum-like noise, in signal units, at mean signal.
    heel : float
        Slope of a linear intensity gradient across the rows (anode heel effect), in signal units.
    edge_gain : float
        Strength of the vendor's unsharp-mask edge enhancement (0 for none).
    share : float
        Fraction of the site's studies acquired on this scanner.
    """

    key: str
    site: str
    manufacturer: str
    model_name: str
    station_name: str
    modality: str
    photometric: str
    bits_stored: int
    slope: float
    intercept: float
    gain: float
    dark: float
    blur_sigma: float
    gamma: float
    noise_sd: float
    heel: float
    edge_gain: float
    share: float

    @property
    def sop_class_uid(self) -> str:
        """SOP Class UID of this scanner's images (DX For Presentation or CR)."""
        return CR_SOP_CLASS_UID if self.modality == "CR" else DX_SOP_CLASS_UID

    @property
    def max_stored(self) -> int:
        """Largest stored value, ``2**bits_stored - 1``."""
        return int(2**self.bits_stored - 1)


SITES: tuple[Site, ...] = (
    Site("site-1", "Northgate General Hospital", "NGH", 0.40),
    Site("site-2", "Riverside Community Hospital", "RCH", 0.30),
    Site("site-3", "St Aldric University Medical Centre", "SAU", 0.30),
)

SCANNERS: tuple[ScannerProfile, ...] = (
    # The reference: the scanner the bundled model was trained on. Sharp, low noise, linear response.
    ScannerProfile(
        key="scanner-1",
        site="site-1",
        manufacturer="SIEMENS",
        model_name="Ysio Demo",
        station_name="NGH-DR1",
        modality="DX",
        photometric="MONOCHROME2",
        bits_stored=12,
        slope=1.0,
        intercept=0.0,
        gain=3200.0,
        dark=300.0,
        blur_sigma=0.6,
        gamma=1.0,
        noise_sd=0.010,
        heel=0.0,
        edge_gain=0.0,
        share=0.55,
    ),
    # Same site, older detector: softer, noisier, compressed highlights, 16-bit with a rescale.
    ScannerProfile(
        key="scanner-2",
        site="site-1",
        manufacturer="GE MEDICAL SYSTEMS",
        model_name="Discovery XR Demo",
        station_name="NGH-DR2",
        modality="DX",
        photometric="MONOCHROME2",
        bits_stored=16,
        slope=0.5,
        intercept=-1024.0,
        gain=40000.0,
        dark=6000.0,
        blur_sigma=1.1,
        gamma=0.85,
        noise_sd=0.024,
        heel=0.05,
        edge_gain=0.0,
        share=0.45,
    ),
    # Strong vendor edge enhancement and a steep contrast curve.
    ScannerProfile(
        key="scanner-3",
        site="site-2",
        manufacturer="Philips",
        model_name="DigitalDiagnost Demo",
        station_name="RCH-DR1",
        modality="DX",
        photometric="MONOCHROME2",
        bits_stored=12,
        slope=1.0,
        intercept=0.0,
        gain=3000.0,
        dark=500.0,
        blur_sigma=0.8,
        gamma=1.35,
        noise_sd=0.016,
        heel=0.0,
        edge_gain=0.3,
        share=0.60,
    ),
    # Computed radiography plate reader: MONOCHROME1, blurred, noisy.
    ScannerProfile(
        key="scanner-4",
        site="site-2",
        manufacturer="FUJIFILM Corporation",
        model_name="FCR Demo CR",
        station_name="RCH-CR1",
        modality="CR",
        photometric="MONOCHROME1",
        bits_stored=12,
        slope=1.0,
        intercept=0.0,
        gain=3300.0,
        dark=200.0,
        blur_sigma=1.1,
        gamma=0.9,
        noise_sd=0.028,
        heel=-0.04,
        edge_gain=0.0,
        share=0.40,
    ),
    # 16-bit, fractional rescale, heel effect and moderate noise.
    ScannerProfile(
        key="scanner-5",
        site="site-3",
        manufacturer="Carestream Health",
        model_name="DRX Demo",
        station_name="SAU-DR1",
        modality="DX",
        photometric="MONOCHROME2",
        bits_stored=16,
        slope=0.25,
        intercept=100.0,
        gain=52000.0,
        dark=4000.0,
        blur_sigma=1.0,
        gamma=1.25,
        noise_sd=0.020,
        heel=0.08,
        edge_gain=0.12,
        share=1.0,
    ),
)

#: Key of the scanner the bundled model was trained on.
REFERENCE_SCANNER = "scanner-1"


def scanner_by_key(key: str) -> ScannerProfile:
    """Return the scanner profile named ``key``.

    Parameters
    ----------
    key : str
        A :attr:`ScannerProfile.key`, such as ``"scanner-1"``.

    Returns
    -------
    ScannerProfile
        The matching profile.

    Raises
    ------
    KeyError
        If no scanner has that key; the message lists the known keys.
    """
    for scanner in SCANNERS:
        if scanner.key == key:
            return scanner
    known = ", ".join(repr(s.key) for s in SCANNERS)
    raise KeyError(f"No demo scanner is called {key!r}. Known scanners: {known}.")
