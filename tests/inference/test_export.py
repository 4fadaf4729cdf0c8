"""The calibrated model exported with the group as an integer: TorchScript, torch.export and ONNX files
and a MONAI bundle load back without sitecal (PyTorch, onnxruntime, MONAI's ConfigParser) and give
sitecal's own calibrated probabilities to 1e-6."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.inference._export_helpers import FILES, run_without_sitecal, tiny_model
from torch import nn

from sitecal.calibration import fit_group_temperatures
from sitecal.errors import DataError
from sitecal.inference import IndexedTemperatureScaler, export_calibrated, group_table
from sitecal.run.apply import apply_calibration


def _model() -> nn.Module:
    return tiny_model(3)


def _temperatures():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(300, 3)) * 2.5
    groups = rng.choice(["DRX Demo", "Ysio Demo", "Tiny"], size=300, p=[0.5, 0.45, 0.05])
    labels = rng.integers(0, 3, size=300)
    return fit_group_temperatures(logits, labels, groups, min_group_size=40)


@pytest.mark.parametrize("fmt", list(FILES))
def test_an_export_loads_back_without_sitecal_and_gives_sitecals_probabilities(
    fmt: str, tmp_path: Path
) -> None:
    model, temps = _model(), _temperatures()
    example = torch.randn(6, 1, 16, 16)
    path = tmp_path / FILES[fmt]
    table_path = export_calibrated(model, temps, path, fmt=fmt, example=example, facts={"per": "scanner"})  # type: ignore[arg-type]
    table = json.loads(table_path.read_text())
    if fmt == "monai-bundle":
        assert table_path == path / "configs" / "metadata.json"
        table = table["sitecal_calibration"]
    else:
        assert table_path == tmp_path / f"{FILES[fmt]}.groups.json"
    assert table["groups"] == {"DRX Demo": 0, "Tiny": 1, "Ysio Demo": 2} and table["global_index"] == 3
    assert table["per"] == "scanner"
    # another batch size than the example, each group and the global slot
    x = torch.randn(5, 1, 16, 16)
    names = ["Ysio Demo", "DRX Demo", "Tiny", "never seen", "DRX Demo"]
    index = [table["groups"].get(n, table["global_index"]) for n in names]
    (got,) = run_without_sitecal(fmt, [path], x, index, tmp_path)
    with torch.no_grad():
        logits = model(x).double().numpy()
    expected = apply_calibration(temps, logits, names)
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() < 1e-6


def test_a_bundle_states_its_inputs_outputs_and_calibration(tmp_path: Path) -> None:
    model, temps = _model(), _temperatures()
    source = {
        "version": "0.4.1",
        "changelog": {"0.4.1": "the provider's release"},
        "name": "Provider CXR",
        "authors": "Provider",
        "network_data_format": {"inputs": {"image": {"type": "image", "num_channels": 1}}, "outputs": {}},
    }
    facts = {"per": "scanner", "class_names": ["a", "b", "c"], "sitecal_version": "9.9", "run": "demo-1"}
    export_calibrated(
        model,
        temps,
        tmp_path / "bundle",
        fmt="monai-bundle",
        example=torch.randn(3, 1, 16, 16),
        facts=facts,
        source_metadata=source,
        preprocessing=[{"name": "NormalizeIntensity", "args": {}}],
    )
    meta = json.loads((tmp_path / "bundle" / "configs" / "metadata.json").read_text())
    version = meta["version"]
    assert version.startswith("0.4.1+sitecal.") and len(version) == len("0.4.1+sitecal.") + 8
    assert list(meta["changelog"]) == [version, "0.4.1"]
    assert "per scanner" in meta["changelog"][version] and "demo-1" in meta["changelog"][version]
    assert meta["authors"] == "Provider" and meta["name"] == "Provider CXR (temperature-scaled per scanner)"
    inputs = meta["network_data_format"]["inputs"]
    assert inputs["image"] == {"type": "image", "num_channels": 1}  # the provider's description kept
    assert inputs["group_index"]["dtype"] == "int64" and inputs["group_index"]["value_range"] == [0, 3]
    pred = meta["network_data_format"]["outputs"]["pred"]
    assert pred["channel_def"] == {"0": "a", "1": "b", "2": "c"} and pred["value_range"] == [0, 1]
    calibration = meta["sitecal_calibration"]
    assert calibration["global_index"] == 3 and calibration["per"] == "scanner"
    assert calibration["temperatures"] == [temps.groups[g].temperature for g in sorted(temps.groups)] + [
        temps.global_fit.temperature
    ]
    config = json.loads((tmp_path / "bundle" / "configs" / "inference.json").read_text())
    assert config["calibration"]["temperatures"] == calibration["temperatures"]
    assert [t["_target_"] for t in config["preprocessing"]["transforms"]] == [
        "NormalizeIntensity",
        "EnsureType",
    ]
    assert source["version"] == "0.4.1" and "sitecal_calibration" not in source  # the source is not edited
    # a folder that is not empty is not written into
    with pytest.raises(DataError, match="not an empty folder"):
        export_calibrated(
            model, temps, tmp_path / "bundle", fmt="monai-bundle", example=torch.randn(2, 1, 8, 8)
        )


def test_without_onnxruntime_the_message_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a)
    )
    with pytest.raises(
        DataError, match=r'needs onnxruntime, which is not installed: pip install "sitecal\[onnx\]"'
    ):
        export_calibrated(
            _model(), _temperatures(), tmp_path / "m.onnx", fmt="onnx", example=torch.randn(2, 1, 8, 8)
        )
    assert not (tmp_path / "m.onnx").exists()


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
    with pytest.raises(
        DataError, match="--format 'tflite': give one of torchscript, torch-export, onnx, monai-bundle"
    ):
        export_calibrated(
            _model(),
            _temperatures(),
            tmp_path / "m",
            fmt="tflite",
            example=torch.randn(2, 1, 8, 8),  # type: ignore[arg-type]
        )
