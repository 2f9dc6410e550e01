"""A hung step: the trainer blocks inside one optimizer step for a while, as a hung collective
would, so that an operator rehearses the heartbeat alert (``alerts.no_step_s``), the stack
collection and the hang recovery (``restart.hang_s``). Performed by the trainer
(``engine.trainer.chaos.performers.hang``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from engine.chaos.kind import EVERY_RANK, ChaosKind, Pending
from engine.domain import TelemetrySample

DEFAULT_HANG_S = 900.0  # s: past the heartbeat alert's and the hang recovery's defaults (600 s)


class Hang(ChaosKind):
    title = "hung step"
    description = (
        "the trainer blocks inside the next step as in a hung collective: the heartbeat alert, "
        "the stack collection and the hang recovery (restart.hang_s) are rehearsed"
    )
    performer = "trainer"
    order = 85
    recovered_when = "the hung step completes, or the hang recovery's restart trains"
    owned_by_the_trainer = True  # a hang recovery's restart ends it
    scheduled_by_default = False  # minutes without a step: asked for, never drawn unasked
    kind: Literal["hang"] = "hang"
    seconds: float = Field(DEFAULT_HANG_S, ge=1.0, le=86400.0, allow_inf_nan=False)
    """Seconds the step blocks (a hang recovery may kill the trainer first)."""
    rank: int = Field(EVERY_RANK, ge=EVERY_RANK, le=65535)
    """Only this (global) rank blocks (the others wait for it in the collectives); -1: every rank."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        alone = "" if values.get("rank", EVERY_RANK) == EVERY_RANK else f" on rank {values.get('rank')} alone"
        return f"block the next step for {values.get('seconds'):g} s{alone}, as a hung collective does"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        """The hung step (applied + 1, as telemetry numbers it) completed."""
        applied = pending.applied_step
        if applied is not None and sample.step > applied:
            return f"step {sample.step} completed after the hang"
        return None
