"""The ranks' pace: which rank the others wait for, from a rank report's own step times.

``RankMemory.step_s`` is each rank's own work per step (up to its gradient collective); the
rank with the most is the one every other rank waits for at the collective. Read by the
console's rank rows and ``memtui status``. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.domain import RankMemory


def slowest_rank(ranks: Iterable[RankMemory]) -> RankMemory | None:
    """The rank with the most own time per step (the lower rank on a tie); None unless at
    least two ranks reported one."""
    timed = [r for r in ranks if r.step_s is not None]
    return max(timed, key=lambda r: (r.step_s or 0.0, -r.rank)) if len(timed) > 1 else None
