r"""The ECE family: expected and maximum calibration error, reliability curves.

Relation to other libraries
---------------------------
Checked side by side in ``tests/metrics`` (test-only dependencies).

- **netcal** (``netcal.metrics.ECE(bins=15).measure(probs, labels)``) and **torchmetrics**
  (``multiclass_calibration_error(..., n_bins=15, norm="l1")``, ``norm="max"`` for MCE) compute the
  same top-label, equal-width, count-weighted ECE; they close bins on the left, ``[lo, hi)``, where
  sitecal uses ``(lo, hi]``, so they agree except for confidences exactly on an inner edge
  (torchmetrics works in float32; the tests hold it to 1e-4).
- **MONAI** 1.6 ``monai.metrics.CalibrationErrorMetric`` is a *segmentation* metric. It takes
  ``y_pred`` and a one-hot ``y`` of shape ``(B, C, spatial...)`` and, for every image ``b`` and
  channel ``c`` separately, bins that channel's values over the image's pixels (``num_bins=20``
  equal-width bins, ``[lo, hi)`` unless ``right=True``; ``calibration_binning``) and takes the
  count-weighted gap, then (``metric_reduction="mean"``) averages the ``B x C`` numbers. So it is a
  per-image *class-wise* (one-vs-rest, every channel, background included) ECE with 20 bins, never a
  top-label ECE. Fed a classification batch "the obvious way", ``y_pred`` of shape ``(N, C, 1)``,
  each (study, class) "image" has one pixel, so each term is ``|p_ik - 1[y_i = k]|`` and the metric
  is ``mean_ik |p_ik - 1[y_i = k]| = 2 (1 - mean_i p_{i, y_i}) / C``, an accuracy-like score with no
  binning at all: the likely source of a reported 0.263 beside a top-label ECE of 0.068. Laid out as one
  image, ``(1, C, N)``, it equals ``expected_calibration_error(probs, labels, kind="classwise",
  n_bins=20)`` up to float32 and the edge convention. Both identities are pinned in
  ``tests/metrics/test_library_relations.py``.
- The authors' ``calibration`` package (Kumar et al. 2019) reports the l2 error by default;
  :func:`~sitecal.metrics.debiased_expected_calibration_error` is its ``unbiased_l2_ce``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int, check_labels, check_option, check_probs
from sitecal.errors import DataError
from sitecal.metrics._binning import Binning, bin_edges, binned_sums

__all__ = [
    "ReliabilityCurve",
    "expected_calibration_error",
    "maximum_calibration_error",
    "reliability_curve",
]

ECEKind = Literal["top-label", "classwise"]
BINNINGS = ("width", "mass")
KINDS = ("top-label", "classwise")


def _validated(
    probs: ArrayLike, labels: ArrayLike, *, func: str
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    return p, y


def top_label(
    probs: NDArray[np.float64], labels: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Top-label confidence ``max_k p_k`` and correctness ``1[argmax = y]`` (ties: lowest index)."""
    predicted = probs.argmax(axis=1)
    confidence = probs[np.arange(probs.shape[0]), predicted]
    correct = (predicted == labels).astype(np.float64)
    return confidence, correct


