"""A user workload that reports a metric of its own: an MLP telling three spirals apart.

Run it with ``memtui run examples/spiral.toml``. The forward returns the loss and the
workload's own scalars, ``(loss, {"accuracy": ...})``: memtui averages each over the step's
micro-batches (and the ranks), stores it per step and shows it in the console's Metrics
panel, ``memtui status --json``, ``memtui report`` and ``memtui export`` (docs/your-model.md:
"Training your own model"). Keep a metric a 0-dim tensor: it stays on the device until the step is
reported, so it costs no host sync per micro-batch.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from engine.config.run_config import RunConfig
from engine.trainer.workloads.workload import Workload

CLASSES = 3


class SpiralClassifier(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, CLASSES)
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # x: (micro_batch, 2) float32 points; y: (micro_batch,) int64 class of each
        logits = self.net(x)
        accuracy = (logits.argmax(dim=-1) == y).float().mean()  # a fraction, 0-dim, on the device
        return nn.functional.cross_entropy(logits, y), {"accuracy": accuracy}


def build(config: RunConfig) -> Workload:
    def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step * 1_009 + micro)
        y = torch.randint(0, CLASSES, (micro_batch,), generator=gen)
        radius = torch.rand(micro_batch, generator=gen)  # 0..1 along the arm
        angle = radius * 4.0 + y * (2 * math.pi / CLASSES) + 0.2 * torch.randn(micro_batch, generator=gen)
        x = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
        return x, y

    return Workload(model=SpiralClassifier(), batch=batch, tokens_per_sample=1)
