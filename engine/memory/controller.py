"""The memory controller's decisions: pure functions of the readings, torch-free.

The goal is the most samples/s whose peak stays under the budget with a margin, not the
lowest memory level. Thresholds are fractions of the *usable room*: the budget minus the
measured baseline that no micro-batch changes (model states, the CUDA context, or on the
CPU the whole process's resident torch and DeepSpeed), so 0.85 means the same on a GPU
and on a CPU. Once per optimizer step, at the boundary (never inside an accumulation
window: DeepSpeed's boundary test is ``(micro_steps + 1) % gas == 0`` on a counter that
never resets, and its loss is divided by the current GAS on every backward), ``decide``
looks at the expected peak of the coming step:

- levels ok / warn / critical with hysteresis: a level is entered at its threshold and
  left only below the threshold minus ``hysteresis``;
- critical: shrink at once (cool-down or not) to the largest micro-batch predicted below
  ``warn - hysteresis``, else the smallest; warn: shrink one notch (to half), cool-down
  permitting, never further in one step. Either way the size left is remembered as failed.
  The expected peak is the coming step's, at its sequence length: when its data is longer
  than the last step's, the shrink comes before the step that would not fit;
- ok: grow one notch (to double) when the larger size is predicted below ``grow_below``
  for ``steady_steps`` steps (predicted from the measured peak at this size plus the
  model's per-sample cost), the cool-down has passed, it did not fail within
  ``retry_after_steps`` (unless the room has grown since), and it was not measured slower;
- ok, with both measured: step down a notch when the smaller size was measured faster by
  more than ``throughput_margin``, both within ``FRESH_STEPS`` steps (so the controller
  settles where a sweep would; the size left counts as failed, so noisy rates cannot make
  it flap, and a slow spell is never set against a reading from long ago);
- every geometry keeps ``micro_batch x grad_accum x world_size == global_batch``.

``after_oom`` picks the micro-batch to redo a window with after an out-of-memory error,
``failed`` remembers it, ``review_request`` answers a planner or operator asking for a
micro-batch.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from engine.config.run_config import MemoryConfig, TrainConfig
from engine.measures.memory_scale import MemoryLevel as Level
from engine.measures.memory_scale import memory_level, room_share
from engine.memory.size_history import SizeHistory

ChangeKind = Literal["shrink", "grow", "throughput", "oom", "request", "resume"]


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
    """The controller's view of its config: the ``memory`` section as validated, with what it
    needs of ``train`` and the world. Built by ``from_config``; no defaults of its own, so a
    new ``memory`` key is read as ``policy.memory.KEY`` and declared only in the config."""

    memory: MemoryConfig
    global_batch: int
    """Samples per optimizer step over all ranks (``train.global_batch``)."""
    world_size: int
    max_micro_batch: int
    """``memory.max_micro_batch``, or ``train.micro_batch`` when that is None."""

    @classmethod
    def from_config(cls, memory: MemoryConfig, train: TrainConfig, world_size: int = 1) -> Policy:
        """The one place the view is derived from the config sections."""
        return cls(memory, train.global_batch, world_size, memory.max_micro_batch or train.micro_batch)

    @property
    def min_micro_batch(self) -> int:
        return self.memory.min_micro_batch

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

    def notch_below(self, micro_batch: int) -> int | None:
        """One notch down: the largest allowed size <= half, else the next smaller one."""
        smaller = self.allowed[: bisect_left(self.allowed, micro_batch)]
        if not smaller:
            return None
        halves = [m for m in smaller if m <= micro_batch // 2]
        return halves[-1] if halves else smaller[-1]

    def notch_above(self, micro_batch: int) -> int | None:
        """One notch up: the largest allowed size <= double, else the next larger one."""
        larger = self.allowed[bisect_right(self.allowed, micro_batch) :]
        if not larger:
            return None
        doubles = [m for m in larger if m <= 2 * micro_batch]
        return doubles[-1] if doubles else larger[0]


@dataclass(frozen=True)
class ControllerState:
    level: Level = "ok"
    last_change_step: int | None = None
    """Optimizer step of the last geometry change (any kind)."""
    steady: int = 0
    """Consecutive steps the next larger micro-batch was predicted to fit with headroom."""
    history: SizeHistory = field(default_factory=SizeHistory)
    """Measured samples/s per micro-batch and recent failures."""


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
    baseline: int = 0
    """Measured bytes no micro-batch changes; ``budget - baseline`` is the usable room."""
    rate: float | None = None
    """Samples/s of the step just completed at the current geometry; None if not timed."""
    fragmentation: int = 0
    """Bytes the allocator reserved beyond allocated that emptying its cache cannot return
    (CUDA's split blocks not in use), measured in the step just completed. The budget caps
    reserved bytes (``set_per_process_memory_fraction``) while ``peak`` counts allocated
    ones, so every peak is judged with these added: the allocator raises at the cap,
    before an allocated-only "critical"."""
    grown: tuple[int, int] | None = None
    """(tokens per sample of the last step, of the coming one) when the data grew: the
    peak is then predicted at the longer length, and a shrink says why."""

    @property
    def room(self) -> int:
        return self.budget - self.baseline

    def share(self, peak: int) -> float:
        """``peak``'s part above the baseline, with the fragmentation the cap also counts, as a
        fraction of the room (inf: no room)."""
        return room_share(peak, self.budget, self.baseline, self.fragmentation)


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
    """The level for ``ratio`` (expected peak's share of the room), with hysteresis on the way down."""
    memory = policy.memory
    return memory_level(ratio, memory.warn, memory.critical, memory.hysteresis, previous)


def cooled(state: ControllerState, step: int, policy: Policy) -> bool:
    """True when ``cooldown_steps`` have passed since the last geometry change."""
    last = state.last_change_step
    return last is None or step - last >= policy.memory.cooldown_steps


def decide(
    state: ControllerState, geometry: Geometry, reading: Reading, policy: Policy
) -> tuple[ControllerState, Change | None]:
    """The next state and, maybe, a geometry change to apply before the coming step."""
    history = _timed(state, geometry.micro_batch, reading)
    ratio = reading.share(reading.peak)
    level = level_of(state.level, ratio, policy)
    if level != "ok":
        state = ControllerState(level, state.last_change_step, 0, history)
        if level == "critical" or cooled(state, reading.step, policy):
            smaller = _shrink_target(geometry.micro_batch, level, reading, policy)
            if smaller is not None:
                why = f"expected peak {ratio:.0%} of the usable room ({level})"
                if reading.grown is not None:
                    before, after = reading.grown
                    why = f"the data grew from {before} to {after} tokens per sample: {why}"
                state = failed(state, geometry.micro_batch, reading.step, reading.room)
                return _changed(state, reading.step), Change(
                    geometry, policy.geometry(smaller), "shrink", why
                )
        return state, None
    return _when_ok(state, history, geometry, reading, policy)


def failed(state: ControllerState, micro_batch: int, step: int, room: int) -> ControllerState:
    """``state`` remembering that ``micro_batch`` failed (OOM or pressure) at ``step``."""
    history = state.history.with_failure(micro_batch, step, room)
    return ControllerState(state.level, state.last_change_step, state.steady, history)


def changed(state: ControllerState, step: int) -> ControllerState:
    """``state`` after a geometry change at ``step`` (any kind; history kept)."""
    return _changed(state, step)


def after_oom(geometry: Geometry, policy: Policy) -> Geometry | None:
    """The geometry to redo a window with after an OOM: one notch down (at most half).

    None when the micro-batch is already the smallest allowed (the run cannot go on).
    """
    smaller = policy.notch_below(geometry.micro_batch)
    return None if smaller is None else policy.geometry(smaller)


def review_request(
    micro_batch: int, predicted_peak: int, budget: int, policy: Policy, baseline: int = 0
) -> Verdict:
    """Accept a requested micro-batch only if allowed and predicted to fit below
    ``warn - hysteresis`` of the usable room (``budget - baseline``, bytes)."""
    allowed = policy.micro_batches()
    if micro_batch not in allowed:
        return Verdict(False, f"micro-batch {micro_batch} is not one of {allowed} (bounds, global batch)")
    share = policy.memory.warn - policy.memory.hysteresis
    limit = baseline + share * (budget - baseline)
    if predicted_peak > limit:
        return Verdict(
            False,
            f"micro-batch {micro_batch} predicted to peak at {predicted_peak} bytes, "
            f"over {share:.0%} of the usable room ({budget - baseline} bytes of a budget of {budget})",
        )
    return Verdict(True, "predicted to fit", policy.geometry(micro_batch))


def _when_ok(
    state: ControllerState, history: SizeHistory, geometry: Geometry, reading: Reading, policy: Policy
) -> tuple[ControllerState, Change | None]:
    """At level ok: step down to a size measured faster, or grow one notch into headroom."""
    m, step, margin = geometry.micro_batch, reading.step, policy.memory.throughput_margin
    is_cooled = cooled(state, step, policy)
    smaller = policy.notch_below(m)
    if is_cooled and smaller is not None and history.faster(smaller, m, margin, step):
        why = (
            f"micro-batch {smaller} measured faster ({history.rate(smaller):,.0f} against "
            f"{history.rate(m):,.0f} samples/s)"
        )
        state = failed(ControllerState("ok", state.last_change_step, 0, history), m, step, reading.room)
        return _changed(state, step), Change(geometry, policy.geometry(smaller), "throughput", why)
    bigger = policy.notch_above(m)
    share = 1.0 if bigger is None else reading.share(reading.predicted.get(bigger, reading.budget))
    fits = (
        bigger is not None
        and share < policy.memory.grow_below
        and not history.blocked(
            bigger, step, reading.room, policy.memory.retry_after_steps, policy.memory.hysteresis
        )
        and not history.faster(m, bigger, margin, step)
    )
    # Built directly, not with dataclasses.replace: this runs every step (replace costs ~3 us).
    state = ControllerState("ok", state.last_change_step, state.steady + 1 if fits else 0, history)
    if bigger is not None and fits and state.steady >= policy.memory.steady_steps and is_cooled:
        why = (
            f"headroom steady for {state.steady} steps "
            f"(micro-batch {bigger} predicted {share:.0%} of the room)"
        )
        return _changed(state, step), Change(geometry, policy.geometry(bigger), "grow", why)
    return state, None


def _timed(state: ControllerState, micro_batch: int, reading: Reading) -> SizeHistory:
    """The history with the step just completed timed at ``micro_batch``; the first step
    after a change is left out (it ran the change, or redid a window after an OOM)."""
    last = state.last_change_step
    if reading.rate is None or reading.rate <= 0 or (last is not None and reading.step <= last + 1):
        return state.history
    return state.history.with_rate(micro_batch, reading.rate, reading.step)


def _changed(state: ControllerState, step: int) -> ControllerState:
    return ControllerState(state.level, step, 0, state.history)


def _shrink_target(micro_batch: int, level: Level, reading: Reading, policy: Policy) -> int | None:
    """warn: one notch down. critical: the largest smaller size predicted below
    ``warn - hysteresis`` of the room, else the smallest."""
    if level == "warn":
        return policy.notch_below(micro_batch)
    smaller = policy.allowed[: bisect_left(policy.allowed, micro_batch)]
    if not smaller:
        return None
    limit = policy.memory.warn - policy.memory.hysteresis
    fitting = [m for m in smaller if reading.share(reading.predicted.get(m, reading.budget)) <= limit]
    return fitting[-1] if fitting else smaller[0]
