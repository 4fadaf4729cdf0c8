from __future__ import annotations

import numpy as np
import pytest
import torch

from sitecal.calibration import fit_group_temperatures
from sitecal.errors import DataError
from sitecal.inference import GroupTemperatureScaler


@pytest.fixture
def temps():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    z = rng.normal(size=(600, 3))
    z[np.arange(600), y] += 1.0
    scale = np.where(np.arange(600) < 300, 2.0, 6.0)[:, None]
    sites = np.where(np.arange(600) < 300, "A", "B")
    return fit_group_temperatures(z * scale, y, sites)


class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.layer(x))


def test_forward_divides_by_group_temperature(temps) -> None:  # type: ignore[no-untyped-def]
    model = _Linear().eval()
    scaler = GroupTemperatureScaler(model, temps)
    x = torch.randn(4, 4)
    groups = ["A", "B", "new site", "A"]
    out = scaler(x, groups)
    expected_t = torch.tensor(temps.temperatures_for(np.array(groups)), dtype=torch.float32)
    assert torch.allclose(out, model(x) / expected_t[:, None])
    assert out.dtype == torch.float32
    np.testing.assert_allclose(
        scaler.calibrate_logits(model(x).detach().numpy(), groups), out.detach().numpy(), rtol=1e-6
    )


def test_predict_proba_restores_training_mode(temps) -> None:  # type: ignore[no-untyped-def]
    model = _Linear().train()
    scaler = GroupTemperatureScaler(model, temps)
    x = torch.randn(5, 4)
    probs = scaler.predict_proba(x, ["A"] * 5)
    assert model.training  # restored
    assert torch.allclose(probs.sum(dim=1), torch.ones(5))
    # eval mode while predicting: dropout is off, so two calls agree exactly
    assert torch.equal(probs, scaler.predict_proba(x, ["A"] * 5))
    assert not probs.requires_grad


def test_single_logit_model(temps) -> None:  # type: ignore[no-untyped-def]
    scaler = GroupTemperatureScaler(torch.nn.Identity(), temps)
    z = torch.tensor([1.0, -2.0])
    out = scaler(z, ["A", "B"])
    t = temps.temperatures_for(np.array(["A", "B"]))
    assert torch.allclose(out, z / torch.tensor(t, dtype=torch.float32))
    assert scaler.predict_proba(z, ["A", "B"]).shape == (2, 2)
    assert scaler.calibrate_logits(np.array([1.0, -2.0]), ["A", "B"]).shape == (2,)


def test_buffer_follows_module_dtype_device(temps) -> None:  # type: ignore[no-untyped-def]
    scaler = GroupTemperatureScaler(torch.nn.Identity(), temps)
    assert "group_temperature" not in scaler.state_dict()
    out = scaler(torch.zeros(2, 3, dtype=torch.float64) + 1.0, ["A", "B"])
    assert out.dtype == torch.float64


def test_group_count_mismatch(temps) -> None:  # type: ignore[no-untyped-def]
    scaler = GroupTemperatureScaler(torch.nn.Identity(), temps)
    with pytest.raises(DataError, match="must have shape \\(2,\\), one group name per row"):
        scaler(torch.zeros(2, 3), ["A"])
    with pytest.raises(DataError, match="must be a GroupTemperatures"):
        GroupTemperatureScaler(torch.nn.Identity(), {"A": 1.0})  # type: ignore[arg-type]
