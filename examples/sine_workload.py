"""A user workload for memtui: a small MLP learning y = sin(x) from noisy samples.

Run it with ``memtui run examples/sine.toml``. The contract is in docs/your-model.md ("Training
your own model"): ``build(config) -> Workload`` with a model whose ``forward(*batch)`` returns
a scalar loss, and ``batch(step, micro, micro_batch)`` that is a pure function of its
arguments and the run's seed, so a resumed run sees the data an uninterrupted one would.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from engine.config.run_config import RunConfig
from engine.trainer.workloads.workload import Workload


class SineRegressor(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(1, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1)
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # x, y: (micro_batch, 1) float32; mean squared error as the scalar loss
        return nn.functional.mse_loss(self.net(x), y)


def build(config: RunConfig) -> Workload:
    def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step * 1_009 + micro)
        x = (torch.rand(micro_batch, 1, generator=gen) * 2 - 1) * math.pi  # uniform in [-pi, pi)
        y = torch.sin(x) + 0.05 * torch.randn(micro_batch, 1, generator=gen)
        return x, y

    return Workload(model=SineRegressor(), batch=batch, tokens_per_sample=1)
