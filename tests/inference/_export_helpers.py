"""What the export tests share: a tiny network, each format's file name, and loading a file where sitecal
cannot be imported (a fresh interpreter, as a deployment would load it)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

FILES = {
    "torchscript": "model.ts",
    "torch-export": "model.pt2",
    "onnx": "model.onnx",
    "monai-bundle": "bundle",
}
# How each format is loaded where sitecal cannot be imported: as a deployment would.
_LOAD = {
    "torchscript": "module = torch.jit.load(path)",
    "torch-export": "module = torch.export.load(path).module()",
    "onnx": """import onnxruntime
session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
def module(x, g):
    return torch.from_numpy(session.run(None, {"image": x.numpy(), "group_index": g.numpy()})[0])""",
    "monai-bundle": """from monai.bundle import ConfigParser
parser = ConfigParser()
parser.read_meta(path + "/configs/metadata.json")
parser.read_config(path + "/configs/inference.json")
parser["bundle_root"] = path
module = parser.get_parsed_content("infer")""",
}


def tiny_model(n_classes: int = 3) -> nn.Module:
    """A seeded one-channel CNN: images (B, 1, H, W) -> logits (B, n_classes)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, n_classes)
    ).eval()


def run_without_sitecal(
    fmt: str, paths: Sequence[Path], x: torch.Tensor, index: Sequence[int], work: Path
) -> list[np.ndarray]:
    """Each exported file of ``paths`` (format ``fmt``) on ``(x, index)``, in one fresh interpreter where
    ``import sitecal`` fails: the probabilities each gives, in order."""
    np.save(work / "x.npy", x.numpy())
    np.save(work / "index.npy", np.array(index, dtype=np.int64))
    outputs = [work / f"probs-{i}.npy" for i in range(len(paths))]
    body = "".join(
        f"path = {str(p)!r}\n{_LOAD[fmt]}\nnp.save({str(o)!r}, module(x, index).detach().numpy())\n"
        for p, o in zip(paths, outputs, strict=True)
    )
    script = f"""
import sys
sys.modules["sitecal"] = None
import numpy as np, torch
x = torch.from_numpy(np.load({str(work / "x.npy")!r}))
index = torch.from_numpy(np.load({str(work / "index.npy")!r}))
{body}"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return [np.load(o) for o in outputs]
