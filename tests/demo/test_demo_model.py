from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from _local_metrics import ece as _ece  # examples/demo (tests/demo/conftest.py)
from _radiograph import TrainingConfig, model_inputs, train_model
from safetensors import safe_open

from sitecal.demo import (
    CLASS_NAMES,
    DEMO_TRANSFORMS,
    REFERENCE_SCANNER,
    SCANNERS,
    DemoNet,
    demo_metadata,
    demo_metadata_path,
    demo_weights_path,
    load_demo_model,
    synthesize_stored,
)
from sitecal.errors import DataError, ModelError


def test_shipped_weights_are_small_safetensors_not_pickle() -> None:
    path = demo_weights_path()
    raw = path.read_bytes()
    assert 0 < len(raw) < 1_000_000
    assert not raw.startswith(b"PK")  # not a torch zip archive (which would hold a pickle)
    # safetensors: u64 little-endian header length, a JSON header, then exactly the tensor bytes.
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert all(v["dtype"] in ("F32", "I64") for v in tensors.values())
    assert 8 + header_len + max(v["data_offsets"][1] for v in tensors.values()) == len(raw)
    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(DemoNet().state_dict())


def test_model_card_matches_weights_and_protocol() -> None:
    card = demo_metadata()
    assert demo_metadata_path().name == "demo_cnn.json"
    assert card["weights_sha256"] == hashlib.sha256(demo_weights_path().read_bytes()).hexdigest()
    assert card["class_names"] == list(CLASS_NAMES)
    assert card["input_shape"] == [1, 64, 64]
    assert card["transforms"] == [dict(t) for t in DEMO_TRANSFORMS]
    training = card["training"]
    assert training["reference_scanner"]["key"] == REFERENCE_SCANNER
    assert training["reference_scanner"]["model_name"] == "Ysio Demo"
    assert 0.85 <= training["val_accuracy"] <= 0.92
    assert training["val_ece"] <= 0.05


def test_load_demo_model_is_eval_and_forward_shape() -> None:
    model = load_demo_model()
    assert isinstance(model, DemoNet) and not model.training
    n_params = sum(p.numel() for p in model.parameters())
    assert 10_000 < n_params < 60_000
    with torch.no_grad():
        assert model(torch.zeros(5, 1, 64, 64)).shape == (5, 3)


def test_load_demo_model_rejects_a_non_safetensors_file(tmp_path: Path) -> None:
    bad = tmp_path / "weights.safetensors"
    bad.write_bytes(b"\x80\x04not a safetensors file")
    with pytest.raises(ModelError, match="Cannot read the demo weights"):
        load_demo_model(bad)
    with pytest.raises(ModelError, match="Cannot read"):
        load_demo_model(tmp_path / "missing.safetensors")


def test_model_is_calibrated_on_the_reference_and_over_confident_elsewhere() -> None:
    # In memory, 400 images per scanner (the DICOM path is proven equal in test_demo_presentation).
    model = load_demo_model()
    for scanner in SCANNERS:
        stored, labels = synthesize_stored(400, scanner, np.random.default_rng(99))
        with torch.no_grad():
            probs = torch.softmax(model(model_inputs(stored, scanner)).double(), 1).numpy()
        accuracy = float((probs.argmax(1) == labels).mean())
        confidence = float(probs.max(1).mean())
        ece = _ece(probs, labels)
        if scanner.key == REFERENCE_SCANNER:
            assert 0.83 <= accuracy <= 0.93 and ece <= 0.06, (scanner.key, accuracy, ece)
        else:
            assert accuracy >= 0.6, (scanner.key, accuracy)
            assert confidence - accuracy >= 0.04 and ece >= 0.06, (scanner.key, accuracy, confidence, ece)


def test_training_is_deterministic_and_restores_torch_settings() -> None:
    config = TrainingConfig(seed=1, n_train=96, n_val=32, epochs=1, batch_size=32, threads=1)
    threads = torch.get_num_threads()
    a = train_model(config)
    b = train_model(config)
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    assert not a.model.training


def test_training_config_is_validated() -> None:
    with pytest.raises(DataError, match="n_train"):
        train_model(TrainingConfig(n_train=10, batch_size=64))
