"""A workload whose metrics tell the ranks apart: ``rank`` is the rank's own number (the mean
over two agreeing ranks is 0.5), and from its ``DIVERGE_AFTER``-th forward on, rank 1 also
reports a name rank 0 does not (the ranks no longer agree: rank 0's values alone)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from engine.config.run_config import RunConfig
from engine.trainer.workloads.workload import Workload

DIVERGE_AFTER = 5
"""Forwards (one per step: no gradient accumulation) with the same names on both ranks."""


class RankScored(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.forwards = 0

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, object]]:
        # x: (micro_batch, 4), y: (micro_batch, 1) float32; mean squared error
        self.forwards += 1
        rank = dist.get_rank() if dist.is_initialized() else 0
        named: dict[str, object] = {"rank": torch.tensor(float(rank))}
        if rank == 1 and self.forwards > DIVERGE_AFTER:
            named["rank_1_only"] = 1.0
        return nn.functional.mse_loss(self.net(x), y), named


def build(config: RunConfig) -> Workload:
    def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step * 1_009 + micro)
        x = torch.randn(micro_batch, 4, generator=gen)
        return x, x.sum(dim=1, keepdim=True)

    return Workload(model=RankScored(), batch=batch, tokens_per_sample=1)
