r"""Every recalibration method of :data:`sitecal.calibration.METHODS` as a torch module, the group an index.

:class:`IndexedMethodCalibrator` is :class:`~sitecal.inference.IndexedTemperatureScaler` for a
:class:`~sitecal.calibration.GroupMethods`: ``forward(image, group_index)`` runs the model and maps its
logits through the map of each row's group, index ``i < G`` the i-th of the sorted group names and
``G = len(groups)`` the global fit (a group on global fallback gets the global fit's parameters in its own
row). The maps are those of :mod:`sitecal.calibration._scaling_methods` and
:mod:`sitecal.calibration._binning_methods`, written again in torch ops that TorchScript tracing,
``torch.export`` (dynamic batch) and the ONNX exporter all capture: no Python branch or loop on the data,
no numpy. Histogram binning finds each score's bin by counting the edges below it (numpy's
``digitize(right=True)``); isotonic regression interpolates over thresholds padded to one length with
their last point, which counting the thresholds below a clipped score leaves where they were.

Parameters are buffers stacked over the group index (row ``G`` the global fit). The map computes in
float64, the logits cast to it first, so that it equals :meth:`GroupMethods.probabilities` to rounding
(within 2e-15 on random float64 logits); it returns the logits' dtype, as the temperature scaler does
(float32 for a float32 network, float64 for float64 logits).

Histogram binning is a step function of the score, and isotonic regression has kinks: a runtime whose
float32 logits differ from PyTorch's by rounding (onnxruntime's convolutions, about 1e-5 on the demo CNN)
moves a score lying within that distance of a bin edge into the next bin, and its probability by a whole
step. The export's check on its example input, and the tests, see no such row; a deployment's scores
can.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from sitecal.calibration import GroupMethods
from sitecal.errors import DataError

__all__ = ["IndexedMethodCalibrator", "method_table"]

#: Probabilities are floored here before the log in Dirichlet calibration's features (machine epsilon,
#: as :data:`sitecal.calibration._scaling_methods.DIRICHLET_EPSILON`).
_LOG_EPSILON = math.log(float(np.finfo(np.float64).eps))
#: What each map keeps in its buffers, row ``i`` for group index ``i`` (``G + 1`` rows), for the table.
PARAMETERS = {
    "temperature": "temperature (G+1,): softmax(z / T)",
    "vector": "a (G+1, K), b (G+1, K): softmax(a * z + b)",
    "matrix": "W (G+1, K, K), b (G+1, K): softmax(W z + b)",
    "dirichlet": "W (G+1, K, K), b (G+1, K): softmax(W max(log_softmax(z), ln eps) + b)",
    "beta": "a, b, c (G+1,): q = sigmoid(a ln p1 - b ln(1 - p1) + c), p = softmax(z)",
    "histogram": "bin_values (G+1, C, n_bins), edges (n_bins+1,): the value of the bin (e_j, e_j+1] of "
    "each softmax score, 0 in the first; C = 1 (class 1) when K = 2, else one-vs-rest and renormalised",
    "isotonic": "x_thresholds, y_thresholds (G+1, C, L): linear interpolation of each softmax score "
    "clipped to the thresholds, padded with their last point; C as histogram, one-vs-rest renormalised",
}


def _stack(methods: GroupMethods, key: str) -> np.ndarray[Any, Any]:
    """Parameter ``key`` of each group (sorted) and the global fit last: (G + 1, ...)."""
    names = sorted(methods.groups)
    fits = [methods.fit_for(n) for n in names] + [methods.global_fit]
    shapes = {f.params[key].shape[1:] for f in fits}
    if key in ("x_thresholds", "y_thresholds"):  # pad every group's thresholds to one length (>= 2)
        length = max(2, *(shape[-1] for shape in shapes))
        rows = [f.params[key][0] for f in fits]
        return np.stack([np.concatenate([r, np.repeat(r[:, -1:], length - r.shape[1], 1)], 1) for r in rows])
    if len(shapes) != 1:
        raise DataError(
            f"IndexedMethodCalibrator: the {methods.name!r} fits have {key!r} of different shapes "
            f"{sorted(shapes)}; every group needs the same options (refit with fit_group_methods)."
        )
    return np.stack([f.params[key][0] for f in fits]).astype(np.float64)


class _Map(nn.Module):
    """A calibration map ``(logits (B, K), group_index (B,)) -> probabilities (B, K)``, float64 inside."""

    def __init__(self, methods: GroupMethods, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.n_classes = methods.global_fit.n_classes
        for key in keys:
            self.register_buffer(key, torch.from_numpy(_stack(methods, key)))

    def forward(self, logits: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
        return self.probabilities(logits.to(torch.float64), group_index).to(logits.dtype)

    def probabilities(self, z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _scores(self, z: torch.Tensor) -> torch.Tensor:
        """One-vs-rest scores (B, C): the positive class's probability when K = 2, else all K."""
        p = torch.softmax(z, dim=1)
        return p[:, 1:] if self.n_classes == 2 else p

    def _renormalise(self, q: torch.Tensor) -> torch.Tensor:
        """(B, C) one-vs-rest values -> (B, K); a row summing to 0 becomes uniform (as the numpy map)."""
        if self.n_classes == 2:
            return torch.cat([1.0 - q, q], dim=1)
        total = q.sum(dim=1, keepdim=True)
        nonzero = total != 0
        return torch.where(nonzero, q / torch.where(nonzero, total, 1.0), 1.0 / self.n_classes)


