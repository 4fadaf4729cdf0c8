"""The calibrated model exported with the group as an integer: TorchScript and torch.export files load
back (without sitecal) and give sitecal's own calibrated probabilities to 1e-6."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from sitecal.apply import apply_calibration
from sitecal.calibration import fit_group_temperatures
from sitecal.errors import DataError
from sitecal.inference import IndexedTemperatureScaler, export_calibrated, group_table


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)
    ).eval()


def _temperatures():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(300, 3)) * 2.5
    groups = rng.choice(["DRX Demo", "Ysio Demo", "Tiny"], size=300, p=[0.5, 0.45, 0.05])
    labels = rng.integers(0, 3, size=300)
    return fit_group_temperatures(logits, labels, groups, min_group_size=40)


@pytest.mark.parametrize("fmt", ["torchscript", "torch-export"])
def test_an_export_loads_back_without_sitecal_and_gives_sitecals_probabilities(
    fmt: str, tmp_path: Path
) -> None:
    model, temps = _model(), _temperatures()
    example = torch.randn(6, 1, 16, 16)
    path = tmp_path / ("model.ts" if fmt == "torchscript" else "model.pt2")
    table_path = export_calibrated(model, temps, path, fmt=fmt, example=example, facts={"per": "scanner"})
    table = json.loads(table_path.read_text())
    assert table["groups"] == {"DRX Demo": 0, "Tiny": 1, "Ysio Demo": 2} and table["global_index"] == 3
    assert table["per"] == "scanner"
    # another batch size than the example, each group and the global slot
    x = torch.randn(5, 1, 16, 16)
    names = ["Ysio Demo", "DRX Demo", "Tiny", "never seen", "DRX Demo"]
    index = [table["groups"].get(n, table["global_index"]) for n in names]
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "index.npy", np.array(index, dtype=np.int64))
    # loaded in a fresh interpreter where sitecal cannot be imported
    script = f"""
import sys
sys.modules["sitecal"] = None
import numpy as np, torch
x = torch.from_numpy(np.load({str(tmp_path / "x.npy")!r}))
index = torch.from_numpy(np.load({str(tmp_path / "index.npy")!r}))
if {fmt!r} == "torchscript":
    module = torch.jit.load({str(path)!r})
else:
    module = torch.export.load({str(path)!r}).module()
np.save({str(tmp_path / "probs.npy")!r}, module(x, index).detach().numpy())
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=300)
    got = np.load(tmp_path / "probs.npy")
    with torch.no_grad():
        logits = model(x).double().numpy()
    expected = apply_calibration(temps, logits, names)
    assert np.abs(got - expected).max() < 1e-6


def test_the_indexed_scaler_matches_the_named_one() -> None:
    model, temps = _model(), _temperatures()
    x = torch.randn(4, 1, 16, 16)
    table = group_table(temps)
    names = ["Tiny", "Ysio Demo", "elsewhere", "DRX Demo"]
    index = torch.tensor([table["groups"].get(n, table["global_index"]) for n in names])
    with torch.no_grad():
        got = IndexedTemperatureScaler(model, temps)(x, index).double().numpy()
        logits = model(x).double().numpy()
    np.testing.assert_allclose(got, apply_calibration(temps, logits, names), rtol=0, atol=1e-6)


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="--format 'onnx'"):
        export_calibrated(
            _model(),
            _temperatures(),
            tmp_path / "m",
            fmt="onnx",
            example=torch.randn(2, 1, 8, 8),  # type: ignore[arg-type]
        )
