"""The memory controller's adaptations and levels, and the trainer's memory halts."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.events.payload import Payload
from engine.measures.memory_scale import MemoryLevel


class PlannedMemory(BaseModel):
    """Where ``memory plan`` says one rank's memory goes for the run's configuration (bytes):
    the model states by part, activations per sample, the named margin, and the peak it
    predicts at the configured micro-batch. Sent with ``trainer_started``."""

    model_config = ConfigDict(extra="forbid")

    params: int
    grads: int
    optimizer: int
    gathered: int = 0
    """ZeRO-3: the largest layer gathered for compute."""
    activations_per_sample: int
    """0 for a workload whose shape memtui does not know."""
    margin: int
    """The CUDA context (on the CPU the process's runtime) and the allocator's slack."""
    micro_batch: int
    planned_peak: int
    """The plan's peak at ``micro_batch``."""


class MemoryAdapted(Payload):
    event_type = "memory_adapted"
    origin = "trainer"
    kind: str
    """``shrink`` (memory pressure), ``grow``, ``throughput`` (down to a size measured
    faster), ``oom``, ``request`` or ``resume`` (the geometry an earlier OOM left)."""
    reason: str
    step: int
    from_micro_batch: int
    to_micro_batch: int
    from_grad_accum: int
    to_grad_accum: int
    mem_before: int | None = None
    """Bytes: the peak (measured or expected) that made the controller act."""
    mem_after_predicted: int | None = None
    mem_budget: int | None = None
    mem_kind: str | None = None
    mem_resident_after: int | None = None
    """After an OOM: the process's memory once the smaller micro-batch is in place."""


class MemoryLevelChanged(Payload):
    event_type = "memory_level"
    origin = "trainer"
    step: int
    level: MemoryLevel
    previous: MemoryLevel
    expected_peak: int
    """Bytes."""
    mem_budget: int


class MemoryExhausted(Payload):
    """Out of memory at the smallest micro-batch: the trainer stops with a checkpoint."""

    event_type = "memory_exhausted"
    origin = "trainer"
    severity = "critical"
    step: int
    restartable: bool


class LossScaleFloor(Payload):
    """fp16 loss scale at its minimum and still overflowing: the run diverged."""

    event_type = "loss_scale_floor"
    origin = "trainer"
    severity = "critical"
    step: int
    restartable: bool