def expected_calibration_error(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    n_bins: int = 15,
    binning: Binning = "width",
    kind: ECEKind = "top-label",
) -> float:
    r"""Binned expected calibration error.

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
        Predicted class probabilities; rows sum to 1 within 1e-6.
    labels : array_like, shape (N,)
        True class indices in ``[0, C)``.
    n_bins : int, default 15
        Number of bins, >= 1.
    binning : {"width", "mass"}, default "width"
        ``"width"``: edges ``linspace(0, 1, n_bins + 1)``. ``"mass"`` (adaptive): edges at the
        inverted-CDF quantiles of the binned values, so bins hold (nearly) equal counts; ties are
        never split across bins (see the bin-edge convention below).
    kind : {"top-label", "classwise"}, default "top-label"
        ``"top-label"`` bins the confidence ``max_k p_k`` against correctness of the argmax
        (ties broken to the lowest class index). ``"classwise"`` bins each column ``p_k`` against
        ``1[y = k]`` and averages the C per-class errors (Kull et al., 2019).

    Returns
    -------
    float
        In [0, 1].

    Notes
    -----
    Top-label, with bins :math:`B_b` over the N samples:

    .. math:: \mathrm{ECE} = \sum_b \frac{n_b}{N}\,\lvert \mathrm{acc}_b - \mathrm{conf}_b \rvert
              = \frac{1}{N} \sum_b \Bigl\lvert \sum_{i \in B_b} (\mathbb{1}[\hat y_i = y_i] - c_i) \Bigr\rvert

    (the second form is what is computed; empty bins contribute 0). Class-wise:
    :math:`\frac{1}{C}\sum_k \frac{1}{N}\sum_b
    \lvert \sum_{i \in B_{kb}} (\mathbb{1}[y_i = k] - p_{ik}) \rvert`, with bins built per class.

    Bin-edge convention: bins are ``(lo, hi]``; a value exactly on an edge belongs to the bin on its
    left and a value of exactly 0 to the first bin. netcal and torchmetrics use ``[lo, hi)``; the two
    agree whenever no value lies exactly on an inner edge.

    References
    ----------
    M. P. Naeini, G. Cooper, M. Hauskrecht. "Obtaining Well Calibrated Probabilities Using Bayesian
    Binning." AAAI 2015. C. Guo et al. "On Calibration of Modern Neural Networks." ICML 2017.
    M. Kull et al. "Beyond temperature scaling: Obtaining well-calibrated multiclass probabilities
    with Dirichlet calibration." NeurIPS 2019. J. Nixon et al. "Measuring Calibration in Deep
    Learning." CVPR Workshops 2019 (adaptive bins).

    Examples
    --------
    >>> probs = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]]
    >>> round(expected_calibration_error(probs, [0, 1, 1, 0], n_bins=4), 4)
    0.25
    """
    func = "expected_calibration_error"
    p, y = _validated(probs, labels, func=func)
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    how: Any = check_option(binning, name="binning", func=func, options=BINNINGS)
    which = check_option(kind, name="kind", func=func, options=KINDS)
    n = p.shape[0]
    if which == "top-label":
        confidence, correct = top_label(p, y)
        _, s_conf, s_acc = binned_sums(confidence, correct, bin_edges(confidence, bins, how))
        return float(np.abs(s_acc - s_conf).sum() / n)
    per_class = np.empty(p.shape[1])
    for k in range(p.shape[1]):  # a loop over classes, not samples
        column = p[:, k]
        target = (y == k).astype(np.float64)
        _, s_conf, s_acc = binned_sums(column, target, bin_edges(column, bins, how))
        per_class[k] = np.abs(s_acc - s_conf).sum() / n
    return float(per_class.mean())


