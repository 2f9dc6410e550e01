"""``hang``: the next step blocks for ``seconds`` inside the controlled step (before its
forward), on every rank or on the one rank the request names: the other ranks then wait
for it in the step's collectives, as behind a real hung rank. Not interruptible, as a hung
collective is not: a stop waits for it or kills it after its grace."""

from __future__ import annotations

import time
from typing import Any

import torch

from engine.chaos.kind import EVERY_RANK
from engine.chaos.kinds.hang import Hang
from engine.trainer.chaos.performer import StepFn, TrainerPerformer
from engine.trainer.workloads.workload import BatchFn


class HangPerformer(TrainerPerformer[Hang]):
    model = Hang
    seconds: float | None = None
    """The next step blocks this long; None: no hang in force."""

    def start(self, request: Hang, step: int, chaos_id: str) -> str:
        world, rank = self.parts.memory.ranks.world, self.parts.memory.ranks.rank
        on = "" if request.rank == EVERY_RANK else f" on rank {request.rank}"
        if request.rank >= world:
            return f"no rank {request.rank} among {world}: nothing done"
        if request.rank in (EVERY_RANK, rank):
            self.seconds = request.seconds
        return f"the next step blocks for {request.seconds:g} s{on}"

    def in_step(self, train_step: StepFn, step: int) -> StepFn:
        if self.seconds is None:
            return train_step
        blocks = [self.seconds]  # once, not again if an OOM redoes the window
        self.seconds = None

        def hung(engine: Any, batch: BatchFn, at: int) -> torch.Tensor:
            if blocks:
                time.sleep(blocks.pop())
            return train_step(engine, batch, at)

        return hung
