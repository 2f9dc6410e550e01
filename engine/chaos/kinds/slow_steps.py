"""Slow steps: added latency with jitter, on every rank or on one straggler (performed by
the trainer: ``engine.trainer.chaos_performers.slow_steps``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from engine.chaos.kind import EVERY_RANK, ChaosKind, Pending, steps_reached, steps_words
from engine.domain import TelemetrySample


class SlowSteps(ChaosKind):
    title = "slow steps"
    description = "each of a number of steps takes longer (added latency with jitter)"
    performer = "trainer"
    order = 70
    kind: Literal["slow_steps"] = "slow_steps"
    steps: int = Field(20, ge=1, le=10**6)
    """Optimizer steps slowed down."""
    delay_s: float = Field(0.2, ge=0.0, le=600.0, allow_inf_nan=False)
    """Seconds added to each of them."""
    jitter_s: float = Field(0.05, ge=0.0, le=600.0, allow_inf_nan=False)
    """Up to this many seconds more, drawn at random per step."""
    rank: int = Field(EVERY_RANK, ge=EVERY_RANK, le=65535)
    """Only this (global) rank is slowed, a straggler the others wait for; -1: every rank."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        alone = "" if values.get("rank", EVERY_RANK) == EVERY_RANK else f" of rank {values.get('rank')} alone"
        return (
            f"add {values.get('delay_s')} s (+ up to {values.get('jitter_s')} s jitter) to each of the "
            f"next {steps_words(values.get('steps'))}{alone}"
        )

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        applied = pending.applied_step
        return None if applied is None else steps_reached(pending, sample, applied + pending.burst())
