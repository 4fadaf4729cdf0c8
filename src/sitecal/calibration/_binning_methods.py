r"""The non-parametric recalibration maps: histogram binning and isotonic regression.

Both act on class probabilities ``p = softmax(z)``: with two classes on the positive-class
probability ``p_1`` (and return ``[1 - q, q]``), with ``K > 2`` one-vs-rest on each ``p_k`` against
``[y == k]`` and then renormalise each row. Weights are row multiplicities: a weighted fit equals the
unweighted fit on the rows repeated that many times.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import isotonic_regression

from sitecal.calibration._method_common import Params, RawFit, batch_softmax, resamples_phrase

__all__ = ["fit_histogram", "fit_isotonic", "predict_histogram", "predict_isotonic"]

_EPS = float(np.finfo(np.float64).eps)
# scikit-learn's _make_unique merges scores closer than this to the first of their run (float64)
_RESOLUTION = float(np.finfo(np.float64).resolution)


def _scores_targets(
    z: NDArray[np.float64], y: NDArray[np.int64] | None
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """One-vs-rest scores (N, C) and targets (N, C): C = 1 (positive class) when K = 2, else K."""
    p = batch_softmax(z)
    k = z.shape[1]
    scores = p[:, 1:] if k == 2 else p
    if y is None:
        return scores, None
    classes = np.array([1]) if k == 2 else np.arange(k)
    return scores, (y[:, None] == classes[None, :]).astype(np.float64)


def _renormalise(q: NDArray[np.float64], k: int) -> NDArray[np.float64]:
    """(R, M, C) one-vs-rest values -> (R, M, K) probabilities."""
    if k == 2:
        return np.concatenate([1.0 - q, q], axis=2)
    total = q.sum(axis=2, keepdims=True)
    uniform = np.full_like(q, 1.0 / k)
    out: NDArray[np.float64] = np.divide(q, total, out=uniform, where=total != 0)
    return out


# -- histogram binning ----------------------------------------------------------------------------------
def fit_histogram(
    z: NDArray[np.float64], y: NDArray[np.int64], w: NDArray[np.float64], *, n_bins: int
) -> RawFit:
    """Weighted frequency of the class in each of ``n_bins`` equal-width bins, per weighting.

    As ``netcal.binning.HistogramBinning``: fit-time scores are clipped to ``[eps, 1 - eps]`` and
    binned left-closed, ``[e_j, e_{j+1})``; an empty bin gets its midpoint ``(e_j + e_{j+1}) / 2``; with
    ``K > 2`` a class of zero total weight gets no model (its column is 0 before renormalising).
    """
    scores, targets = _scores_targets(z, y)
    assert targets is not None
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    midpoints = 0.5 * (edges[:-1] + edges[1:])
    bins = np.digitize(np.clip(scores, _EPS, 1.0 - _EPS), edges) - 1
    r, c = w.shape[0], scores.shape[1]
    values = np.zeros((r, c, n_bins))
    onehot = np.zeros((scores.shape[0], n_bins))
    rows = np.arange(scores.shape[0])
    for j in range(c):  # a loop over one-vs-rest classes
        onehot[:] = 0.0
        onehot[rows, bins[:, j]] = 1.0
        counts = w @ onehot
        sums = w @ (onehot * targets[:, j : j + 1])
        safe = np.where(counts > 0, counts, 1.0)
        values[:, j] = np.where(counts > 0, sums / safe, midpoints)
    notes: list[str] = []
    empty = w.sum(axis=1) <= 0
    if empty.any():
        notes.append(resamples_phrase(empty) + "every row has weight 0; every bin takes its midpoint.")
    if c > 1:
        absent = ~empty & ((w @ targets) <= 0).any(axis=1)
        values[(w @ targets <= 0) & ~empty[:, None]] = 0.0
        if absent.any():
            notes.append(
                resamples_phrase(absent)
                + "a class has no weight, so it gets probability 0 before renormalising (as netcal)."
            )
    return RawFit({"bin_values": values}, np.ones(r, dtype=bool), notes)


def predict_histogram(params: Params, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Bin value of each score; bins right-closed ``(e_j, e_{j+1}]``, 0 in the first (as netcal)."""
    values = np.asarray(params["bin_values"], dtype=np.float64)
    n_bins = values.shape[2]
    scores, _ = _scores_targets(z, None)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.digitize(scores, edges, right=True) - 1, 0, n_bins - 1)
    q = np.stack([values[:, j, idx[:, j]] for j in range(scores.shape[1])], axis=2)
    return np.clip(_renormalise(q, z.shape[1]), 0.0, 1.0)


