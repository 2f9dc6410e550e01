"""``nan_loss``, ``overflow`` and ``spike``: the step's loss or gradients poisoned inside it.

Non-finite loss, per precision (docs/deepspeed.md, Loss scale):
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
A spike multiplies one step's loss in the forward: it is trained on, not only shown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from engine.chaos.kinds.numerics import NanLoss, Overflow, Spike
from engine.trainer.chaos.performer import StepFn, TrainerPerformer
from engine.trainer.memory.oom_recovery import discard_window
from engine.trainer.workloads.forward_output import split_output
from engine.trainer.workloads.workload import BatchFn


class NanLossPerformer(TrainerPerformer[NanLoss]):
    model = NanLoss
    steps = 0
    """Steps left whose loss is ``value``."""
    value = float("nan")

    def start(self, request: NanLoss, step: int, chaos_id: str) -> str:
        self.steps, self.value = request.steps, float(request.value)
        how = "DeepSpeed skips them" if self.parts.fp16 else "the trainer skips them"
        return f"loss {request.value} for {request.steps} steps ({how})"

    def in_step(self, train_step: StepFn, step: int) -> StepFn:
        if not self.steps:
            return train_step
        self.steps -= 1
        value = self.value
        if not self.parts.fp16:
            return lambda e, b, s: skipped_step(e, b, s, value)
        return poisoned(train_step, self.parts.memory.module, lambda out: out * value)


class OverflowPerformer(TrainerPerformer[Overflow]):
    model = Overflow
    steps = 0
    """fp16 steps left whose gradients overflow."""

    def start(self, request: Overflow, step: int, chaos_id: str) -> str:
        if not self.parts.fp16:
            return f"not applicable in {self.parts.precision} (no loss scale to overflow): nothing done"
        self.steps = request.steps
        return f"fp16 gradients overflow for {request.steps} steps"

    def in_step(self, train_step: StepFn, step: int) -> StepFn:
        if not self.steps:
            return train_step
        self.steps -= 1
        return poisoned(train_step, self.parts.memory.module, _InfiniteGradient.apply)


class SpikePerformer(TrainerPerformer[Spike]):
    model = Spike
    factor: float | None = None
    """The next step's loss is multiplied by this (a poisoned batch); None: no spike."""

    def start(self, request: Spike, step: int, chaos_id: str) -> str:
        self.factor = request.factor
        return f"this step's loss (and its gradients) multiplied by {request.factor:g}"

    def in_step(self, train_step: StepFn, step: int) -> StepFn:
        if self.factor is None:
            return train_step
        factor, self.factor = self.factor, None
        return poisoned(train_step, self.parts.memory.module, lambda out: out * factor)


def poisoned(
    train_step: StepFn, module: torch.nn.Module, change: Callable[[torch.Tensor], torch.Tensor]
) -> StepFn:
    """``train_step`` with the workload's forward passed through ``change`` while it runs."""

    def step_fn(engine: Any, batch: BatchFn, step: int) -> torch.Tensor:
        with forward_hook(module, change):
            return train_step(engine, batch, step)

    return step_fn


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
def forward_hook(module: torch.nn.Module, change: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
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
