"""Numerics chaos: a NaN (or inf) loss, an fp16 overflow burst, a loss spike (performed by
the trainer: ``engine.trainer.chaos.performers.numerics``). Each is recovered at the first
step after it with a finite loss and no overflow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from engine.chaos.kind import ChaosKind, Pending, healthy_step, steps_words
from engine.domain import TelemetrySample


class NanLoss(ChaosKind):
    title = "NaN loss"
    description = "the loss becomes NaN (or inf) for a number of steps; those steps are skipped"
    performer = "trainer"
    order = 40
    recovered_when = "a finite, unskipped step after the burst"
    kind: Literal["nan_loss"] = "nan_loss"
    steps: int = Field(3, ge=1, le=10_000)
    """Optimizer steps whose loss is not finite."""
    value: Literal["nan", "inf"] = "nan"
    """What the loss becomes."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return f"make the loss {values.get('value')} for {steps_words(values.get('steps'))} (each skipped)"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        applied = pending.applied_step
        return None if applied is None else healthy_step(sample, applied + pending.burst())


class Overflow(ChaosKind):
    title = "fp16 overflow burst"
    description = (
        "the fp16 gradients overflow for a number of steps: each is skipped and the loss scale halves"
    )
    performer = "trainer"
    order = 50
    recovered_when = "an unskipped step after it"
    kind: Literal["overflow"] = "overflow"
    steps: int = Field(3, ge=1, le=10_000)
    """Optimizer steps that overflow in a row."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return f"overflow the fp16 gradients for {steps_words(values.get('steps'))} in a row"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        applied = pending.applied_step
        return None if applied is None else healthy_step(sample, applied + pending.burst())


class Spike(ChaosKind):
    title = "loss spike"
    description = (
        "one poisoned optimizer step: its loss is multiplied in the forward pass, so its "
        "gradients (and the optimizer's moments) take the blow as a real bad batch does"
    )
    performer = "trainer"
    order = 60
    recovered_when = "a finite step after the poisoned one"
    kind: Literal["spike"] = "spike"
    factor: float = Field(1000.0, ge=1.0, le=1e6, allow_inf_nan=False)
    """What the step's loss is multiplied by (the loss it reports, trains on and backpropagates)."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return f"multiply the next step's loss (and its gradients) by {values.get('factor'):g}"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        applied = pending.applied_step  # the poisoned step is applied + 1 as telemetry numbers it
        return None if applied is None else healthy_step(sample, applied + 2)
