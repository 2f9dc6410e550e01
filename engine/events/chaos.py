"""Chaos: a failure injected on purpose, the moment it took effect, and the run's recovery.

Every injection has a ``chaos_id``; ``chaos_injected`` (the supervisor, when it accepts the
request), ``chaos_applied`` (the trainer, when a trainer-side kind takes effect at a step
boundary) and ``chaos_recovered`` (the supervisor, when the run is healthy again, or the
verdict that it did not recover) all carry it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from engine.events.payload import Payload


class ChaosInjected(Payload):
    event_type = "chaos_injected"
    severity = "warning"
    chaos_id: str
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)
    """The request's parameters, defaults filled in."""
    source: str = "operator"
    """Who asked: ``operator`` (console or shell), ``schedule`` (the run's ``[chaos]``)."""
    step: int | None = None
    """The newest step when it was injected."""
    pid: int | None = None
    """The process a supervisor-side kind acted on (kill, preempt)."""
    target: str | None = None
    """What a supervisor-side kind acted on besides a process: for ``corrupt_checkpoint`` the
    file under ``checkpoints/`` whose bytes were flipped (``global_step120/...``)."""
    scheduled_step: int | None = None
    """For ``source`` schedule: the step the run's ``[chaos]`` schedule drew it for (it is
    injected at the first step at or after it when it can be done). A new supervisor goes on
    with the schedule after the newest of these."""


class ChaosApplied(Payload):
    """A trainer-side kind took effect at the trainer's next step boundary."""

    event_type = "chaos_applied"
    origin = "trainer"
    severity = "warning"
    chaos_id: str
    kind: str
    step: int
    """The optimizer steps done when it took effect (the trainer's step boundary, from 0)."""
    detail: str = ""
    """What it does in this run, in words (or why it does nothing here: an fp16 overflow
    burst in an fp32 run)."""

    @property
    def first_step(self) -> int:
        """The first step it acts on, numbered as telemetry and the store number steps (from 1):
        a spike applied with 162 steps done poisons step 163."""
        return self.step + 1


class ChaosRecovered(Payload):
    """The run is healthy again after an injection (or, ``recovered`` False, it is not)."""

    event_type = "chaos_recovered"
    chaos_id: str
    kind: str
    recovered: bool
    seconds: float
    """From the injection to this verdict."""
    step: int | None = None
    """The step that showed it (the first one after a restart, a finite loss, ...)."""
    detail: str = ""
    """What showed it, or why it failed."""


class LegacyChaos(Payload):
    """What memtui before ``chaos_injected`` recorded for a trainer kill (kept to read old runs)."""

    event_type = "chaos"
    severity = "warning"
    action: str
    params: dict[str, Any] = Field(default_factory=dict)
    pid: int | None = None
