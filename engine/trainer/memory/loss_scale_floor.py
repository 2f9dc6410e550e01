"""The fp16 loss-scale floor: the dynamic scale cannot go lower and steps keep overflowing.

DeepSpeed 0.19.8 (docs/deepspeed.md, Loss scale): ZeRO's ``DynamicLossScaler``
raises a plain ``Exception("Current loss scale already at minimum ...")`` from the
optimizer step; the stage-0 fp16 optimizer stays at its minimum and skips every step
without a word. ``is_floor_error`` recognises the first; ``FloorWatch`` counts the second
(consecutive skipped steps at the minimum scale). Either way the trainer raises an alert,
checkpoints and stops with that reason: restarting would only overflow again.
"""

from __future__ import annotations

from typing import Any

FLOOR_MESSAGE = "loss scale already at minimum"


def is_floor_error(err: BaseException) -> bool:
    return FLOOR_MESSAGE in str(err).lower()


def min_loss_scale(engine: Any) -> float | None:
    """The optimizer's minimum dynamic loss scale; None without fp16 dynamic scaling."""
    optimizer = engine.optimizer
    config = getattr(optimizer, "loss_scale_config", None)
    if config is not None and getattr(config, "dynamic_loss_scale", True):
        return getattr(config, "min_loss_scale", None)
    scaler = getattr(optimizer, "loss_scaler", None)
    return getattr(scaler, "min_scale", None)


FLOOR_SKIPS = 10
"""fp16 at stage 0: consecutive skipped steps at the minimum loss scale that count as the
floor (an alert, then a stop with a checkpoint). Ten: a few overflows at the floor happen
in a healthy run and recover; ten in a row do not."""


class FloorWatch:
    """Counts consecutive skipped steps taken at the minimum loss scale."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.run = 0

    def note(self, overflow: bool, scale: float | None, minimum: float | None) -> bool:
        """After a step: True once ``limit`` overflowing steps in a row ran at the floor."""
        at_floor = overflow and scale is not None and minimum is not None and scale <= minimum
        self.run = self.run + 1 if at_floor else 0
        return self.run >= self.limit
