"""The memory controller's decisions: pure functions of the readings, torch-free.

Once per optimizer step, at the boundary (never inside an accumulation window: DeepSpeed's
boundary test is ``(micro_steps + 1) % gas == 0`` on a counter that never resets, and its
loss is divided by the current GAS on every backward), ``decide`` looks at the expected
peak of the coming step against the budget:

- levels ok / warn / critical with hysteresis: a level is entered at its threshold and
  left only below the threshold minus ``hysteresis``;
- warn: shrink the micro-batch (cool-down permitting) to the largest one predicted to
  fit below ``warn - hysteresis``; critical: the same at once, cool-down or not;
- ok: when the next larger micro-batch is predicted below ``grow_below`` for
  ``steady_steps`` steps in a row and the cool-down has passed, grow one notch, never above
  the maximum;
- every geometry keeps ``micro_batch x grad_accum x world_size == global_batch``.

``after_oom`` picks the micro-batch to redo a window with after an out-of-memory error,
``review_request`` answers a planner or operator asking for a micro-batch.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from engine.config import MemoryConfig, TrainConfig

Level = Literal["ok", "warn", "critical"]
ChangeKind = Literal["shrink", "grow", "oom", "request", "resume"]


@dataclass(frozen=True)
class Geometry:
    """Batch geometry of one rank: ``micro_batch`` samples x ``grad_accum`` micro-steps."""

    micro_batch: int
    grad_accum: int

    def samples(self, world_size: int) -> int:
        """Samples per optimizer step over all ranks."""
        return self.micro_batch * self.grad_accum * world_size


@dataclass(frozen=True)
class Policy:
    """The controller's bounds and thresholds (fractions of the budget)."""

    global_batch: int
    world_size: int = 1
    min_micro_batch: int = 1
    max_micro_batch: int = 1
    warn: float = 0.85
    critical: float = 0.95
    hysteresis: float = 0.05
    grow_below: float = 0.70
    steady_steps: int = 10
    cooldown_steps: int = 20

    @classmethod
    def from_config(cls, memory: MemoryConfig, train: TrainConfig, world_size: int = 1) -> Policy:
        return cls(
            global_batch=train.global_batch,
            world_size=world_size,
            min_micro_batch=memory.min_micro_batch,
            max_micro_batch=memory.max_micro_batch or train.micro_batch,
            warn=memory.warn,
            critical=memory.critical,
            hysteresis=memory.hysteresis,
            grow_below=memory.grow_below,
            steady_steps=memory.steady_steps,
            cooldown_steps=memory.cooldown_steps,
        )

    def micro_batches(self) -> list[int]:
        """Allowed micro-batches, ascending: within bounds, dividing the global batch."""
        return list(self.allowed)

    @cached_property
    def allowed(self) -> tuple[int, ...]:
        """``micro_batches()`` computed once (O(max_micro_batch)); the policy is frozen and
        the controller asks every step."""
        per_rank, rest = divmod(self.global_batch, self.world_size)
        if rest:
            return ()
        hi = min(self.max_micro_batch, per_rank)
        return tuple(m for m in range(self.min_micro_batch, hi + 1) if per_rank % m == 0)

    def geometry(self, micro_batch: int) -> Geometry:
        """The geometry with ``micro_batch`` that keeps the global batch."""
        return Geometry(micro_batch, self.global_batch // (micro_batch * self.world_size))


@dataclass(frozen=True)
class ControllerState:
    level: Level = "ok"
    last_change_step: int | None = None
    """Optimizer step of the last geometry change (any kind)."""
    steady: int = 0
    """Consecutive steps the next larger micro-batch was predicted to fit with headroom."""


@dataclass(frozen=True)
class Reading:
    """What one decision sees. Bytes per rank."""

    step: int
    """Optimizer steps completed (the coming step's 0-based index)."""
    peak: int
    """Expected peak of the coming step at the current geometry."""
    budget: int
    predicted: Mapping[int, int]
    """Predicted peak per candidate micro-batch."""


@dataclass(frozen=True)
class Change:
    before: Geometry
    after: Geometry
    kind: ChangeKind
    reason: str


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reason: str
    geometry: Geometry | None = None


def level_of(previous: Level, ratio: float, policy: Policy) -> Level:
    """The level for ``ratio`` (expected peak / budget), with hysteresis on the way down."""
    h = policy.hysteresis
    if ratio >= policy.critical or (previous == "critical" and ratio >= policy.critical - h):
        return "critical"
    if ratio >= policy.warn or (previous != "ok" and ratio >= policy.warn - h):
        return "warn"
    return "ok"


def cooled(state: ControllerState, step: int, policy: Policy) -> bool:
    """True when ``cooldown_steps`` have passed since the last geometry change."""
    last = state.last_change_step
    return last is None or step - last >= policy.cooldown_steps


def decide(
    state: ControllerState, geometry: Geometry, reading: Reading, policy: Policy
) -> tuple[ControllerState, Change | None]:
    """The next state and, maybe, a geometry change to apply before the coming step."""
    ratio = reading.peak / reading.budget
    level = level_of(state.level, ratio, policy)
    if level != "ok":
        state = ControllerState(level, state.last_change_step, steady=0)
        if level == "critical" or cooled(state, reading.step, policy):
            smaller = _shrink_target(geometry.micro_batch, reading, policy)
            if smaller is not None:
                why = f"expected peak {ratio:.0%} of the budget ({level})"
                return _changed(state, reading.step), Change(
                    geometry, policy.geometry(smaller), "shrink", why
                )
        return state, None
    bigger = _next_larger(geometry.micro_batch, policy)
    fits = (
        bigger is not None
        and reading.predicted.get(bigger, reading.budget) < policy.grow_below * reading.budget
    )
    # Built directly, not with dataclasses.replace: this runs every step (replace costs ~3 us).
    state = ControllerState("ok", state.last_change_step, state.steady + 1 if fits else 0)
    if bigger is not None and state.steady >= policy.steady_steps and cooled(state, reading.step, policy):
        share = reading.predicted[bigger] / reading.budget
        why = f"headroom steady for {state.steady} steps (micro-batch {bigger} predicted {share:.0%})"
        return _changed(state, reading.step), Change(geometry, policy.geometry(bigger), "grow", why)
    return state, None


def after_oom(geometry: Geometry, policy: Policy) -> Geometry | None:
    """The geometry to redo a window with after an OOM: at most half the micro-batch.

    None when the micro-batch is already the smallest allowed (the run cannot go on).
    """
    smaller = [m for m in policy.micro_batches() if m <= geometry.micro_batch // 2]
    if not smaller:
        below = [m for m in policy.micro_batches() if m < geometry.micro_batch]
        return policy.geometry(below[-1]) if below else None
    return policy.geometry(smaller[-1])


def review_request(micro_batch: int, predicted_peak: int, budget: int, policy: Policy) -> Verdict:
    """Accept a requested micro-batch only if allowed and predicted to fit below warn."""
    allowed = policy.micro_batches()
    if micro_batch not in allowed:
        return Verdict(False, f"micro-batch {micro_batch} is not one of {allowed} (bounds, global batch)")
    limit = (policy.warn - policy.hysteresis) * budget
    if predicted_peak > limit:
        return Verdict(
            False,
            f"micro-batch {micro_batch} predicted to peak at {predicted_peak} bytes, "
            f"over {policy.warn - policy.hysteresis:.0%} of the budget ({budget} bytes)",
        )
    return Verdict(True, "predicted to fit", policy.geometry(micro_batch))


def _changed(state: ControllerState, step: int) -> ControllerState:
    return ControllerState(state.level, last_change_step=step, steady=0)


def _next_larger(micro_batch: int, policy: Policy) -> int | None:
    allowed = policy.allowed
    i = bisect_right(allowed, micro_batch)
    return allowed[i] if i < len(allowed) else None


def _shrink_target(micro_batch: int, reading: Reading, policy: Policy) -> int | None:
    """Largest smaller micro-batch predicted below warn - hysteresis, else the smallest."""
    smaller = policy.allowed[: bisect_left(policy.allowed, micro_batch)]
    if not smaller:
        return None
    limit = (policy.warn - policy.hysteresis) * reading.budget
    fitting = [m for m in smaller if reading.predicted.get(m, reading.budget) <= limit]
    return fitting[-1] if fitting else smaller[0]
