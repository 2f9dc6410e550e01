"""Slow steps: added latency with jitter, on every rank or on one straggler (performed by
the trainer: ``engine.trainer.chaos.performers.slow_steps``).

By default the latency is relative: each slowed step takes about ``factor`` times the step
before the injection, so the rehearsal means the same on any model. A fixed 0.2 s was 10x a
20 ms step of ``tiny`` on a CPU and 10% of a 2 s step on a GPU, too little for the
throughput alert (a 50% drop) to see. ``delay_s`` > 0 asks for a fixed delay instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from engine.chaos.kind import EVERY_RANK, ChaosKind, Pending, steps_reached, steps_words
from engine.domain import TelemetrySample


class SlowSteps(ChaosKind):
    title = "slow steps"
    description = "each of a number of steps takes longer (a multiple of its time, with jitter)"
    performer = "trainer"
    order = 70
    recovered_when = "the steps passed and steps go on"
    kind: Literal["slow_steps"] = "slow_steps"
    steps: int = Field(20, ge=1, le=10**6)
    """Optimizer steps slowed down."""
    factor: float = Field(3.0, ge=1.0, le=1000.0, allow_inf_nan=False)
    """Each slowed step takes about this many times the step before the injection."""
    delay_s: float = Field(0.0, ge=0.0, le=600.0, allow_inf_nan=False)
    """Seconds added to each slowed step instead of the factor's; 0: use the factor."""
    jitter: float = Field(0.25, ge=0.0, le=10.0, allow_inf_nan=False)
    """Up to this share of the delay more, drawn at random per step."""
    rank: int = Field(EVERY_RANK, ge=EVERY_RANK, le=65535)
    """Only this (global) rank is slowed, a straggler the others wait for; -1: every rank."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        alone = "" if values.get("rank", EVERY_RANK) == EVERY_RANK else f" of rank {values.get('rank')} alone"
        steps = steps_words(values.get("steps"))
        jitter = f"(+ up to {float(values.get('jitter') or 0.0):.0%} more at random)"
        delay = values.get("delay_s") or 0.0
        if delay:
            return f"add {delay} s {jitter} to each of the next {steps}{alone}"
        return f"make each of the next {steps}{alone} {values.get('factor')}x as long {jitter}"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        applied = pending.applied_step
        return None if applied is None else steps_reached(pending, sample, applied + pending.burst())
