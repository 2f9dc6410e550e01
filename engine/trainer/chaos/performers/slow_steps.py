"""``slow_steps``: each of the next K steps sleeps a delay + uniform(0, ``jitter`` x delay)
inside the controlled step, on every rank or on the one rank the request names. The delay is
``delay_s`` when given, else ``factor - 1`` times the last step's wall time before the
injection (the controller's ``step_seconds``), fixed for the whole burst."""

from __future__ import annotations

import random
import time
from typing import Any

import torch

from engine.chaos.kind import EVERY_RANK
from engine.chaos.kinds.slow_steps import SlowSteps
from engine.trainer.chaos.performer import StepFn, TrainerPerformer
from engine.trainer.workloads.workload import BatchFn

FIRST_STEP_GUESS_S = 0.1
"""s taken as the step time when the injection lands before any step has been timed."""


class SlowStepsPerformer(TrainerPerformer[SlowSteps]):
    model = SlowSteps
    steps = 0
    """Steps left that sleep ``delay_s`` + uniform(0, ``jitter_s``) first."""
    delay_s = 0.0
    jitter_s = 0.0
    rng = random.Random(0)

    def start(self, request: SlowSteps, step: int, chaos_id: str) -> str:
        world, rank = self.parts.memory.ranks.world, self.parts.memory.ranks.rank
        every = request.rank == EVERY_RANK
        on = "" if every else f" on rank {request.rank}"
        if request.rank >= world:
            return f"no rank {request.rank} among {world}: nothing done"
        delay_s, basis = self._delay(request)
        if every or request.rank == rank:
            self.steps, self.delay_s, self.jitter_s = request.steps, delay_s, request.jitter * delay_s
            self.rng = random.Random(chaos_id)  # the same request, the same delays
        return f"{request.steps} steps slowed by {delay_s:.3f} s (+ up to {request.jitter:.0%}){basis}{on}"

    def _delay(self, request: SlowSteps) -> tuple[float, str]:
        """Seconds added to each slowed step, and what they came from (for the message)."""
        if request.delay_s > 0:
            return request.delay_s, ""
        step_s = self.parts.memory.step_seconds or FIRST_STEP_GUESS_S
        return (request.factor - 1.0) * step_s, f", {request.factor}x a {step_s:.3f} s step"

    def in_step(self, train_step: StepFn, step: int) -> StepFn:
        if not self.steps:
            return train_step
        self.steps -= 1
        delays = [self.delay_s + self.rng.uniform(0.0, self.jitter_s)]  # once, not per OOM retry

        def slowed(engine: Any, batch: BatchFn, at: int) -> torch.Tensor:
            if delays:
                time.sleep(delays.pop())
            return train_step(engine, batch, at)

        return slowed