# -- isotonic regression ---------------------------------------------------------------------------------
def _make_unique(
    x: NDArray[np.float64], t: NDArray[np.float64], wt: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """scikit-learn's ``_make_unique``: sorted scores within ``resolution`` of a run's first are one point."""
    gaps = np.diff(x)
    if bool(np.all((gaps == 0.0) | (gaps >= _RESOLUTION))):
        start = np.concatenate([[True], gaps >= _RESOLUTION])
    else:  # a score within 1e-15 of, but not equal to, its neighbour: follow the sequential rule exactly
        start = np.zeros(x.shape[0], dtype=bool)
        start[0] = True
        current = x[0]
        for j in range(1, x.shape[0]):  # a loop over sorted scores
            if x[j] - current >= _RESOLUTION:
                start[j], current = True, x[j]
    idx = np.flatnonzero(start)
    total = np.add.reduceat(wt, idx)
    return x[idx], np.add.reduceat(t * wt, idx) / total, total


def _isotonic_one(
    x: NDArray[np.float64], t: NDArray[np.float64], wt: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Thresholds of ``IsotonicRegression(y_min=0, y_max=1).fit(x, t, sample_weight=wt)`` on sorted rows."""
    ux, uy, uw = _make_unique(x, t, wt)
    fitted = np.clip(isotonic_regression(uy, weights=uw).x, 0.0, 1.0)
    keep = np.ones(fitted.shape[0], dtype=bool)
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return ux[keep], fitted[keep]


def fit_isotonic(z: NDArray[np.float64], y: NDArray[np.int64], w: NDArray[np.float64]) -> RawFit:
    """Weighted pool-adjacent-violators fit per weighting and one-vs-rest class (rows of weight 0 dropped)."""
    scores, targets = _scores_targets(z, y)
    assert targets is not None
    r, c = w.shape[0], scores.shape[1]
    found: list[list[tuple[NDArray[np.float64], NDArray[np.float64]]]] = [[] for _ in range(r)]
    empty = w.sum(axis=1) <= 0
    for j in range(c):  # a loop over one-vs-rest classes
        order = np.lexsort((targets[:, j], scores[:, j]))  # as scikit-learn: by score, then target
        xs, ts, ws = scores[order, j], targets[order, j], w[:, order]
        for i in range(r):  # a loop over weightings (PAVA is sequential)
            keep = ws[i] > 0
            if empty[i]:
                found[i].append((np.array([0.0, 1.0]), np.array([0.0, 1.0])))
            else:
                found[i].append(_isotonic_one(xs[keep], ts[keep], ws[i, keep]))
    length = max(len(tx) for per_r in found for tx, _ in per_r)
    x_thr = np.zeros((r, c, length))
    y_thr = np.zeros((r, c, length))
    count = np.zeros((r, c), dtype=np.int64)
    for i, per_r in enumerate(found):  # a loop over weightings: pad with the last threshold
        for j, (tx, ty) in enumerate(per_r):
            count[i, j] = tx.shape[0]
            x_thr[i, j, : tx.shape[0]], x_thr[i, j, tx.shape[0] :] = tx, tx[-1]
            y_thr[i, j, : ty.shape[0]], y_thr[i, j, ty.shape[0] :] = ty, ty[-1]
    notes = []
    if empty.any():
        notes.append(resamples_phrase(empty) + "every row has weight 0; the identity map is used.")
    return RawFit(
        {"x_thresholds": x_thr, "y_thresholds": y_thr, "n_thresholds": count}, np.ones(r, bool), notes
    )


def _interpolate(
    x_thr: NDArray[np.float64], y_thr: NDArray[np.float64], x: NDArray[np.float64]
) -> NDArray[np.float64]:
    """``scipy.interpolate.interp1d(kind="linear")`` after clipping to the thresholds, as scikit-learn."""
    if x_thr.shape[0] == 1:
        return np.full(x.shape[0], y_thr[0])
    x = np.clip(x, x_thr[0], x_thr[-1])
    hi = np.clip(np.searchsorted(x_thr, x), 1, x_thr.shape[0] - 1)
    lo = hi - 1
    slope = (y_thr[hi] - y_thr[lo]) / (x_thr[hi] - x_thr[lo])
    out: NDArray[np.float64] = slope * (x - x_thr[lo]) + y_thr[lo]
    return out


def predict_isotonic(params: Params, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Interpolated isotonic fit per class, renormalised as ``CalibratedClassifierCV``: (R, M, K)."""
    x_thr = np.asarray(params["x_thresholds"], dtype=np.float64)
    y_thr = np.asarray(params["y_thresholds"], dtype=np.float64)
    count = np.asarray(params["n_thresholds"], dtype=np.int64)
    scores, _ = _scores_targets(z, None)
    r, c = count.shape
    q = np.empty((r, scores.shape[0], c))
    for i in range(r):  # a loop over fits
        for j in range(c):
            n = int(count[i, j])
            q[i, :, j] = _interpolate(x_thr[i, j, :n], y_thr[i, j, :n], scores[:, j])
    out = _renormalise(q, z.shape[1])
    # as CalibratedClassifierCV: values exceeding 1 by rounding only are set to 1
    out[(out > 1.0) & (out <= 1.0 + 1e-5)] = 1.0
    return out
