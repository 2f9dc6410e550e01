"""Every rank's memory, gathered for rank 0's telemetry every few steps.

DESIGN.md: other ranks report what only they know (their memory) through collectives every
few steps, never every step. One all-gather of four int64 per rank; rank 0's next step
report carries the list (``TelemetrySample.ranks``) and the console draws a row per rank.
"""

from __future__ import annotations

from engine.domain import RankMemory
from engine.trainer.memory_probe import MemoryProbe
from engine.trainer.rank_group import RankGroup


def exchange_memory(group: RankGroup, probe: MemoryProbe) -> list[RankMemory]:
    """A collective: every rank's (allocated, reserved, peak, capacity) in bytes, rank order."""
    reading = probe.read()
    rows = group.gather_ints([reading.allocated, reading.reserved, reading.peak, reading.capacity])
    return [
        RankMemory(rank=r, allocated=a, reserved=res, peak=p, capacity=c)
        for r, (a, res, p, c) in enumerate(rows)
    ]
