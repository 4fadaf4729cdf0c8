"""A tiny network for the logit cache tests: one linear layer, its output scaled by an argument."""

from __future__ import annotations

import torch


class ScaledNet(torch.nn.Module):
    """``scale * Linear(4, 2)(x)``: ``scale`` changes every logit and no weight; ``note`` changes nothing."""

    def __init__(self, scale: float = 1.0, note: str = "") -> None:
        super().__init__()
        self.note = note
        self.scale = scale
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.fc(x)
