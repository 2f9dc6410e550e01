"""The fragmentation rule's counting: how long the allocator's unusable share has stayed
high, so ``AlertRules`` fires only on a lasting condition, not one odd step.

Fragmentation here is the CUDA allocator's inactive split bytes (``mem_fragmentation``:
reserved blocks split by earlier tensors, unused now and not freeable by ``empty_cache``)
as a share of its reserved bytes. It fires after ``FRAGMENTATION_STEPS`` steps in a row
at or above ``fragmentation_share``, and clears after as many steps below the share minus
the hysteresis margin. The CPU reports no fragmentation: nothing to judge. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.domain import TelemetrySample

FRAGMENTATION_STEPS = 20
"""Consecutive steps at or over the share before the alert, and under it (less the
hysteresis) before it clears: a pattern of allocations, not one odd step."""


@dataclass(frozen=True)
class Reading:
    share: float
    """Fragmented bytes / reserved bytes at this step."""
    firing: bool
    clear: bool


@dataclass
class FragmentationCount:
    share: float
    """The alert's threshold (a share of the reserved bytes)."""
    steps: int
    """Consecutive steps over it to fire, and under it (less the margin) to clear."""
    hysteresis: float
    over: int = 0
    under: int = 0

    def note(self, sample: TelemetrySample) -> Reading | None:
        """This step's share and whether the rule fires or clears; None without a reading."""
        fragmented, reserved = sample.mem_fragmentation, sample.mem_reserved
        if fragmented is None or reserved <= 0:
            return None
        share = fragmented / reserved
        self.over = self.over + 1 if share >= self.share else 0
        self.under = self.under + 1 if share < self.share - self.hysteresis else 0
        return Reading(share, self.over >= self.steps, self.under >= self.steps)
