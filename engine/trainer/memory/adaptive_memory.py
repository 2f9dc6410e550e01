"""Adaptive memory in the trainer: budget, predictive model, controller, OOM recovery.

The loop calls, per optimizer step::

    memory.before_step(step)       ballast (tests), drift, the coming step's sequence length,
                                   controller -> maybe a new geometry
    memory.run_step(train_step...) the step (chaos's hook inside); an OOM throws the window
                                   away, shrinks, redoes it
    memory.after_step(...)         measured peak -> calibration; fp16 loss-scale floor watch

Geometry changes happen only here, at optimizer-step boundaries (or after a window was
thrown away), and keep ``micro_batch x grad_accum x world_size == train.global_batch``.
Batches come through a ``SampleWindow``, so a step's samples do not depend on the geometry.
Every change is a ``memory_adapted`` event (from -> to, reason, memory before/after).

Sequence lengths that vary (``StepLengths``): the coming step is predicted at its longest
sample's length, read before it, so data that grew is a shrink before the step, not an OOM.

When the memory path cannot go on (an OOM at the smallest micro-batch, the fp16 loss-scale
floor), ``run_step`` returns None, the loop checkpoints and ``raise_if_halted`` ends the
trainer with a ``MemoryHalt`` naming the reason. At ZeRO-3 an OOM is not redone in place:
the micro-batch to use is written to ``RUN_DIR/memory.json`` (read by the next attempt
at start) and ``MemoryHalt`` is raised at once, without a checkpoint, so the supervisor's
restart resumes from the newest checkpoint with the smaller micro-batch.

With several ranks every rank must take the same decision at the same step (a geometry on
one rank only would hang the gradient all-reduce): the model is fed the ranks' maximum
readings (one small all-reduce at each boundary and after each step), so every rank's
controller sees the same numbers and decides the same. An OOM on one rank cannot be redone
in place (the others are already inside the step's collectives): it takes the ZeRO-3 way,
memory.json and a group restart from the newest checkpoint (docs/deepspeed.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from engine.config.run_config import RunConfig
from engine.events import LossScaleFloor, MemoryExhausted
from engine.measures.memory_scale import MemoryLevel as Level
from engine.memory.budget import budget_bytes
from engine.memory.controller import (
    Change,
    ControllerState,
    Geometry,
    Policy,
    Reading,
    Verdict,
    after_oom,
    changed,
    decide,
    failed,
    review_request,
)
from engine.memory.model import Predictions
from engine.memory.model_description import ModelDescription
from engine.trainer.link import Link
from engine.trainer.memory.adaptation_events import adapted_event, level_event
from engine.trainer.memory.ballast import Ballast
from engine.trainer.memory.forward_sampler import ForwardSampler
from engine.trainer.memory.geometry import apply_geometry, current_geometry
from engine.trainer.memory.geometry_file import GEOMETRY_FILE, HISTORY_EVERY, GeometryRecord, read_geometry
from engine.trainer.memory.loss_scale_floor import FLOOR_SKIPS, FloorWatch, is_floor_error, min_loss_scale
from engine.trainer.memory.memory_prior import build_memory_model
from engine.trainer.memory.memory_probe import MemoryProbe, enforce_budget
from engine.trainer.memory.oom_forensics import OomForensics
from engine.trainer.memory.oom_injection import OomInjector
from engine.trainer.memory.oom_recovery import (
    discard_window,
    drop_frames,
    is_oom,
    redone_in_place,
    release_memory,
)
from engine.trainer.ranks.rank_group import RankGroup
from engine.trainer.workloads.built_model import describe_module
from engine.trainer.workloads.sample_window import SampleWindow
from engine.trainer.workloads.step_lengths import StepLengths
from engine.trainer.workloads.workload import BatchFn

log = logging.getLogger(__name__)

StepFn = Callable[..., torch.Tensor]
StepHook = Callable[[StepFn, int], StepFn]  # hook(train_step, step): the step that runs instead


class MemoryHalt(RuntimeError):
    """The memory path cannot go on (an OOM at the smallest micro-batch or on another rank,
    the fp16 loss-scale floor); the trainer ends with it, and the message is the run's reason."""

    def __init__(self, reason: str, restartable: bool) -> None:
        super().__init__(reason)
        self.restartable = restartable
        """True when a restart (with the micro-batch in memory.json) is the way on."""


