"""What the controller remembers of each micro-batch it ran: measured samples/s, and when
it last failed there. Torch-free, pure and immutable (a new history per update).

- rates: the last ``RATE_WINDOW`` samples/s measured at a size (wall time of whole optimizer
  steps, the first step after a change left out); its median is the size's rate, so one
  slow step (a checkpoint, another tenant) does not move it.
- failures: the optimizer step at which a size last failed (an OOM, a warn or critical
  shrink away from it, or a step down to a size measured faster) and the usable room
  (bytes) then. A size that failed is not tried again within ``retry_after_steps`` unless
  the room has grown since by more than the hysteresis (what pushed it out has gone, e.g.
  another tenant's memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median

RATE_WINDOW = 8  # rates kept per micro-batch (optimizer steps)
MIN_RATES = 3  # rates a size needs before its median decides anything


@dataclass(frozen=True)
class SizeHistory:
    rates: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    """Micro-batch -> the last measured samples/s there, oldest first."""
    failures: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    """Micro-batch -> (optimizer step, usable room in bytes) of its last failure."""

    def with_rate(self, micro_batch: int, samples_per_s: float) -> SizeHistory:
        kept = (*self.rates.get(micro_batch, ())[-(RATE_WINDOW - 1) :], samples_per_s)
        return SizeHistory({**self.rates, micro_batch: kept}, self.failures)

    def with_failure(self, micro_batch: int, step: int, room: int) -> SizeHistory:
        return SizeHistory(self.rates, {**self.failures, micro_batch: (step, room)})

    def rate(self, micro_batch: int) -> float | None:
        """Median samples/s at ``micro_batch``; None with fewer than MIN_RATES readings."""
        rates = self.rates.get(micro_batch, ())
        return median(rates) if len(rates) >= MIN_RATES else None

    def faster(self, a: int, b: int, margin: float) -> bool:
        """True when ``a`` was measured faster than ``b`` by more than ``margin`` (a fraction)."""
        rate_a, rate_b = self.rate(a), self.rate(b)
        return rate_a is not None and rate_b is not None and rate_a > rate_b * (1 + margin)

    def blocked(self, micro_batch: int, step: int, room: int, retry_after: int, hysteresis: float) -> bool:
        """True while ``micro_batch`` failed within ``retry_after`` steps and the room has
        not grown since by more than ``hysteresis`` (a fraction of that room)."""
        failure = self.failures.get(micro_batch)
        if failure is None:
            return False
        failed_step, failed_room = failure
        if step - failed_step >= retry_after:
            return False
        return room <= failed_room + hysteresis * max(failed_room, 0)
