"""What the controller remembers of each micro-batch it ran: measured samples/s, and when
it last failed there. Torch-free, pure and immutable (a new history per update).

- rates: the last ``RATE_WINDOW`` samples/s measured at a size (wall time of whole optimizer
  steps, the first step after a change left out); its median is the size's rate, so one
  slow step (a checkpoint, another tenant) does not move it.
- measured: the optimizer step of each size's newest reading. Two sizes are compared only
  when both were measured within ``FRESH_STEPS`` of now: the A/B around a change of size,
  never a reading from long ago set against one taken under other load. In a 100,000-step
  endurance run on 2 cores, each restart's spare warm-up slowed the current size's steps
  for a few seconds, and set against a smaller size's readings from thousands of steps
  before, it stepped the micro-batch down (8 to 4 to 2: steps of 45 ms became 80-155 ms).
- failures: the optimizer step at which a size last failed (an OOM, a warn or critical
  shrink away from it, or a step down to a size measured faster) and the usable room
  (bytes) then. A size that failed is not tried again within ``retry_after_steps`` unless
  the room has grown since by more than the hysteresis (what pushed it out has gone, e.g.
  another tenant's memory).

``as_json``/``from_json`` carry it across trainer attempts (in the run's memory.json): a
restart knows which sizes failed and how fast each ran, instead of learning it again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

RATE_WINDOW = 8  # rates kept per micro-batch (optimizer steps)
MIN_RATES = 3  # rates a size needs before its median decides anything
FRESH_STEPS = 100  # optimizer steps a size's newest reading stays comparable with another's


@dataclass(frozen=True)
class SizeHistory:
    rates: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    """Micro-batch -> the last measured samples/s there, oldest first."""
    failures: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    """Micro-batch -> (optimizer step, usable room in bytes) of its last failure."""
    measured: Mapping[int, int] = field(default_factory=dict)
    """Micro-batch -> the optimizer step of its newest reading (absent: none, or before this
    was kept)."""

    def with_rate(self, micro_batch: int, samples_per_s: float, step: int) -> SizeHistory:
        kept = (*self.rates.get(micro_batch, ())[-(RATE_WINDOW - 1) :], samples_per_s)
        return SizeHistory(
            {**self.rates, micro_batch: kept}, self.failures, {**self.measured, micro_batch: step}
        )

    def with_failure(self, micro_batch: int, step: int, room: int) -> SizeHistory:
        return SizeHistory(self.rates, {**self.failures, micro_batch: (step, room)}, self.measured)

    def rate(self, micro_batch: int) -> float | None:
        """Median samples/s at ``micro_batch``; None with fewer than MIN_RATES readings."""
        rates = self.rates.get(micro_batch, ())
        return median(rates) if len(rates) >= MIN_RATES else None

    def faster(self, a: int, b: int, margin: float, step: int) -> bool:
        """True when ``a`` was measured faster than ``b`` by more than ``margin`` (a fraction),
        both within ``FRESH_STEPS`` of optimizer step ``step``."""
        if not all(step - self.measured.get(m, -FRESH_STEPS - 1) <= FRESH_STEPS for m in (a, b)):
            return False
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

    def as_json(self) -> dict[str, Any]:
        """A JSON object: {"rates": {"16": [samples/s, ...]}, "failures": {"32": [step, room]},
        "measured": {"16": step}}."""
        return {
            "rates": {str(m): list(r) for m, r in sorted(self.rates.items())},
            "failures": {str(m): list(f) for m, f in sorted(self.failures.items())},
            "measured": {str(m): step for m, step in sorted(self.measured.items())},
        }

    @classmethod
    def from_json(cls, data: Any, allowed: tuple[int, ...]) -> SizeHistory:
        """The history ``as_json`` wrote, for the micro-batches in ``allowed`` (a size the
        geometry no longer allows is dropped). ValueError naming the field when malformed."""
        if not isinstance(data, dict):
            raise ValueError("history: expected an object")
        rates: dict[int, tuple[float, ...]] = {}
        for key, values in _entries(data, "rates", allowed):
            if not isinstance(values, list) or not all(_positive(v) for v in values):
                raise ValueError(f"history.rates.{key}: expected a list of samples/s > 0")
            rates[int(key)] = tuple(float(v) for v in values[-RATE_WINDOW:])
        failures: dict[int, tuple[int, int]] = {}
        for key, value in _entries(data, "failures", allowed):
            if not (isinstance(value, list) and len(value) == 2 and all(_integer(v) for v in value)):
                raise ValueError(f"history.failures.{key}: expected [step, room bytes]")
            failures[int(key)] = (int(value[0]), int(value[1]))
        measured: dict[int, int] = {}
        for key, value in _entries(data, "measured", allowed):  # absent in older files: none fresh
            if not _integer(value):
                raise ValueError(f"history.measured.{key}: expected an optimizer step")
            measured[int(key)] = int(value)
        return cls(rates, failures, measured)


def _entries(data: dict[str, Any], name: str, allowed: tuple[int, ...]) -> list[tuple[str, Any]]:
    """``data[name]``'s items whose key is an allowed micro-batch."""
    section = data.get(name, {})
    if not isinstance(section, dict):
        raise ValueError(f"history.{name}: expected an object keyed by micro-batch")
    for key in section:
        if not (isinstance(key, str) and key.isdigit()):
            raise ValueError(f"history.{name}: key {key!r} is not a micro-batch")
    return [(key, value) for key, value in section.items() if int(key) in allowed]


def _positive(value: Any) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
