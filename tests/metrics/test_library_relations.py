"""What MONAI's CalibrationErrorMetric computes, in sitecal's terms (see _calibration_error's docstring)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.metrics.calibration import CalibrationErrorMetric

from sitecal.metrics import expected_calibration_error, softmax


def _case(n: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    logits = 2.0 * rng.normal(size=(n, c))
    logits[np.arange(n), labels] += 1.5
    probs = softmax(logits)
    # keep every probability off the 20 edges, where [lo, hi) (MONAI) and (lo, hi] (sitecal) differ
    off_edge = (np.abs(probs * 20 - np.round(probs * 20)) > 1e-5).all(axis=1)
    return probs[off_edge], labels[off_edge]


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.ascontiguousarray(a), dtype=torch.float32)  # contiguous: no torch warning


def _monai(y_pred: np.ndarray, y: np.ndarray) -> float:
    metric = CalibrationErrorMetric()  # defaults: num_bins=20, expected, include_background, mean
    metric(y_pred=_tensor(y_pred), y=_tensor(y))
    return float(metric.aggregate())  # type: ignore[arg-type]


@pytest.mark.parametrize(("c", "seed"), [(2, 0), (3, 1), (5, 2)])
def test_classification_batch_the_obvious_way_is_not_a_calibration_error(c: int, seed: int) -> None:
    # (N, C, 1): every (study, class) is its own one-pixel "image", so each term is |p_ik - 1[y_i = k]|
    # and the metric is their mean, 2 (1 - mean p_true) / C: no bins, no top label
    probs, labels = _case(2000, c, seed)
    onehot = np.eye(c)[labels]
    value = _monai(probs[:, :, None], onehot[:, :, None])
    p_true = probs[np.arange(len(labels)), labels]
    assert value == pytest.approx(2 * (1 - p_true.mean()) / c, abs=1e-6)
    assert value == pytest.approx(np.abs(probs - onehot).mean(), abs=1e-6)


def test_obvious_way_is_large_for_a_calibrated_model() -> None:
    # labels drawn from the probabilities: top-label ECE near 0, MONAI's (N, C, 1) value is not
    rng = np.random.default_rng(7)
    probs = softmax(1.5 * rng.normal(size=(5_000, 3)))
    labels = np.minimum((rng.random(5_000)[:, None] > probs.cumsum(axis=1)).sum(axis=1), 2)
    assert expected_calibration_error(probs, labels) < 0.03
    assert _monai(probs[:, :, None], np.eye(3)[labels][:, :, None]) > 0.2


@pytest.mark.parametrize(("c", "seed"), [(2, 3), (3, 4), (6, 5)])
def test_one_image_layout_is_classwise_ece_with_20_bins(c: int, seed: int) -> None:
    # (1, C, N): one "image" whose pixels are the studies: per-channel binned ECE averaged over channels
    probs, labels = _case(3000, c, seed)
    onehot = np.eye(c)[labels]
    value = _monai(probs.T[None], onehot.T[None])
    ours = expected_calibration_error(probs, labels, kind="classwise", n_bins=20)
    assert value == pytest.approx(ours, abs=1e-5)  # float32 in MONAI


def test_segmentation_is_a_mean_of_per_image_classwise_ece() -> None:
    # (B, C, H, W): each image binned on its own pixels, then the B x C values averaged
    rng = np.random.default_rng(6)
    b, c, h, w = 3, 3, 8, 8
    probs = softmax(2.0 * rng.normal(size=(b * h * w, c)))
    labels = rng.integers(0, c, b * h * w)
    off = (np.abs(probs * 20 - np.round(probs * 20)) > 1e-5).all()
    assert off
    per_image = [
        expected_calibration_error(
            probs[i * h * w : (i + 1) * h * w],
            labels[i * h * w : (i + 1) * h * w],
            kind="classwise",
            n_bins=20,
        )
        for i in range(b)
    ]
    y_pred = probs.reshape(b, h, w, c).transpose(0, 3, 1, 2)
    y = np.eye(c)[labels].reshape(b, h, w, c).transpose(0, 3, 1, 2)
    assert _monai(y_pred, y) == pytest.approx(float(np.mean(per_image)), abs=1e-5)
