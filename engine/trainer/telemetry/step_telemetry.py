"""One TelemetrySample per optimizer step, read from DeepSpeed's engine after ``step()``.

Where DeepSpeed keeps the numbers (0.19.8; see docs/deepspeed.md):
- loss scale: stage-0 fp16 optimizers hold ``loss_scale_config.cur_scale``; ZeRO holds
  ``loss_scaler.cur_scale``; bf16 and fp32 have no dynamic scale (reported as None).
- grad norm: ``engine.get_global_grad_norm()``; the CPU's stage-0 ``FP16_UnfusedOptimizer``
  stores it still multiplied by the loss scale, so it is divided by the step's scale here.
  Plain fp32 at stage 0 computes none (None).
- overflow: ``engine.was_step_applied()`` is False when fp16 skipped the step.

Tokens are ``tokens_per_sample`` per sample, or, when sequence lengths vary, the tokens
each step trained (``StepLengths``, padding left out), counted every step.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from engine.domain import RankMemory, TelemetrySample
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.telemetry.mfu_meter import MfuMeter
from engine.trainer.workloads.step_lengths import StepLengths

_SCALED_NORM_OPTIMIZERS = {"FP16_UnfusedOptimizer"}  # report grad norm x loss scale


def loss_scale(engine: Any) -> float | None:
    """The dynamic fp16 loss scale now, or None when fp16 is off."""
    if not engine.fp16_enabled():
        return None
    optimizer = engine.optimizer
    for holder in (getattr(optimizer, "loss_scale_config", None), getattr(optimizer, "loss_scaler", None)):
        scale = getattr(holder, "cur_scale", None)
        if scale is not None:
            return float(scale)
    return None


def grad_norm(engine: Any, scale_during_step: float | None) -> float | None:
    """Global gradient norm of the last step, before clipping, unscaled."""
    norm = engine.get_global_grad_norm()
    if norm is None:
        return None
    norm = float(norm.item() if isinstance(norm, torch.Tensor) else norm)
    if scale_during_step and type(engine.optimizer).__name__ in _SCALED_NORM_OPTIMIZERS:
        norm /= scale_during_step
    return norm


class StepTelemetry:
    """Builds samples; keeps the running counts that span steps (overflows)."""

    def __init__(
        self,
        engine: Any,
        probe: MemoryProbe,
        tokens_per_sample: int,
        world_size: int,
        attempt: int,
        overflow_count: int = 0,
        meter: MfuMeter | None = None,
        lengths: StepLengths | None = None,
        tokens: int = 0,
    ) -> None:
        self.engine = engine
        self.lengths = lengths
        """The tokens of each step when sequence lengths vary (None: tokens_per_sample each)."""
        self.tokens = tokens
        """With ``lengths``: tokens trained so far in the run (restored on resume)."""
        self.step_tokens = 0
        """With ``lengths``: tokens the last step trained (over every rank)."""
        self.meter = meter
        """FLOPs per token and the device's peak: MFU per step (None: not reported)."""
        self.probe = probe
        self.tokens_per_sample = tokens_per_sample
        self.world_size = world_size
        self.attempt = attempt
        self.overflow_count = overflow_count
        """fp16 overflows so far in this run (restored from the checkpoint on resume)."""
        self.checkpoint_stall_s: float | None = None
        """Stall of a save not yet reported; the next sample carries it, then it clears."""
        self.eval_s: float | None = None
        """Seconds of evals not yet reported; the next sample carries them, then it clears."""
        self.ranks: list[RankMemory] | None = None
        """Every rank's memory from the last exchange, not yet reported (several ranks)."""

    def peak_fields(self) -> dict[str, Any]:
        """What ``trainer_started`` says about the MFU's terms."""
        if self.meter is None:
            return {}
        m = self.meter
        return {
            "flops_per_token": m.flops_per_token,
            "peak_tflops": m.peak_tflops,
            "peak_source": m.peak_source,
        }

    def note_step(self) -> bool:
        """Count this step's overflow (every step, reported or not); True if it overflowed."""
        overflow = not self.engine.was_step_applied()
        self.overflow_count += overflow
        if self.lengths is not None:
            self.step_tokens = self.lengths.tokens(int(self.engine.global_steps) - 1)  # the step just done
            self.tokens += self.step_tokens
        return overflow

    def sample(
        self,
        loss: float,
        lr: float,
        scale_during_step: float | None,
        overflow: bool,
        step_time_s: float,
        data_wait_s: float | None = None,
        memory_figures: dict[str, int | None] | None = None,
        metrics: dict[str, float] | None = None,
    ) -> TelemetrySample:
        """``memory_figures``: mem_step_peak, mem_predicted, mem_budget, mem_baseline (adaptive memory);
        ``metrics``: the workload's own scalars, screened (``step_metrics``)."""
        engine = self.engine
        samples = engine.global_samples  # over all ranks, restored on resume
        if self.lengths is None:
            step_tokens, tokens = (
                engine.train_batch_size() * self.tokens_per_sample,
                samples * self.tokens_per_sample,
            )
        else:
            step_tokens, tokens = self.step_tokens, self.tokens
        memory = self.probe.read()
        stall, self.checkpoint_stall_s = self.checkpoint_stall_s, None
        eval_s, self.eval_s = self.eval_s, None
        ranks, self.ranks = self.ranks, None
        tokens_per_s = step_tokens / step_time_s if step_time_s > 0 else 0.0
        utilisation = self.meter.figures(tokens_per_s) if self.meter else {}
        return TelemetrySample(
            step=engine.global_steps,
            ts=time.time(),
            attempt=self.attempt,
            samples=samples,
            tokens=tokens,
            loss=loss,
            lr=lr,
            grad_norm=None if overflow else _finite_or_none(grad_norm(engine, scale_during_step)),
            loss_scale=loss_scale(engine),
            overflow=overflow,
            overflow_count=self.overflow_count,
            skipped_steps=engine.skipped_steps,
            step_time_s=step_time_s,
            tokens_per_s=tokens_per_s,
            **utilisation,
            mem_allocated=memory.allocated,
            mem_reserved=memory.reserved,
            mem_peak=memory.peak,
            mem_process_peak=memory.process_peak,
            mem_capacity=memory.capacity,
            mem_kind=memory.kind,
            mem_device_used=self.probe.device_used(),
            mem_fragmentation=self.probe.fragmentation() if memory.kind == "cuda" else None,
            micro_batch=engine.train_micro_batch_size_per_gpu(),
            grad_accum=engine.gradient_accumulation_steps(),
            world_size=self.world_size,
            checkpoint_stall_s=stall,
            eval_s=eval_s,
            data_wait_s=data_wait_s,
            ranks=ranks,
            metrics=metrics,
            **(memory_figures or {}),
        )


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
