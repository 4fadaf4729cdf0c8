"""The demo model, slowed down, so a test can kill a run while inference is under way."""

from __future__ import annotations

import time

import torch

from sitecal.demo.model import DemoNet


class SlowDemoNet(DemoNet):
    """:class:`DemoNet` with the same weights and outputs, 80 ms slower per batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.08)
        return super().forward(x)
