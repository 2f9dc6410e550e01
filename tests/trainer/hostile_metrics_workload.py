"""A workload whose forward reports every kind of bad metric beside a good one: a NaN, a
string, 40 names (past the limit) and a 200-character name. The run must train on, keep
what is good and warn once about each bad one."""

from __future__ import annotations

import torch
from torch import nn

from engine.config.run_config import RunConfig
from engine.trainer.workloads.workload import Workload

EXTRA_NAMES = 40
LONG_NAME = "n" * 200


class Hostile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, object]]:
        # x: (micro_batch, 4), y: (micro_batch, 1) float32; mean squared error
        loss = nn.functional.mse_loss(self.net(x), y)
        named: dict[str, object] = {
            "good": loss.detach() * 0 + 1.0,  # 1.0 exactly, as a 0-dim tensor
            "nan": torch.tensor(float("nan")),
            "text": "high",
            LONG_NAME: 1.0,
            **{f"extra_{i:02d}": float(i) for i in range(EXTRA_NAMES)},
        }
        return loss, named


def build(config: RunConfig) -> Workload:
    def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step * 1_009 + micro)
        x = torch.randn(micro_batch, 4, generator=gen)
        return x, x.sum(dim=1, keepdim=True)

    return Workload(model=Hostile(), batch=batch, tokens_per_sample=1)
