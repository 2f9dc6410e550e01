"""Every rank's memory and pace, gathered for rank 0's telemetry every few steps.

docs/architecture.md: other ranks report what only they know (their memory) through collectives every
few steps, never every step. One all-gather of five int64 per rank; rank 0's next step
report carries the list (``TelemetrySample.ranks``) and the console draws a row per rank.

The pace is each rank's own work per step: from the step's start to the moment it reaches
its gradient collective (the boundary micro-batch's backward, where DeepSpeed all-reduces).
A rank's wall time per step is the same on every rank (the collective waits for the slowest),
so only this part tells which rank the others wait for. It includes the last backward's
compute only up to the collective, and under ZeRO-3 the forward's parameter gathers.
"""

from __future__ import annotations

import time

from engine.domain import RankMemory
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.ranks.rank_group import RankGroup

US_PER_S = 1_000_000  # the pace travels as int64 microseconds in the memory all-gather
NO_PACE = -1  # a rank with no step measured since its last report


class RankPace:
    """This rank's own seconds per step, summed between two reports."""

    def __init__(self) -> None:
        self._started: float | None = None
        self._reached: float | None = None
        self._total_s = 0.0
        self._steps = 0

    def start(self) -> None:
        """A step begins (before any delay chaos adds to it)."""
        self._started, self._reached = time.perf_counter(), None

    def at_collective(self) -> None:
        """The step reaches its gradient collective (the last call wins: an OOM redoes it)."""
        self._reached = time.perf_counter()

    def finish(self) -> None:
        """The step completed; without a mark (no collective seen) its wall time counts."""
        if self._started is None:
            return
        end = self._reached if self._reached is not None else time.perf_counter()
        self._total_s += end - self._started
        self._steps += 1
        self._started = None

    def take_us(self) -> int:
        """Mean microseconds per step since the last call (NO_PACE: none), and start afresh."""
        mean = NO_PACE if not self._steps else round(self._total_s / self._steps * US_PER_S)
        self._total_s, self._steps = 0.0, 0
        return mean


def exchange_memory(group: RankGroup, probe: MemoryProbe, pace: RankPace) -> list[RankMemory]:
    """A collective: every rank's (allocated, reserved, peak, capacity) in bytes and its mean
    own step time, rank order."""
    reading = probe.read()
    mine = [reading.allocated, reading.reserved, reading.peak, reading.capacity, pace.take_us()]
    rows = group.gather_ints(mine)
    return [
        RankMemory(
            rank=r, allocated=a, reserved=res, peak=p, capacity=c, step_s=None if us < 0 else us / US_PER_S
        )
        for r, (a, res, p, c, us) in enumerate(rows)
    ]
