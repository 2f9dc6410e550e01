"""``disk_full``: the next K checkpoint saves fail as on a full disk (``full_disk`` around
the save, the code its start-time environment variable uses)."""

from __future__ import annotations

import contextlib

from engine.chaos.kinds.disk_full import DiskFull
from engine.trainer.chaos.disk_full_injection import full_disk
from engine.trainer.chaos.performer import TrainerPerformer


class DiskFullPerformer(TrainerPerformer[DiskFull]):
    model = DiskFull
    failing = 0
    """Saves left that fail as on a full disk."""

    def start(self, request: DiskFull, step: int, chaos_id: str) -> str:
        self.failing += request.saves
        return f"the next {self.failing} saves fail as on a full disk"

    def saving(self) -> contextlib.AbstractContextManager[None]:
        if not self.failing:
            return contextlib.nullcontext()
        self.failing -= 1
        return full_disk(self.parts.engine)