def maximum_calibration_error(
    probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 15, binning: Binning = "width"
) -> float:
    r"""Top-label maximum calibration error: the largest gap over non-empty bins.

    .. math:: \mathrm{MCE} = \max_{b:\, n_b > 0} \lvert \mathrm{acc}_b - \mathrm{conf}_b \rvert

    Parameters, bins and edge convention are those of :func:`expected_calibration_error`
    (top-label). MCE is driven by the emptiest occupied bin, so it is noisy on small groups.

    Returns
    -------
    float
        In [0, 1].

    References
    ----------
    M. P. Naeini, G. Cooper, M. Hauskrecht. AAAI 2015.

    Examples
    --------
    >>> probs = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]]
    >>> round(maximum_calibration_error(probs, [0, 1, 1, 0], n_bins=4), 4)
    0.35
    """
    func = "maximum_calibration_error"
    p, y = _validated(probs, labels, func=func)
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    how: Any = check_option(binning, name="binning", func=func, options=BINNINGS)
    confidence, correct = top_label(p, y)
    count, s_conf, s_acc = binned_sums(confidence, correct, bin_edges(confidence, bins, how))
    occupied = count > 0
    return float(np.max(np.abs(s_acc[occupied] - s_conf[occupied]) / count[occupied]))


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class ReliabilityCurve:
    """Top-label reliability curve with every bin kept, empty ones included.

    Attributes
    ----------
    bin_edges : numpy.ndarray, shape (n_bins + 1,)
        Bin ``b`` is ``(bin_edges[b], bin_edges[b + 1]]`` (a confidence of 0 is in bin 0).
    confidence : numpy.ndarray, shape (n_bins,)
        Mean confidence per bin; NaN where ``count`` is 0.
    accuracy : numpy.ndarray, shape (n_bins,)
        Fraction correct per bin; NaN where ``count`` is 0.
    count : numpy.ndarray of int64, shape (n_bins,)
        Samples per bin; sums to ``n``.
    binning : str
        ``"width"`` or ``"mass"``.
    n : int
        Number of samples.

    Arrays are read-only. Compare curves with :meth:`to_dict` (NaN-aware), not ``==``.
    """

    bin_edges: NDArray[np.float64]
    confidence: NDArray[np.float64]
    accuracy: NDArray[np.float64]
    count: NDArray[np.int64]
    binning: str
    n: int

    @property
    def n_bins(self) -> int:
        """Number of bins."""
        return int(self.count.shape[0])

    @property
    def expected_calibration_error(self) -> float:
        """ECE from the curve, ``sum_b (n_b / N) |acc_b - conf_b|`` over occupied bins."""
        occupied = self.count > 0
        gaps = np.abs(self.accuracy[occupied] - self.confidence[occupied])
        return float(np.sum(self.count[occupied] * gaps) / self.n)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (lists of Python floats and ints; NaN becomes None)."""

        def floats(a: NDArray[np.float64]) -> list[float | None]:
            return [None if math.isnan(v) else float(v) for v in a.tolist()]

        return {
            "binning": self.binning,
            "n": self.n,
            "n_bins": self.n_bins,
            "bin_edges": floats(self.bin_edges),
            "confidence": floats(self.confidence),
            "accuracy": floats(self.accuracy),
            "count": [int(c) for c in self.count.tolist()],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReliabilityCurve:
        """Inverse of :meth:`to_dict` (None becomes NaN); floats are restored exactly."""
        try:

            def arr(key: str) -> NDArray[np.float64]:
                return np.array([math.nan if v is None else float(v) for v in data[key]], dtype=np.float64)

            return cls(
                bin_edges=_readonly(arr("bin_edges")),
                confidence=_readonly(arr("confidence")),
                accuracy=_readonly(arr("accuracy")),
                count=_readonly(np.array(data["count"], dtype=np.int64)),
                binning=str(data["binning"]),
                n=int(data["n"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"ReliabilityCurve.from_dict got a malformed dict ({exc!r}); pass what to_dict() wrote."
            ) from exc


def reliability_curve(
    probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 15, binning: Binning = "width"
) -> ReliabilityCurve:
    """Top-label reliability curve: per-bin mean confidence, accuracy and count.

    Parameters, bins and the ``(lo, hi]`` edge convention are those of
    :func:`expected_calibration_error`. Unlike ``sklearn.calibration.calibration_curve``, empty
    bins are kept (count 0, confidence and accuracy NaN) so curves of different groups line up
    bin for bin.

    Returns
    -------
    ReliabilityCurve
        ``curve.expected_calibration_error`` equals :func:`expected_calibration_error` for the same
        options up to rounding.

    Examples
    --------
    >>> curve = reliability_curve([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]], [0, 1, 1], n_bins=2)
    >>> curve.count.tolist(), curve.accuracy.tolist()
    ([0, 3], [nan, 0.6666666666666666])
    """
    func = "reliability_curve"
    p, y = _validated(probs, labels, func=func)
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    how: Any = check_option(binning, name="binning", func=func, options=BINNINGS)
    confidence, correct = top_label(p, y)
    edges = bin_edges(confidence, bins, how)
    count, s_conf, s_acc = binned_sums(confidence, correct, edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.where(count > 0, s_conf / np.maximum(count, 1), np.nan)
        mean_acc = np.where(count > 0, s_acc / np.maximum(count, 1), np.nan)
    return ReliabilityCurve(
        bin_edges=_readonly(edges),
        confidence=_readonly(mean_conf),
        accuracy=_readonly(mean_acc),
        count=_readonly(count),
        binning=how,
        n=int(p.shape[0]),
    )
