"""The trainer's active chaos injections: what the supervisor asked for, in force step by step.

The supervisor sends ``InjectChaos`` (engine.chaos_kinds' trainer-side kinds); the link
queues it and the loop consults one ``ChaosInjections`` at fixed points::

    chaos.at_boundary(step)       queued requests take effect (one ``chaos_applied`` each)
    chaos.run_step(memory, ...)   slow steps sleep; NaN loss / overflow poison (or skip) the
                                  step; a spike multiplies one step's loss
    with chaos.saving(): save     the next K saves fail as on a full disk

Each kind goes through the code its start-time environment variable uses: ``ballast`` and
``release`` plan the ``Ballast`` schedule (held from this step), ``oom`` adds an injection
to the ``OomInjector`` (the next step's first micro-batch; adaptive memory recovers it as
any OOM), ``disk_full`` is ``full_disk`` around the save.

Non-finite loss, per precision (shared/DEEPSPEED-NOTES.md, Loss scale):
- fp16: the loss is multiplied by NaN/inf in a forward hook; its gradients are not finite,
  DeepSpeed's overflow check skips the step and lowers the loss scale (as a real one).
  ``overflow`` keeps the loss as it is and makes only the gradients infinite (an identity
  whose backward multiplies by inf): the burst real fp16 overflow is.
- fp32, bf16: DeepSpeed applies non-finite gradients (the weights would become NaN), so
  the trainer skips the step itself (``skipped_step``): the window's forward and backward
  run (the memory a step uses), the gradients are thrown away, no optimizer or LR step,
  and the step is counted skipped as DeepSpeed counts an fp16 overflow. The step reports
  the injected loss. ``overflow`` does not apply there (no loss scale): ``chaos_applied``
  says so in its ``detail`` and nothing else happens.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch

from engine.chaos_kinds import (
    EVERY_RANK,
    Ballast,
    DiskFull,
    NanLoss,
    Oom,
    Overflow,
    Release,
    SlowSteps,
    Spike,
)
from engine.events import ChaosApplied
from engine.protocol import InjectChaos
from engine.trainer.disk_full_injection import full_disk
from engine.trainer.forward_output import split_output
from engine.trainer.oom_injection import Injection
from engine.trainer.oom_recovery import discard_window, is_oom
from engine.trainer.workload import BatchFn

log = logging.getLogger(__name__)

StepFn = Callable[[Any, BatchFn, int], torch.Tensor]


class ChaosInjections:
    """The injections in force; ``memory`` is the loop's AdaptiveMemory (ballast, OOM hooks)."""

    def __init__(self, engine: Any, memory: Any, link: Any, precision: str) -> None:
        self.engine = engine
        self.memory = memory
        self.link = link
        self.fp16 = precision == "fp16"
        self.precision = precision
        inbox = getattr(link, "chaos", None)  # an empty deque is falsy: test for None
        self.inbox: deque[InjectChaos] = inbox if inbox is not None else deque()
        self.nan_steps = 0
        """Steps left whose loss is ``nan_value``."""
        self.nan_value = float("nan")
        self.overflow_steps = 0
        """fp16 steps left whose gradients overflow."""
        self.spike_factor: float | None = None
        """The next step's loss is multiplied by this (a poisoned batch); None: no spike."""
        self.slow_steps = 0
        """Steps left that sleep ``delay_s`` + uniform(0, ``jitter_s``) first."""
        self.delay_s = 0.0
        self.jitter_s = 0.0
        self.rng = random.Random(0)
        self.failing_saves = 0
        """Saves left that fail as on a full disk."""

    # --------------------------------------------------------------- the boundary

    def at_boundary(self, step: int) -> None:
        """Before step ``step`` (0-based): queued requests take effect from this step on."""
        while self.inbox:
            message = self.inbox.popleft()
            kind = message.request.kind
            detail = self._start(message, step)
            if detail is None:
                continue
            applied = ChaosApplied(chaos_id=message.chaos_id, kind=kind, step=step, detail=detail)
            self.link.event(applied, f"chaos {kind} ({message.chaos_id}) at step {step}: {detail}")

    def _start(self, message: InjectChaos, step: int) -> str | None:
        """Put one request in force; what it does, in words (None: not the trainer's)."""
        request = message.request
        if isinstance(request, Ballast):
            return self._hold(request, step)
        if isinstance(request, Release):
            had = self.memory.ballast.held
            self.memory.ballast.plan(step, 0)
            return f"ballast released ({had} bytes held)"
        if isinstance(request, Oom):
            injector = self.memory.injector
            injector.add(Injection(step, 0, request.phase), self.memory.module)
            injector.position = (step, 0, int(self.engine.train_micro_batch_size_per_gpu()))
            return f"out of memory in the {request.phase} of this step's first micro-batch"
        if isinstance(request, NanLoss):
            self.nan_steps, self.nan_value = request.steps, float(request.value)
            how = "DeepSpeed skips them" if self.fp16 else "the trainer skips them"
            return f"loss {request.value} for {request.steps} steps ({how})"
        if isinstance(request, Overflow):
            if not self.fp16:
                return f"not applicable in {self.precision} (no loss scale to overflow): nothing done"
            self.overflow_steps = request.steps
            return f"fp16 gradients overflow for {request.steps} steps"
        if isinstance(request, Spike):
            self.spike_factor = request.factor
            return f"this step's loss (and its gradients) multiplied by {request.factor:g}"
        if isinstance(request, SlowSteps):
            return self._slow(request, message.chaos_id)
        if isinstance(request, DiskFull):
            self.failing_saves += request.saves
            return f"the next {self.failing_saves} saves fail as on a full disk"
        log.warning("chaos %s (%s) is not the trainer's to perform: ignored", request.kind, message.chaos_id)
        return None

    def _slow(self, request: SlowSteps, chaos_id: str) -> str:
        """Slow steps on every rank, or on the one rank the request names."""
        world, rank = self.memory.ranks.world, self.memory.ranks.rank
        every = request.rank == EVERY_RANK
        on = "" if every else f" on rank {request.rank}"
        if request.rank >= world:
            return f"no rank {request.rank} among {world}: nothing done"
        if every or request.rank == rank:
            self.slow_steps, self.delay_s, self.jitter_s = request.steps, request.delay_s, request.jitter_s
            self.rng = random.Random(chaos_id)  # the same request, the same delays
        return f"{request.steps} steps slowed by {request.delay_s} s (+ up to {request.jitter_s} s){on}"

    def _hold(self, request: Ballast, step: int) -> str:
        """Ballast planned and allocated now, so that a size the host cannot give is said
        (and none held) rather than ending the trainer at the next boundary."""
        ballast = self.memory.ballast
        ballast.plan(step, request.bytes, request.steps)
        try:
            ballast.at_step(step)
        except Exception as err:
            if not is_oom(err):
                raise
            ballast.plan(step, 0)
            ballast.at_step(step)
            return f"{request.bytes} bytes of ballast could not be allocated ({err}); none held"
        held = f"for {request.steps} steps" if request.steps else "until released"
        return f"{request.bytes} bytes of ballast held {held}"

    # ---------------------------------------------------------------- the step

    def run_step(self, memory: Any, train_step: StepFn, engine: Any, batch: BatchFn, step: int) -> Any:
        """``memory.run_step(train_step, ...)`` with whatever is in force for this step."""
        if self.slow_steps:
            self.slow_steps -= 1
            time.sleep(self.delay_s + self.rng.uniform(0.0, self.jitter_s))
        if self.nan_steps:
            self.nan_steps -= 1
            value = self.nan_value
            if not self.fp16:
                return memory.run_step(lambda e, b, s: skipped_step(e, b, s, value), engine, batch, step)
            with _forward_hook(self.memory.module, lambda out: out * value):
                return memory.run_step(train_step, engine, batch, step)
        if self.spike_factor is not None:
            factor, self.spike_factor = self.spike_factor, None
            with _forward_hook(self.memory.module, lambda out: out * factor):  # trained on, not only shown
                return memory.run_step(train_step, engine, batch, step)
        if self.overflow_steps:
            self.overflow_steps -= 1
            with _forward_hook(self.memory.module, _InfiniteGradient.apply):
                return memory.run_step(train_step, engine, batch, step)
        return memory.run_step(train_step, engine, batch, step)

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Around one checkpoint save: it fails as on a full disk while saves are to fail."""
        if not self.failing_saves:
            yield
            return
        self.failing_saves -= 1
        with full_disk(self.engine):
            yield


def skipped_step(engine: Any, batch: BatchFn, step: int, loss: float) -> torch.Tensor:
    """One optimizer step's window run and thrown away, counted as a skipped step.

    What DeepSpeed's fp16 overflow path does (``_take_model_step``), for precisions where
    it would apply the step: no optimizer step, no LR step, ``skipped_steps`` and the step
    and sample counters advanced, ``was_step_applied()`` False. Returns ``loss`` (0-dim).
    """
    grad_accum = engine.gradient_accumulation_steps()
    micro_batch = engine.train_micro_batch_size_per_gpu()
    for micro in range(grad_accum):
        inputs = [t.to(engine.device, non_blocking=True) for t in batch(step, micro, micro_batch)]
        engine.backward(split_output(engine(*inputs))[0])  # the workload's scalars unreported
        if micro < grad_accum - 1:
            engine.step()  # inside the window: no optimizer step, the micro-step counted
    discard_window(engine)  # gradients and ZeRO's reduction state gone; a window starts next
    engine.skipped_steps += 1
    engine.global_steps += 1
    engine.global_samples += engine.train_batch_size()
    engine._step_applied = False  # what was_step_applied() reads
    return torch.full((), loss, device=engine.device)


class _InfiniteGradient(torch.autograd.Function):
    """The identity forward; the backward multiplies the gradient by inf (an overflow)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf")


@contextlib.contextmanager
def _forward_hook(module: torch.nn.Module, change: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """The workload's forward (its scalar loss) passed through ``change`` while inside; a
    forward that returns ``(loss, named)`` keeps its named values as they are."""

    def hook(_module: torch.nn.Module, _inputs: object, out: object) -> object:
        loss, named = split_output(out)
        return (change(loss), named) if isinstance(out, tuple) else change(loss)

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