class _Temperature(_Map):
    temperature: torch.Tensor

    def __init__(self, methods: GroupMethods) -> None:
        super().__init__(methods, ("temperature",))

    def probabilities(self, z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return torch.softmax(z / self.temperature[g].unsqueeze(1), dim=1)


class _Vector(_Map):
    a: torch.Tensor
    b: torch.Tensor

    def __init__(self, methods: GroupMethods) -> None:
        super().__init__(methods, ("a", "b"))

    def probabilities(self, z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.a[g] * z + self.b[g], dim=1)


class _Linear(_Map):
    """Matrix scaling, or Dirichlet calibration (on the clipped log-probabilities)."""

    W: torch.Tensor
    b: torch.Tensor

    def __init__(self, methods: GroupMethods) -> None:
        super().__init__(methods, ("W", "b"))
        self.dirichlet = methods.name == "dirichlet"

    def probabilities(self, z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        x = torch.clamp(torch.log_softmax(z, dim=1), min=_LOG_EPSILON) if self.dirichlet else z
        eta = (self.W[g] * x.unsqueeze(1)).sum(dim=2)  # (B, K, K) x (B, 1, K): row k is W_k . x
        return torch.softmax(eta + self.b[g], dim=1)


class _Beta(_Map):
    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor

    def __init__(self, methods: GroupMethods) -> None:
        super().__init__(methods, ("a", "b", "c"))

    def probabilities(self, z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        log_p = torch.log_softmax(z, dim=1)
        eta = self.a[g] * log_p[:, 1] - self.b[g] * log_p[:, 0] + self.c[g]
        return torch.softmax(torch.stack([torch.zeros_like(eta), eta], dim=1), dim=1)


class _Histogram(_Map):
    bin_values: torch.Tensor
    edges: torch.Tensor

    def __init__(self, methods: GroupMethods) -> None:
        super().__init__(methods, ("bin_values",))
        n_bins = int(self.bin_values.shape[2])
        # the numpy map's own edges, bit for bit (torch.linspace may round an edge differently)
        self.register_buffer("edges", torch.from_numpy(np.linspace(0.0, 1.0, n_bins + 1)))

    def probabilities(self, z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        scores = self._scores(z)
        n_bins = self.bin_values.shape[2]
        # digitize(right=True) - 1: the bin (e_j, e_j+1] is j = (edges strictly below the score) - 1
        below = (self.edges < scores.unsqueeze(2)).to(torch.int64).sum(dim=2)
        index = torch.clamp(below - 1, min=0, max=n_bins - 1)
        q = torch.gather(self.bin_values[g], 2, index.unsqueeze(2)).squeeze(2)
        return torch.clamp(self._renormalise(q), min=0.0, max=1.0)


class _Isotonic(_Map):
    x_thresholds: torch.Tensor
    y_thresholds: torch.Tensor

    def __init__(self, methods: GroupMethods) -> None:
        super().__init__(methods, ("x_thresholds", "y_thresholds"))

    def probabilities(self, z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        xs, ys = self.x_thresholds[g], self.y_thresholds[g]  # (B, C, L), padded with the last point
        x = torch.minimum(torch.maximum(self._scores(z), xs[:, :, 0]), xs[:, :, -1])
        # searchsorted(left) on the unpadded thresholds: the padding equals the last, which x never
        # exceeds, so it is not counted; thresholds are distinct, so this is at most n - 1
        below = (xs < x.unsqueeze(2)).to(torch.int64).sum(dim=2, keepdim=True)
        hi = torch.clamp(below, min=1, max=xs.shape[2] - 1)
        x_lo, x_hi = torch.gather(xs, 2, hi - 1).squeeze(2), torch.gather(xs, 2, hi).squeeze(2)
        y_lo, y_hi = torch.gather(ys, 2, hi - 1).squeeze(2), torch.gather(ys, 2, hi).squeeze(2)
        step = x_hi - x_lo
        # a single threshold (the numpy map's constant y_0): lo and hi are then the same point, step 0
        flat = step == 0
        slope = torch.where(flat, 0.0, (y_hi - y_lo) / torch.where(flat, 1.0, step))
        out = self._renormalise(slope * (x - x_lo) + y_lo)
        # as CalibratedClassifierCV: values exceeding 1 by rounding only are set to 1
        return torch.where((out > 1.0) & (out <= 1.0 + 1e-5), 1.0, out)


_MAPS: dict[str, Callable[[GroupMethods], _Map]] = {
    "temperature": _Temperature,
    "vector": _Vector,
    "matrix": _Linear,
    "dirichlet": _Linear,
    "beta": _Beta,
    "histogram": _Histogram,
    "isotonic": _Isotonic,
}


def calibration_map(methods: GroupMethods) -> nn.Module:
    """The map alone, ``(logits (B, K), group_index (B,)) -> probabilities (B, K)``, as a torch module."""
    if methods.n_fits != 1:
        raise DataError(
            f"IndexedMethodCalibrator takes one fit per group; this GroupMethods holds R = {methods.n_fits} "
            "(a refit bootstrap). Fit it again without weights to deploy it."
        )
    return _MAPS[methods.name](methods)


class IndexedMethodCalibrator(nn.Module):
    """``map(model(x), group_index)``: the model and a fitted recalibration method, the group an integer.

    Parameters
    ----------
    model : torch.nn.Module
        Returns logits (B, K) in eval mode; K = 2 for beta.
    group_methods : GroupMethods
        One fit per group (``R = 1``; ``GroupMethods.from_dict`` of what was stored).

    Notes
    -----
    ``forward(image, group_index)``: ``group_index`` is int64 (B,), ``i < G`` the i-th of the sorted
    group names and ``G`` the global fit. The map runs in float64 on the logits cast to float64 and
    returns the logits' dtype. The maps (see :func:`sitecal.calibration.fit_method`):

    - temperature ``softmax(z / T)``; vector ``softmax(a * z + b)``; matrix ``softmax(W z + b)``;
      dirichlet ``softmax(W max(log softmax(z), ln eps) + b)``; beta ``[1 - q, q]``,
      ``q = sigmoid(a ln p_1 - b ln p_0 + c)``;
    - histogram: the value of the bin ``(e_j, e_{j+1}]`` of each score (0 in the first bin);
    - isotonic: linear interpolation over the thresholds, the score clipped to them;

    the last two on ``p = softmax(z)``, one-vs-rest when ``K > 2`` and each row divided by its sum (a
    row summing to 0 becomes uniform).

    Examples
    --------
    >>> from sitecal.calibration import fit_group_methods
    >>> z = np.array([[0.0, 2.0], [0.0, -1.0], [0.0, 0.5], [0.0, -2.0], [0.0, 1.0], [0.0, 0.2]])
    >>> fits = fit_group_methods("isotonic", z, [1, 0, 0, 0, 1, 1], ["A"] * 6, min_group_size=2)
    >>> module = IndexedMethodCalibrator(nn.Identity(), fits)
    >>> module(torch.from_numpy(z), torch.tensor([0, 0, 0, 1, 1, 1]))[:, 1].round(decimals=3).tolist()
    [1.0, 0.0, 0.5, 0.0, 1.0, 0.5]
    """

    def __init__(self, model: nn.Module, group_methods: GroupMethods) -> None:
        super().__init__()
        self.model = model
        self.calibration = calibration_map(group_methods)

    def forward(self, x: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
        """Calibrated probabilities (B, K) of the batch ``x`` whose rows belong to ``group_index``."""
        out: torch.Tensor = self.calibration(self.model(x), group_index)
        return out


def method_table(methods: GroupMethods) -> dict[str, Any]:
    """The method's entries of the group table: its name, each group's source, where its parameters are.

    ``parameters_sha256`` is the sha256 of the canonical JSON of ``GroupMethods.to_dict()``: it names the
    fit the file holds (a bundle's version carries its first 8 hex digits).
    """
    names = sorted(methods.groups)
    described = PARAMETERS[methods.name]
    document = json.dumps(methods.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    out: dict[str, Any] = {
        "method": methods.name,
        "sources": {n: methods.groups[n].source for n in names},
        "parameters": f"in the calibration map's buffers, row i for group index i: {described}",
        "parameters_sha256": hashlib.sha256(document.encode()).hexdigest(),
    }
    if methods.name == "temperature":
        out["temperatures"] = [float(methods.fit_for(n).params["temperature"][0]) for n in names] + [
            float(methods.global_fit.params["temperature"][0])
        ]
    return out
