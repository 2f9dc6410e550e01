"""The one memory scale and level vocabulary: a peak's share of the usable room, judged ok,
warn or critical.

The usable room is the budget minus the measured baseline no micro-batch changes (model
states, the CUDA context; on the CPU the process's resident torch), so a share means the
same on a GPU and on a CPU. The memory controller, the memory alert and the console all
judge memory with these two functions and the thresholds of the run's ``memory`` section
(``warn``, ``critical``, ``hysteresis``), so they agree on the level of one reading.
"""

from __future__ import annotations

from typing import Literal

MemoryLevel = Literal["ok", "warn", "critical"]
"""The memory levels, in order; ``warn`` as the config key ``memory.warn`` names it (and as
``memory_level`` events have always stored it)."""


def room_share(used: int, limit: int, baseline: int | None, fragmentation: int = 0) -> float:
    """``used`` bytes' part above ``baseline``, with ``fragmentation`` bytes (reserved but not
    usable, which the budget's cap also counts), as a fraction of the usable room
    ``limit - baseline`` (of ``limit`` when the baseline is unknown); inf when there is no
    room (a baseline at or over the limit: critical, as the controller has always judged it)."""
    baseline = baseline or 0
    room = limit - baseline
    return (used + fragmentation - baseline) / room if room > 0 else float("inf")


def memory_level(
    share: float, warn: float, critical: float, hysteresis: float = 0.0, previous: MemoryLevel = "ok"
) -> MemoryLevel:
    """The level of ``share`` (of the usable room): a level is entered at its threshold and,
    coming from ``previous``, left only below the threshold minus ``hysteresis``."""
    if share >= critical or (previous == "critical" and share >= critical - hysteresis):
        return "critical"
    if share >= warn or (previous != "ok" and share >= warn - hysteresis):
        return "warn"
    return "ok"
