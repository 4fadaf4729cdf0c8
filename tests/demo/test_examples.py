"""The demo's training and check scripts (``examples/demo``) run as ``python examples/demo/<script>.py``.

Tiny settings: what is checked here is that the scripts run from their folder against the installed
package and write what they say; the model they make is checked in test_demo_model.py and test_ct_demo.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import runpy
import sys
from pathlib import Path

import pytest
import torch

from sitecal.demo import DemoNet, load_demo_model
from sitecal.demo.ct import DemoNet3D, load_demo_ct_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "demo"


def _run_script(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``python examples/demo/<name> ARGS`` in this process (its own folder first on the import path)."""
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *args])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert done.value.code == 0


@pytest.mark.parametrize(
    ("flags", "n_train", "model", "load"),
    [([], 64, DemoNet, load_demo_model), (["--ct"], 32, DemoNet3D, load_demo_ct_model)],
    ids=["radiograph", "ct"],
)
def test_train_script_writes_weights_and_card(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], n_train: int, model: type, load: object
) -> None:
    out = tmp_path / "weights.safetensors"
    settings = ["--n-train", str(n_train), "--n-val", "16", "--epochs", "1", "--threads", "1", "--seed", "3"]
    threads = torch.get_num_threads()
    _run_script("train.py", [*flags, "--out", str(out), *settings], monkeypatch)
    assert torch.get_num_threads() == threads  # restored
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["weights"] == out.name
    assert card["weights_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert {k: card["training"][k] for k in ("seed", "n_train", "n_val", "epochs", "threads")} == {
        "seed": 3,
        "n_train": n_train,
        "n_val": 16,
        "epochs": 1,
        "threads": 1,
    }
    assert isinstance(load(out), model)  # type: ignore[operator]


def test_verify_script_prints_the_per_scanner_table(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        _run_script("verify.py", ["--n-studies", "60", "--seed", "5"], monkeypatch)
    table = caplog.text[caplog.text.index("scanner ") :].splitlines()
    assert "held ECE before" in table[0] and table[1].startswith("Ysio Demo (ref)")
    assert len([line for line in table if "Demo" in line]) == 5
