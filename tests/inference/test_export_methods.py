"""Every recalibration method exported with the group as an integer: the torch map equals
``GroupMethods.probabilities`` to rounding, and each format loads back without sitecal and gives sitecal's
probabilities to 1e-6 (ONNX 1e-5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.inference._export_helpers import FILES, run_without_sitecal, tiny_model
from torch import nn

from sitecal.calibration import METHODS, GroupMethods, fit_group_methods
from sitecal.errors import DataError
from sitecal.inference import IndexedMethodCalibrator, export_calibrated, group_table, round_trip_tolerance

_GROUPS = ("DRX Demo", "Ysio Demo", "Tiny")


def _fits(name: str, *, seed: int = 2, **options: object) -> GroupMethods:
    """``name`` fitted per group on random logits; "Tiny" (about 15 rows) falls back to the global fit."""
    k = 2 if name == "beta" else 3
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(300, k)) * 2.5
    labels = np.where(rng.random(300) < 0.6, logits.argmax(axis=1), rng.integers(0, k, 300))
    groups = rng.choice(_GROUPS, size=300, p=[0.5, 0.45, 0.05])
    fits = fit_group_methods(name, logits, labels, groups, min_group_size=40, **options)
    assert fits.groups["Tiny"].fit is None and fits.groups["DRX Demo"].fit is not None
    return fits


def _index(fits: GroupMethods, names: list[str]) -> torch.Tensor:
    table = group_table(fits)
    return torch.tensor([table["groups"].get(n, table["global_index"]) for n in names], dtype=torch.int64)


def _edge_logits(k: int, rng: np.random.Generator) -> np.ndarray:
    """Random logits, plus rows whose scores sit on 0, 1, a histogram edge (1/2) and 1/K exactly."""
    z = rng.normal(size=(400, k)) * 3.0
    special = np.zeros((4, k))
    special[0, 1] = -800.0  # p_1 underflows to 0: the first bin
    special[1, 1] = 800.0  # p_1 rounds to 1: the last bin, the top isotonic threshold's clip
    special[2, :2] = 5.0  # with K = 2 the score 1/2, an edge of an even number of bins
    return np.concatenate([z, special])  # special[3]: every class 1/K


@pytest.mark.parametrize("name", METHODS)
def test_the_map_equals_group_methods_probabilities(name: str) -> None:
    fits = _fits(name)
    k = fits.global_fit.n_classes
    rng = np.random.default_rng(5)
    z = _edge_logits(k, rng)
    names = rng.choice([*_GROUPS, "never seen"], size=z.shape[0]).tolist()
    with torch.no_grad():
        got = IndexedMethodCalibrator(nn.Identity(), fits)(torch.from_numpy(z), _index(fits, names))
    assert got.dtype == torch.float64  # the logits' dtype, as IndexedTemperatureScaler
    np.testing.assert_allclose(got.numpy(), fits.probabilities(z, names)[0], rtol=0, atol=1e-9)


def test_histogram_bins_are_right_closed_and_isotonic_takes_a_single_threshold() -> None:
    # four bins on the positive-class probability: a score of exactly 1/2 lies in (1/4, 1/2], bin 1,
    # and 0 in the first bin, as predict_histogram (netcal's rule)
    z = np.array([[0.0, 0.0], [0.0, -800.0], [0.0, 800.0], [0.0, 0.1]])
    hist = fit_group_methods("histogram", z, [0, 1, 1, 0], ["A"] * 4, min_group_size=1, n_bins=4)
    index = torch.zeros(4, dtype=torch.int64)
    got = IndexedMethodCalibrator(nn.Identity(), hist)(torch.from_numpy(z), index).numpy()
    np.testing.assert_array_equal(got, hist.probabilities(z, ["A"] * 4)[0])
    # one group whose rows all have the same score: its isotonic fit is one threshold, a constant map
    same = np.array([[0.0, 1.0]] * 4 + [[0.0, -1.0], [0.0, 2.0]])
    iso = fit_group_methods(
        "isotonic", same, [1, 0, 1, 1, 0, 1], ["same"] * 4 + ["other"] * 2, min_group_size=2
    )
    assert iso.fit_for("same").params["n_thresholds"].tolist() == [[1]]
    probe = np.array([[0.0, -3.0], [0.0, 1.0], [0.0, 4.0]])
    got = IndexedMethodCalibrator(nn.Identity(), iso)(torch.from_numpy(probe), _index(iso, ["same"] * 3))
    np.testing.assert_array_equal(got.numpy(), iso.probabilities(probe, ["same"] * 3)[0])
    np.testing.assert_array_equal(got.numpy()[:, 1], [0.75, 0.75, 0.75])  # 3 of the 4 rows are class 1


@pytest.mark.parametrize("fmt", list(FILES))
def test_every_method_loads_back_without_sitecal_and_gives_sitecals_probabilities(
    fmt: str, tmp_path: Path
) -> None:
    example = torch.randn(6, 1, 16, 16)
    x = torch.randn(5, 1, 16, 16)  # another batch size than the example
    names = ["Ysio Demo", "DRX Demo", "Tiny", "never seen", "DRX Demo"]  # the global slot included
    paths, expected, index = [], [], None
    for name in METHODS:
        fits = _fits(name)
        model = tiny_model(fits.global_fit.n_classes)
        path = tmp_path / name / FILES[fmt]
        table_path = export_calibrated(model, fits, path, fmt=fmt, example=example, facts={"per": "scanner"})
        table = json.loads(table_path.read_text())
        table = table["sitecal_calibration"] if fmt == "monai-bundle" else table
        assert table["method"] == name and table["per"] == "scanner"
        assert table["groups"] == {"DRX Demo": 0, "Tiny": 1, "Ysio Demo": 2} and table["global_index"] == 3
        assert table["sources"]["Tiny"] == "global_fallback"
        index = [table["groups"].get(n, table["global_index"]) for n in names]
        with torch.no_grad():
            logits = model(x).double().numpy()
        paths.append(path)
        expected.append(fits.probabilities(logits, names)[0])
    assert index is not None
    got = run_without_sitecal(fmt, paths, x, index, tmp_path)
    for name, g, e in zip(METHODS, got, expected, strict=True):
        assert g.shape == e.shape
        assert np.abs(g - e).max() < round_trip_tolerance(fmt), name


def test_the_table_names_the_method_and_the_fit() -> None:
    fits = _fits("matrix")
    table = group_table(fits, per="scanner")
    assert table["method"] == "matrix" and "temperatures" not in table
    assert table["sources"] == {"DRX Demo": "own", "Tiny": "global_fallback", "Ysio Demo": "own"}
    assert table["parameters"].startswith("in the calibration map's buffers, row i for group index i: W (")
    assert table["parameters_sha256"] != group_table(_fits("matrix", seed=3))["parameters_sha256"]
    temperature = group_table(_fits("temperature"))
    assert temperature["method"] == "temperature" and len(temperature["temperatures"]) == 4


def test_a_bootstrap_of_fits_is_refused() -> None:
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(60, 3)), rng.integers(0, 3, 60)
    fits = fit_group_methods("vector", z, y, ["A"] * 60, min_group_size=10, weights=np.ones((2, 60)))
    with pytest.raises(DataError, match=r"this GroupMethods holds R = 2 \(a refit bootstrap\)"):
        IndexedMethodCalibrator(nn.Identity(), fits)
