"""Vectorised synthesis of chest-radiograph-like images: scene, lesions, then scanner acquisition.

An image is made in two steps, both over a whole batch at once:

1. :func:`render_scenes` draws the scanner-independent "signal" (roughly in [0, 1], bright = dense):
   body, two lung fields, heart, mediastinum, spine, ribs, lung markings, small vessel dots, and the
   lesion of the study's class (a faint round nodule in a lung field, or a pleural effusion: a bright
   band with a meniscus at the base of a lung field). Lesion conspicuity is drawn per study, so some
   lesions are all but invisible and even the reference scanner cannot be read perfectly.
2. :func:`acquire` turns the signal into the stored pixel values of one scanner (blur, heel effect,
   contrast curve, edge enhancement, noise, gain and offset, quantisation, MONOCHROME1 inversion).

:func:`synthesize_stored` chains the two for studies of one scanner, in memory (what the demo model is
trained on). :func:`stored_to_presentation` is the inverse bookkeeping the pipeline's reader performs; it
is the arithmetic of :func:`sitecal.demo.presentation_values` driven by a profile instead of a header.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import ndimage
from scipy.special import expit

from ._dicom import apply_presentation
from ._scanners import ScannerProfile

__all__ = [
    "IMAGE_SIZE",
    "Anatomy",
    "acquire",
    "render_scenes",
    "sample_anatomy",
    "sample_labels",
    "stored_to_presentation",
    "synthesize_stored",
]

#: Rows and Columns of every synthetic image.
IMAGE_SIZE = 128

#: Class prevalence of normal, nodule, effusion.
PREVALENCE: tuple[float, float, float] = (0.5, 0.3, 0.2)

#: Per-exposure variation shared by all scanners (see :func:`acquire`).
_BLUR_JITTER = 0.7
_HEEL_JITTER = 0.03
_DOSE_NOISE_FACTOR = (0.5, 1.6)

_AXIS = np.linspace(-1.0, 1.0, IMAGE_SIZE, dtype=np.float32)


@dataclass(frozen=True)
class Anatomy:
    """Patient-level anatomy, one row per patient (arrays of shape (P,)).

    Coordinates are in the unit square [-1, 1]^2 of the image, x to the image right, y downwards.
    """

    lung_dx: NDArray[np.float32]
    lung_cy: NDArray[np.float32]
    lung_rx: NDArray[np.float32]
    lung_ry: NDArray[np.float32]
    heart_r: NDArray[np.float32]
    body_rx: NDArray[np.float32]
    tissue: NDArray[np.float32]
    rib_freq: NDArray[np.float32]
    rib_phase: NDArray[np.float32]

    def take(self, index: NDArray[np.intp]) -> Anatomy:
        """Rows ``index`` (one per study), so studies of one patient share their anatomy."""
        return Anatomy(**{name: getattr(self, name)[index] for name in self.__dataclass_fields__})


def _uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> NDArray[np.float32]:
    return rng.uniform(lo, hi, n).astype(np.float32)


def sample_anatomy(rng: np.random.Generator, sex: NDArray[np.str_]) -> Anatomy:
    """Draw the anatomy of ``len(sex)`` patients.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness.
    sex : ndarray of str, shape (P,)
        ``"M"`` or ``"F"``; male lungs are drawn slightly larger.

    Returns
    -------
    Anatomy
        One row per patient.
    """
    n = len(sex)
    size = np.where(sex == "M", 1.03, 0.97).astype(np.float32)
    return Anatomy(
        lung_dx=_uniform(rng, 0.36, 0.42, n) * size,
        lung_cy=_uniform(rng, -0.10, 0.0, n),
        lung_rx=_uniform(rng, 0.23, 0.28, n) * size,
        lung_ry=_uniform(rng, 0.50, 0.60, n) * size,
        heart_r=_uniform(rng, 0.27, 0.34, n),
        body_rx=_uniform(rng, 0.86, 0.96, n) * size,
        tissue=_uniform(rng, 0.52, 0.62, n),
        rib_freq=_uniform(rng, 4.5, 5.5, n),
        rib_phase=_uniform(rng, 0.0, 2.0 * np.pi, n),
    )


def sample_labels(rng: np.random.Generator, n: int) -> NDArray[np.int64]:
    """Draw ``n`` class indices with prevalence 0.5 / 0.3 / 0.2 (normal / nodule / effusion)."""
    return rng.choice(len(PREVALENCE), size=n, p=PREVALENCE).astype(np.int64)


def _soft_ellipse(
    x: NDArray[np.float32],
    y: NDArray[np.float32],
    cx: NDArray[np.float32] | float,
    cy: NDArray[np.float32] | float,
    rx: NDArray[np.float32] | float,
    ry: NDArray[np.float32] | float,
    edge: float = 0.04,
) -> NDArray[np.float32]:
    # x is (B, 1, W) and y is (B, H, 1): the squared radius is a sum of two separable terms. The edge
    # is a linear ramp in r**2 (about ``edge`` wide in r): anatomy has no hard borders, and a ramp
    # costs a fraction of a logistic.
    r2 = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2
    out: NDArray[np.float32] = np.clip((1.0 - r2) * np.float32(0.25 / edge) + np.float32(0.5), 0.0, 1.0)
    return out


def _blobs(
    x: NDArray[np.float32],
    y: NDArray[np.float32],
    cx: NDArray[np.float32],
    cy: NDArray[np.float32],
    sigma: NDArray[np.floating],
    amplitude: NDArray[np.floating],
) -> NDArray[np.float32]:
    """Sum of K Gaussian blobs per image; centres, sigmas and amplitudes are (B, K) arrays.

    Each blob is separable, an outer product of a column and a row profile, so the sum over blobs is
    one batched matrix product (B, H, K) @ (B, K, W) instead of K full-size exponentials.
    """
    two_s2 = (2.0 * sigma**2)[:, None, :]
    cols = np.exp(-((y - cy[:, None, :]) ** 2) / two_s2) * amplitude[:, None, :]  # (B, H, K)
    rows = np.exp(-((x[:, 0, :, None] - cx[:, None, :]) ** 2) / two_s2)  # (B, W, K)
    out: NDArray[np.float32] = np.matmul(cols, rows.transpose(0, 2, 1)).astype(np.float32)
    return out


def _col(a: ArrayLike) -> NDArray[np.float32]:
    """Reshape a (B,) array to (B, 1, 1) float32, to broadcast against images."""
    return np.asarray(a, dtype=np.float32)[:, None, None]


def _upsample_matrix(n_out: int, n_in: int) -> NDArray[np.float32]:
    """Linear-interpolation matrix (n_out, n_in), pixel centres aligned."""
    pos = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    lo = np.clip(np.floor(pos).astype(int), 0, n_in - 1)
    hi = np.clip(lo + 1, 0, n_in - 1)
    w = np.clip(pos - lo, 0.0, 1.0)
    m = np.zeros((n_out, n_in), dtype=np.float32)
    m[np.arange(n_out), lo] += 1.0 - w
    m[np.arange(n_out), hi] += w
    return m


_MARKINGS_RES = 32
_UPSAMPLE = _upsample_matrix(IMAGE_SIZE, _MARKINGS_RES)


def render_scenes(
    rng: np.random.Generator, labels: NDArray[np.int64], anatomy: Anatomy
) -> NDArray[np.float32]:
    """Render the scanner-independent signal of a batch of studies.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the per-study randomness (pose, markings, lesion size, place and conspicuity).
    labels : ndarray of int, shape (B,)
        Class index per study: 0 normal, 1 nodule, 2 effusion.
    anatomy : Anatomy
        One row per study (use :meth:`Anatomy.take` to repeat a patient's anatomy).

    Returns
    -------
    ndarray of float32, shape (B, 128, 128)
        Signal, about 0.04 in air and up to about 1 in dense regions.
    """
    b = len(labels)
    # Per-study pose: patients never stand in exactly the same place. Coordinates stay separable:
    # x is (B, 1, W), y is (B, H, 1), so most terms cost one broadcast instead of a full-size exp.
    shift_x = _col(rng.uniform(-0.04, 0.04, b))
    shift_y = _col(rng.uniform(-0.04, 0.04, b))
    zoom = _col(rng.uniform(0.96, 1.04, b))
    x = (_AXIS[None, None, :] - shift_x) / zoom
    y = (_AXIS[None, :, None] - shift_y) / zoom

    dx, cy = _col(anatomy.lung_dx), _col(anatomy.lung_cy)
    rx, ry = _col(anatomy.lung_rx), _col(anatomy.lung_ry)
    tissue = _col(anatomy.tissue)

    body = _soft_ellipse(x, y, 0.0, 0.08, _col(anatomy.body_rx), 1.15)
    lung_l = _soft_ellipse(x, y, -dx, cy, rx, ry)
    lung_r = _soft_ellipse(x, y, dx, cy, rx, ry)
    lung = np.maximum(lung_l, lung_r)
    heart_r = _col(anatomy.heart_r)
    heart = _soft_ellipse(x, y, 0.06, cy + 0.36, heart_r, heart_r * 0.8, edge=0.15)
    spine = expit((0.06 - np.abs(x)) / np.float32(0.015))  # (B, 1, W): cheap

    ribs = _ribs(x, y, _col(anatomy.rib_freq), _col(anatomy.rib_phase))

    # Lung markings: smooth random texture made at 32 x 32 and enlarged by a fixed interpolation matrix.
    coarse = ndimage.gaussian_filter(
        rng.standard_normal((b, _MARKINGS_RES, _MARKINGS_RES)).astype(np.float32), (0, 1.0, 1.0)
    )
    markings = _UPSAMPLE @ coarse @ _UPSAMPLE.T
    # Vessels seen end-on: a few small bright dots in every lung, the nodules' look-alikes.
    vx, vy = _lung_points(rng, (b, 3), dx, cy, rx, ry, reach=0.85)
    vessels = _blobs(x, y, vx, vy, rng.uniform(0.012, 0.025, (b, 3)), rng.uniform(0.01, 0.05, (b, 3)))

    signal = 0.04 + body * (tissue - 0.04)
    signal = signal - lung * 0.34 + lung * heart * 0.15 + spine * body * 0.10 * (1.0 - 0.5 * lung)
    signal = signal + lung * (0.045 * ribs + 0.02 * markings + vessels)

    # Nodule: a round bright blob inside a lung field; amplitude is its conspicuity.
    nodule = labels == 1
    nx, ny = _lung_points(rng, (b, 1), dx, cy, rx, ry, reach=0.75)
    radius = rng.uniform(0.05, 0.10, (b, 1))
    conspicuity = rng.uniform(0.0, 1.0, (b, 1))
    amplitude = np.where(nodule[:, None], 0.01 + 0.18 * conspicuity, 0.0)
    signal = signal + lung * _blobs(x, y, nx, ny, radius, amplitude)

    # Effusion: fluid at the base of one or both lung fields, its upper border a meniscus that rises
    # laterally. Height and opacity vary; the smallest ones only blunt the costophrenic angle.
    effusion = labels == 2
    side = rng.integers(0, 3, b)  # 0 left, 1 right, 2 both
    height = _col(rng.uniform(0.0, 1.0, b) ** 1.2 * 0.5 * anatomy.lung_ry + 0.03)
    opacity = _col(np.where(effusion, rng.uniform(0.15, 0.9, b), 0.0))
    for lung_i, sign, present in ((lung_l, -1.0, side != 1), (lung_r, 1.0, side != 0)):
        lateral = np.clip((x - sign * dx) * sign / rx, 0.0, 1.0)
        level = cy + ry - height * (1.0 + 0.8 * lateral**2)
        fluid = expit((y - level) / np.float32(0.02))
        signal = signal + (_col(present) * opacity * 0.30) * lung_i * fluid

    clipped: NDArray[np.float32] = np.clip(signal, 0.0, 1.2).astype(np.float32)
    return clipped


def _ribs(
    x: NDArray[np.float32],
    y: NDArray[np.float32],
    rib_freq: NDArray[np.float32],
    rib_phase: NDArray[np.float32],
) -> NDArray[np.float32]:
    """Rib shadows: thin curved bands in [0, 1], shape (B, H, W).

    ``x`` is (B, 1, W), ``y`` (B, H, 1) and ``rib_freq``, ``rib_phase`` (B, 1, 1) (cycles per unit and
    radians). The band is cos(a + c) with ``a`` a function of the row and ``c`` of the column, so it is
    computed as the rank-2 product cos(a) cos(c) - sin(a) sin(c) instead of a full-size cosine.
    """
    freq = rib_freq * np.float32(2.0 * np.pi)
    a = freq * y + rib_phase
    c = freq * np.float32(0.35) * x**2
    ribs = np.float32(0.5) + np.float32(0.5) * (np.cos(a) * np.cos(c) - np.sin(a) * np.sin(c))
    ribs2 = ribs * ribs
    sharpened: NDArray[np.float32] = ribs2 * ribs2 * ribs2  # sharpen to thin bands; cheaper than ribs**6
    return sharpened


def _lung_points(
    rng: np.random.Generator,
    shape: tuple[int, int],
    dx: NDArray[np.float32],
    cy: NDArray[np.float32],
    rx: NDArray[np.float32],
    ry: NDArray[np.float32],
    *,
    reach: float,
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Random points inside a lung field, ``shape`` = (B, K) of them, as (B, K) x and y arrays."""
    side = np.where(rng.uniform(size=shape) < 0.5, -1.0, 1.0)
    r = reach * np.sqrt(rng.uniform(size=shape))
    theta = rng.uniform(0.0, 2.0 * np.pi, shape)
    cx = side * dx[:, 0, 0, None] + r * np.cos(theta) * rx[:, 0, 0, None]
    cyy = cy[:, 0, 0, None] + r * np.sin(theta) * ry[:, 0, 0, None]
    return cx.astype(np.float32), cyy.astype(np.float32)


def acquire(
    signal: NDArray[np.float32], scanner: ScannerProfile, rng: np.random.Generator
) -> NDArray[np.uint16]:
    """Acquire a batch of signals on one scanner: the stored pixel values it would write.

    Parameters
    ----------
    signal : ndarray of float32, shape (B, 128, 128)
        Output of :func:`render_scenes`.
    scanner : ScannerProfile
        Acquisition physics and bit depth.
    rng : numpy.random.Generator
        Source of the noise.

    Returns
    -------
    ndarray of uint16, shape (B, 128, 128)
        Stored values in ``[0, 2**bits_stored - 1]``; inverted for MONOCHROME1.
    """
    b = signal.shape[0]
    # Per-exposure variation every scanner has: focus/motion (extra blur mixed in with weight w),
    # dose (noise scale) and patient thickness (heel-gradient jitter). A model trained on one scanner
    # learns to ignore this much variation, not the larger differences between scanners.
    sharp = ndimage.gaussian_filter(signal, (0, scanner.blur_sigma, scanner.blur_sigma), mode="nearest")
    soft = ndimage.gaussian_filter(sharp, (0, _BLUR_JITTER, _BLUR_JITTER), mode="nearest")
    w = _col(rng.uniform(0.0, 1.0, b))
    v = sharp + w * (soft - sharp)
    heel = np.float32(scanner.heel) + _col(rng.uniform(-_HEEL_JITTER, _HEEL_JITTER, b))
    v = v + heel * _AXIS[None, :, None]  # rows run head to feet
    v = np.clip(v, 0.0, None)
    if scanner.gamma != 1.0:
        v = v ** np.float32(scanner.gamma)
    if scanner.edge_gain > 0:
        v = v + np.float32(scanner.edge_gain) * (
            v - ndimage.gaussian_filter(v, (0, 4.0, 4.0), mode="nearest")
        )
    noise_sd = np.float32(scanner.noise_sd) * _col(rng.uniform(*_DOSE_NOISE_FACTOR, b))
    v = v + noise_sd * rng.standard_normal(v.shape, dtype=np.float32)
    digital = np.clip(np.rint(scanner.dark + scanner.gain * v), 0, scanner.max_stored)
    if scanner.photometric == "MONOCHROME1":
        digital = scanner.max_stored - digital
    out: NDArray[np.uint16] = digital.astype(np.uint16)
    return out


def stored_to_presentation(stored: NDArray[np.integer], scanner: ScannerProfile) -> NDArray[np.float32]:
    """Presentation values from stored values, using the scanner's profile instead of a header.

    The same arithmetic as :func:`sitecal.demo.presentation_values`: for MONOCHROME1 the stored value is
    first replaced by ``(2**BitsStored - 1) - stored``; then ``value * RescaleSlope + RescaleIntercept``.

    Parameters
    ----------
    stored : ndarray of int, shape (..., Rows, Columns)
        Stored pixel values.
    scanner : ScannerProfile
        Supplies photometric interpretation, bits stored, slope and intercept.

    Returns
    -------
    ndarray of float32, same shape as ``stored``
    """
    return apply_presentation(
        stored,
        photometric=scanner.photometric,
        bits_stored=scanner.bits_stored,
        slope=scanner.slope,
        intercept=scanner.intercept,
    )


_CHUNK = 64  # images synthesised per vectorised batch


def synthesize_stored(
    n: int, scanner: ScannerProfile, rng: np.random.Generator
) -> tuple[NDArray[np.uint16], NDArray[np.int64]]:
    """Synthesise the stored pixel values and labels of ``n`` studies on one scanner, one patient each.

    The in-memory twin of :func:`sitecal.demo.generate_demo`: the same scenes and acquisition, without
    headers or files. The demo model is trained on these (``examples/demo/train.py``).

    Parameters
    ----------
    n : int
        Number of images.
    scanner : ScannerProfile
        The scanner that acquires them.
    rng : numpy.random.Generator
        Source of every random choice.

    Returns
    -------
    stored : ndarray of uint16, shape (n, 128, 128)
        What the scanner would write to Pixel Data.
    labels : ndarray of int64, shape (n,)
        Class indices into :data:`sitecal.demo.CLASS_NAMES`.

    Examples
    --------
    >>> from sitecal.demo import scanner_by_key
    >>> stored, labels = synthesize_stored(3, scanner_by_key("scanner-2"), np.random.default_rng(0))
    >>> stored.shape, stored.dtype.name, labels.shape
    ((3, 128, 128), 'uint16', (3,))
    """
    sex = rng.choice(np.array(["F", "M"]), size=n)
    anatomy = sample_anatomy(rng, sex)
    labels = sample_labels(rng, n)
    stored = np.empty((n, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint16)
    for start in range(0, n, _CHUNK):
        idx = np.arange(start, min(start + _CHUNK, n))
        stored[idx] = acquire(render_scenes(rng, labels[idx], anatomy.take(idx)), scanner, rng)
    return stored, labels
