"""Throwing away an accumulation window that ran out of memory, so it can be redone.

An out-of-memory error (``torch.cuda.OutOfMemoryError``; on the CPU ``MemoryError`` or an
allocator's RuntimeError) inside forward or backward leaves a window half done: some
micro-batches' gradients accumulated, ``micro_steps`` advanced, no optimizer step taken
(``global_steps`` and ``global_samples`` only move at the boundary). ``discard_window``
puts the engine back where the window began: gradients zeroed, ZeRO's reduction
bookkeeping reset, ``micro_steps`` realigned (see geometry.py), memory released (after
``drop_frames``: the error's traceback would otherwise keep the activations alive). The
caller then shrinks the micro-batch and redoes the window from its first sample.

DeepSpeed 0.19.8 (docs/deepspeed.md, An OOM inside backward): stage 0/1 need only ``zero_grad``; stage 2
fails on the next backward ("has already been reduced") unless its bookkeeping is reset
too, and on CUDA only after the device is synchronized (with ``overlap_comm`` the window's
reductions may still be queued on DeepSpeed's side stream, reading the buckets freed
here); at stage 3 ``zero_grad`` itself fails on the CPU, so a stage-3 window is not redone in place
(``recoverable_in_place`` is False) and the trainer restarts instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import traceback
from typing import Any

import torch

from engine.trainer.memory.geometry import realign_micro_steps

YOUNG_GENERATIONS = 1  # gc.collect(1): generations 0 and 1
FULL = 2  # gc.collect(2): every generation
_ALLOCATOR_MESSAGES = ("out of memory", "cannot allocate memory", "failed to allocate", "defaultcpuallocator")


def is_oom(err: BaseException) -> bool:
    """True for an out-of-memory error from any allocator torch uses."""
    if isinstance(err, MemoryError):
        return True
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(err, oom_type):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err).lower() for m in _ALLOCATOR_MESSAGES)


def recoverable_in_place(engine: Any) -> bool:
    """False at ZeRO stage 3 (its zero_grad cannot run after a broken backward on the CPU)."""
    return int(engine.zero_optimization_stage()) < 3


def redone_in_place(engine: Any, world_size: int) -> bool:
    """False where an OOM's step is left to a restart from the newest checkpoint: at ZeRO-3,
    or with several ranks (the others are already inside the step's collectives)."""
    return recoverable_in_place(engine) and world_size == 1


def discard_window(engine: Any) -> None:
    """Undo a partial accumulation window: no optimizer step, no sample counted."""
    optimizer = engine.optimizer
    drain_device(engine)  # before any bucket or gradient the queued kernels read is freed
    if hasattr(optimizer, "ipg_buckets"):  # ZeRO 1/2 (DeepSpeedZeroOptimizer)
        reset_zero_reduction(optimizer)
    if hasattr(optimizer, "zero_grad"):
        optimizer.zero_grad()
    engine.zero_grad()  # param.grad = None on the module's parameters
    engine.losses = None  # the engine's running loss for monitors
    realign_micro_steps(engine)
    release_memory()


def drain_device(engine: Any) -> None:
    """CUDA: wait for every kernel queued on the engine's device, on every stream (ZeRO-2's
    ``overlap_comm`` reduces on a side stream). The CPU runs eagerly: nothing to wait for."""
    device = getattr(engine, "device", None)
    if isinstance(device, torch.device) and device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_zero_reduction(optimizer: Any) -> None:
    """ZeRO-1/2's per-window reduction state, as at the start of a window."""
    from deepspeed.runtime.zero.stage_1_and_2 import INITIAL_MICRO_STEP_ID

    if hasattr(optimizer, "params_already_reduced"):
        optimizer.params_already_reduced = [False] * len(optimizer.params_already_reduced)
    for bucket in optimizer.ipg_buckets.values():
        bucket.clear()
    if getattr(optimizer, "partition_gradients", False):
        optimizer.reset_partition_gradient_structures()
    averaged = getattr(optimizer, "averaged_gradients", None)
    if isinstance(averaged, dict):
        averaged.clear()
    if hasattr(optimizer, "extra_large_param_to_reduce"):
        optimizer.extra_large_param_to_reduce.clear()
    if hasattr(optimizer, "_release_ipg_buffers"):
        optimizer._release_ipg_buffers()  # partial sums in grads_in_partition go too
    optimizer.micro_step_id = INITIAL_MICRO_STEP_ID  # the next backward is a window's first


def drop_frames(err: BaseException) -> None:
    """Clear the locals of the frames ``err``'s traceback holds (the failed forward's or
    backward's, with their activations), so the memory is free before the window is redone,
    not when the handler ends. The traceback keeps its file and line numbers; a frame still
    running (the handler's own) is left as it is."""
    traceback.clear_frames(err.__traceback__)


def release_memory(collect: bool = True) -> None:
    """Free what a failed window held: Python cycles (``collect``), then the CUDA cache; on
    the CPU hand glibc's free heap back to the OS, or the RSS (our CPU stand-in) stays high.

    The cycles a failed window leaves are young. On the CPU only the young generations are
    collected: with torch and DeepSpeed loaded a full collection took 0.11-0.12 s per OOM on
    the 2-core machine and, after one of generations 0-1 (under 1 ms), found nothing more
    (bench/budget_runs.py, tiny). On CUDA, where a missed cycle could hold device memory
    and 0.1 s is nothing next to a step, the collection is full. A boundary shrink made no
    cycles: ``collect=False``."""
    cuda = torch.cuda.is_available()
    if collect:
        gc.collect(FULL if cuda else YOUNG_GENERATIONS)
    if cuda:
        torch.cuda.empty_cache()
    else:
        trim_heap()


def trim_heap() -> None:
    """glibc ``malloc_trim(0)``; a no-op where there is no glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
