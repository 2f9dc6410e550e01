"""A workload whose loss overflows fp16 from step ``OVERFLOW_FROM`` on (for the loss-scale
floor tests): the built-in model's loss times 1e6, so its fp16 gradients are inf."""

from __future__ import annotations

import torch

from engine.config.run_config import RunConfig
from engine.trainer.workloads.workload import Workload, builtin_workload

OVERFLOW_FROM = 3


class Overflowing(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, y: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        loss = self.inner(x, y)
        return loss * 1e6 if int(step[0]) >= OVERFLOW_FROM else loss


def build(config: RunConfig) -> Workload:
    base = builtin_workload(config)

    def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, ...]:
        x, y = base.batch(step, micro, micro_batch)
        return x, y, torch.full((micro_batch,), step)

    return Workload(model=Overflowing(base.model), batch=batch, tokens_per_sample=base.tokens_per_sample)