class AdaptiveMemory:
    def __init__(
        self,
        config: RunConfig,
        engine: Any,
        module: torch.nn.Module,
        probe: MemoryProbe,
        link: Link,
        geometry_file: Path | None = None,
        ranks: RankGroup | None = None,
        description: ModelDescription | None = None,
        lengths: StepLengths | None = None,
    ) -> None:
        self.ranks = ranks or RankGroup()
        self.lengths = lengths  # None: every sample has the model's seq_len
        self.seq_len: int | None = None
        """Tokens per sample (the longest) of the running step; None: fixed lengths."""
        world_size = self.ranks.world
        self.config = config
        self.engine = engine
        self.module = module
        self.probe = probe
        self.link = link
        self.adaptive = config.memory.adaptive  # read every step: looked up once
        self.cpu_enforce = config.memory.cpu_enforce and probe.kind == "cpu-rss"
        self.policy = Policy.from_config(config.memory, config.train, world_size)
        self.budget = budget_bytes(config.memory.budget, probe.capacity)
        """Bytes the controller steers by."""
        enforce_budget(probe, self.budget)  # CUDA: the allocator raises at the budget from now on
        self.model = build_memory_model(config, description or describe_module(module), world_size)
        self.state = ControllerState()
        self.ballast = Ballast.from_env(probe.device, self.ranks.rank)
        self.injector = OomInjector.from_env(self.ranks.rank)
        self.floor = FloorWatch(FLOOR_SKIPS)
        self.geometry_file = geometry_file
        self.record = GeometryRecord(geometry_file, self.ranks.rank)
        self.requested: Geometry | None = None
        """A planner's or operator's accepted micro-batch, applied at the next boundary."""
        self.halted: MemoryHalt | None = None
        self.predicted: int | None = None
        """Predicted peak of the running step (bytes)."""
        self.step_peak: int | None = None
        """Measured peak of the last step (bytes)."""
        self.fragmented = 0
        """Bytes the allocator cannot free in the last step (the worst rank's; CUDA only)."""
        self.predictions = Predictions(self.model, self.policy.allowed)
        self.step_seconds: float | None = None
        """Wall seconds of the last completed optimizer step (the slowest rank's)."""
        self._started = 0.0
        self.sampler = ForwardSampler(probe, self.budget, self.cpu_enforce, every_forward=lengths is not None)
        self.forensics: OomForensics | None = None
        """What each OOM leaves in the run's directory (set by the loop; None in bare tests)."""
        self.injector.attach(module)

    # ----------------------------------------------------------------- the step

    def window(self, batch: BatchFn, pad: tuple[int, ...] | None = None) -> SampleWindow:
        """``batch`` through a SampleWindow at the configured micro-batch (``pad``: the
        workload's padding values, for blocks of different lengths)."""
        return SampleWindow(batch, self.config.train.micro_batch, pad)

    def drawing(self, window: BatchFn) -> BatchFn:
        """``window`` as the step draws it: the OOM injector told where the step is."""
        if not self.injector.injections:
            return window  # nothing to tell the injector: no wrapper call per micro-batch

        def draw(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, ...]:
            self.injector.position = (step, micro, micro_batch)
            return window(step, micro, micro_batch)

        return draw

    def before_step(self, step: int) -> None:
        """At the boundary before optimizer step ``step`` (0-based): maybe a new geometry."""
        if self.ballast.schedule:  # tests and rehearsals only
            self.ballast.at_step(step)
        resident = self.probe.resident()  # the one boundary reading: drift and the peak's start
        # Every rank's model and controller see the same numbers (one all-reduce).
        agreed, self.fragmented = self.ranks.max_ints([resident, self.probe.fragmentation()])
        self.model.seed(agreed)
        self.model.drift(agreed)
        grown = self._coming_length(step)
        geometry = current_geometry(self.engine)
        change, expected = self._decide(step, geometry, grown)
        if change is not None:
            self._apply(change, step, mem_before=expected)
            geometry = change.after
        self.predicted = self.model.predict(geometry.micro_batch, self.seq_len)
        self.sampler.begin(None if change is not None else resident)  # a shrink freed memory: read again

    def run_step(
        self, train_step: StepFn, engine: Any, batch: BatchFn, step: int, hook: StepHook | None = None
    ) -> torch.Tensor | None:
        """``train_step(engine, batch, step)``, redone at a smaller micro-batch after an OOM;
        ``hook`` (chaos) runs inside: its time, memory and errors are seen as a real step's.
        None when the memory path halted (see ``halted``): the loop checkpoints and stops.
        The CPU's post-forward RSS hook is on the model only while this runs (nor in
        bench/overhead.py's bare loop).
        """
        self._started = time.perf_counter()
        with self.sampler.attached(self.module):
            if hook is not None:
                train_step = hook(train_step, step)
            return self._run_window(train_step, engine, batch, step)

    def _run_window(self, train_step: StepFn, engine: Any, batch: BatchFn, step: int) -> torch.Tensor | None:
        while True:
            try:
                return train_step(engine, batch, step)
            except Exception as err:
                if is_oom(err):
                    if self._recover(err, step):
                        continue
                    return None
                if is_floor_error(err):
                    discard_window(engine)
                    self._halt_for_floor(step, str(err))
                    return None
                raise

    def after_step(self, overflow: bool, scale: float | None) -> None:
        """After a completed optimizer step: calibrate, watch the loss-scale floor."""
        micro_batch = int(self.engine.train_micro_batch_size_per_gpu())  # an OOM may have changed it
        self.step_peak, resident = self.probe.end_step()  # one reading for both
        micros = int((time.perf_counter() - self._started) * 1e6)  # the step's wall time, us
        # The worst rank's: every rank's controller must see the same numbers.
        peak, resident, micros = self.ranks.max_ints([self.step_peak, resident, micros])
        self.step_seconds = micros / 1e6 if micros > 0 else None
        self.model.observe(micro_batch, peak, resident, self.seq_len)
        if int(self.engine.global_steps) % HISTORY_EVERY == 0:
            self.record.keep(current_geometry(self.engine), self.state.history)
        minimum = min_loss_scale(self.engine) if overflow else None  # at the floor only if overflowing
        if self.floor.note(overflow, scale, minimum):
            self._halt_for_floor(int(self.engine.global_steps), f"{self.floor.run} steps skipped in a row")

    def figures(self) -> dict[str, int | None]:
        """The memory fields of this step's TelemetrySample."""
        return {
            "mem_step_peak": self.step_peak,
            "mem_predicted": self.predicted,
            "mem_budget": self.budget,
            "mem_baseline": self._baseline(),
            "mem_ballast": self.ballast.held or None,
        }

    def raise_if_halted(self) -> None:
        if self.halted is not None:
            raise self.halted

    # ----------------------------------------------------- planner / operator

    def request_micro_batch(self, micro_batch: int) -> Verdict:
        """Ask for ``micro_batch`` from the next step on; refused if predicted not to fit."""
        predicted = self.model.predict(micro_batch, self.seq_len)
        verdict = review_request(micro_batch, predicted, self.budget, self.policy, self._baseline())
        if verdict.accepted:
            self.requested = verdict.geometry
        return verdict

    def resume_geometry(self) -> None:
        """At start: the micro-batch and the measured history an earlier attempt left in
        memory.json, if valid. A file without a history (an older trainer's) was written
        after an OOM, so the size above it failed: it is not grown back into for
        ``retry_after_steps`` (unless the room grows), as within an attempt."""
        left = read_geometry(self.geometry_file, self.policy.allowed)
        if left is None:
            return
        if left.history is not None:
            self.state = ControllerState(history=left.history)
        geometry = current_geometry(self.engine)
        if left.micro_batch in self.policy.allowed and left.micro_batch != geometry.micro_batch:
            change = Change(
                geometry,
                self.policy.geometry(left.micro_batch),
                "resume",
                f"{GEOMETRY_FILE} from an earlier attempt",
            )
            step = int(self.engine.global_steps)
            self._apply(change, step, mem_before=None)
            above = self.policy.notch_above(left.micro_batch)
            if above is not None and left.history is None:
                self.state = failed(self.state, above, step, self.budget - self._baseline())

    # --------------------------------------------------------------- internals

    def _coming_length(self, step: int) -> tuple[int, int] | None:
        """Read the coming step's tokens per sample into ``seq_len`` (and the predictions);
        (last, coming) when the data grew."""
        if self.lengths is None:
            return None
        last, coming = self.seq_len, self.lengths.longest(step)
        self.seq_len = self.predictions.seq_len = coming
        return (last, coming) if last is not None and coming > last else None

    def _decide(
        self, step: int, geometry: Geometry, grown: tuple[int, int] | None = None
    ) -> tuple[Change | None, int]:
        expected = self.model.predict(geometry.micro_batch, self.seq_len)
        if self.requested is not None:
            wanted, self.requested = self.requested, None
            if wanted != geometry:
                return Change(geometry, wanted, "request", "asked for by the planner or operator"), expected
            return None, expected
        if not self.adaptive:
            return None, expected
        previous = self.state.level
        seconds = self.step_seconds
        rate = geometry.samples(self.ranks.world) / seconds if seconds else None  # samples/s
        fragmented = self.fragmented  # the budget caps reserved bytes, not allocated ones
        reading = Reading(
            step, expected, self.budget, self.predictions, self._baseline(), rate, fragmented, grown
        )
        self.state, change = decide(self.state, geometry, reading, self.policy)
        if self.state.level != previous:
            self._level_event(previous, step, expected + fragmented)  # as the level was judged
        return change, expected

    def _apply(
        self,
        change: Change,
        step: int,
        mem_before: int | None,
        mem_resident_after: int | None = None,
        named_step: int | None = None,
    ) -> None:
        """Apply ``change`` at ``step`` (the 0-based index of the step about to run); its event
        names ``named_step`` when given (an OOM's: the step being redone)."""
        apply_geometry(self.engine, change.after)
        if change.after.micro_batch < change.before.micro_batch and change.kind != "oom":
            # What the larger micro-batch's activations left cached; no Python cycles to
            # collect at a boundary (an OOM's window was discarded and released already).
            release_memory(collect=False)
        self.state = changed(self.state, step)
        mem_after = self.model.predict(change.after.micro_batch, self.seq_len)
        named = step if named_step is None else named_step
        self.link.event(
            *adapted_event(
                change, named, mem_before, mem_after, self.budget, self.probe.kind, mem_resident_after
            )
        )
        self.record.keep(change.after, self.state.history)

    def _recover(self, err: BaseException, step: int) -> bool:
        """After an OOM in the step of 0-based index ``step``: True when the window can be
        redone. Events and messages name it as telemetry does (``step + 1``: the steps done
        once it completes), so an OOM event names the step that is redone."""
        redone = step + 1
        before = current_geometry(self.engine)
        peak = self.probe.step_peak()
        smaller = after_oom(before, self.policy)
        if self.forensics is not None:  # while the failed window's tensors are still held
            after = smaller.micro_batch if smaller else None
            self.forensics.record(self, redone, before.micro_batch, after, err, peak, self._baseline())
        drop_frames(err)  # the failed window's activations, freed now
        self.state = failed(self.state, before.micro_batch, step, self.budget - self._baseline())
        if not redone_in_place(self.engine, self.ranks.world):
            where = f"rank {self.ranks.rank} of {self.ranks.world}" if self.ranks.world > 1 else "ZeRO-3"
            why = f"OOM at {where} in step {redone}: {err}"
            self.record.write(smaller or before, self.state.history, why)
            raise MemoryHalt(
                f"out of memory at {where} in step {redone} at micro-batch {before.micro_batch} ({err}); "
                f"restart from the newest checkpoint with micro-batch {(smaller or before).micro_batch} "
                f"({GEOMETRY_FILE})",
                restartable=smaller is not None,
            ) from err
        discard_window(self.engine)
        if smaller is None:
            self.record.write(before, self.state.history, f"OOM at the smallest micro-batch in step {redone}")
            self._halt(
                f"out of memory at micro-batch {before.micro_batch}, the smallest allowed, "
                f"in step {redone} ({err})",
                MemoryExhausted(step=redone, restartable=False),
            )
            return False
        change = Change(before, smaller, "oom", f"{type(err).__name__}: {err}"[:300])
        self._apply(
            change, step, mem_before=peak, mem_resident_after=self.probe.resident(), named_step=redone
        )
        self.predicted = self.model.predict(smaller.micro_batch, self.seq_len)
        self.sampler.begin(None)
        return True

    def _halt_for_floor(self, step: int, detail: str) -> None:
        self._halt(
            f"fp16 loss scale at its minimum and still overflowing at step {step} ({detail}); "
            "the run diverged: lower the learning rate or use bf16",
            LossScaleFloor(step=step, restartable=False),
        )

    def _halt(self, reason: str, why: MemoryExhausted | LossScaleFloor) -> None:
        if self.halted is not None:
            return
        self.halted = MemoryHalt(reason, why.restartable)
        self.link.event(why, reason)

    def _level_event(self, previous: Level, step: int, expected: int) -> None:
        share = self._room_share(expected)
        self.link.event(*level_event(previous, self.state.level, step, expected, self.budget, share))

    def _baseline(self) -> int:
        """Bytes no micro-batch changes (measured; model states until the first reading)."""
        baseline = self.model.baseline
        return self.model.model_states if baseline is None else baseline

    def _room_share(self, peak: int) -> float:
        baseline = self._baseline()
        return (peak - baseline) / max(1, self.budget - baseline)
