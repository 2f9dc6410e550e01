"""Memory chaos: ballast held on the training device, its release, and an out-of-memory
error in a step (performed by the trainer: ``engine.trainer.chaos.performers.memory``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from engine.chaos.kind import MIB, ChaosKind, Pending, steps_reached, steps_words
from engine.domain import TelemetrySample
from engine.measures.byte_size import format_bytes


class Ballast(ChaosKind):
    title = "memory pressure"
    description = "the trainer holds extra memory (ballast) for a number of steps, or until released"
    performer = "trainer"
    order = 10
    recovered_when = "the steps passed (or a release) and steps go on"
    owned_by_the_trainer = True
    kind: Literal["ballast"] = "ballast"
    bytes: int = Field(256 * MIB, ge=1, le=1 << 40)
    """Bytes of ballast held on the training device (host memory on the CPU)."""
    steps: int = Field(50, ge=0, le=10**7)
    """Optimizer steps it is held; 0: until a ``release`` request."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        held = "until released" if values.get("steps") == 0 else f"for {steps_words(values.get('steps'))}"
        return f"hold {format_bytes(values.get('bytes'))} of ballast {held}"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        if pending.burst() == 0 or pending.applied_step is None:
            return None  # held until a release (``Release.releases``)
        return steps_reached(pending, sample, pending.applied_step + pending.burst())


class Release(ChaosKind):
    title = "release memory pressure"
    description = "the trainer lets go of any ballast it holds"
    performer = "trainer"
    order = 20
    recovered_when = "at once"
    kind: Literal["release"] = "release"

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return "let go of any ballast the trainer holds"

    @classmethod
    def applied_shows(cls, pending: Pending, step: int) -> str | None:
        return f"released at step {step}"

    @classmethod
    def releases(cls, held: Pending) -> bool:
        return held.kind == Ballast.name() and held.burst() == 0 and held.applied_step is not None


class Oom(ChaosKind):
    title = "out of memory"
    description = "an out-of-memory error in the next optimizer step's first micro-batch"
    performer = "trainer"
    order = 30
    recovered_when = "a step trains after it (the controller shrinks and redoes the window)"
    kind: Literal["oom"] = "oom"
    phase: Literal["forward", "backward"] = "forward"
    """Where the error is raised: the forward pass, or part way through the backward."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return f"raise an out-of-memory error in the next step's {values.get('phase')} pass"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        """Any step after it was applied: the step was retried, adapted, or restarted."""
        if pending.applied_step is None:
            return None
        oomed = pending.applied_step + 1  # the step that ran out of memory, as telemetry numbers it
        how = (
            "trained, redone after its OOM"
            if sample.step == oomed
            else f"trained after the OOM in step {oomed}"
        )
        return f"step {sample.step} {how}"
