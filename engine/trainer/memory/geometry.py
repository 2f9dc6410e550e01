"""Changing DeepSpeed's batch geometry at an optimizer-step boundary.

DeepSpeed 0.19.8 (see docs/deepspeed.md, Batch geometry):
``set_train_micro_batch_size(m)`` keeps GAS (so the global batch changes), then
``set_train_batch_size(T)`` keeps ``m`` and recomputes GAS. The accumulation boundary is
``(micro_steps + 1) % gas == 0`` on a counter that never resets, so ``micro_steps`` is
realigned to a multiple of the new GAS, or the next optimizer step would come after the
wrong number of micro-batches (samples silently skipped).
"""

from __future__ import annotations

from typing import Any

from engine.memory.controller import Geometry


def current_geometry(engine: Any) -> Geometry:
    return Geometry(int(engine.train_micro_batch_size_per_gpu()), int(engine.gradient_accumulation_steps()))


def at_boundary(engine: Any) -> bool:
    """True between optimizer steps (no micro-batch of a window has run)."""
    return engine.micro_steps % engine.gradient_accumulation_steps() == 0


def realign_micro_steps(engine: Any) -> None:
    """Round ``micro_steps`` up to a multiple of the current GAS (a window starts next)."""
    gas = engine.gradient_accumulation_steps()
    engine.micro_steps = -(-engine.micro_steps // gas) * gas


def apply_geometry(engine: Any, geometry: Geometry) -> None:
    """Set micro-batch and GAS (global batch kept by the caller's choice of geometry).

    Call only at an optimizer-step boundary (or after a window was thrown away).
    """
    global_batch = geometry.micro_batch * geometry.grad_accum * int(engine.dp_world_size)
    engine.set_train_micro_batch_size(geometry.micro_batch)
    engine.set_train_batch_size(global_batch)  # ValueError unless it divides exactly
    if hasattr(engine.optimizer, "gradient_accumulation_steps"):  # ZeRO caches it (CPU offload)
        engine.optimizer.gradient_accumulation_steps = geometry.grad_accum
    realign_micro_steps(engine)
