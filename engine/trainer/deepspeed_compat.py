"""Three gaps in DeepSpeed 0.19.8 that the trainer works around, each checked where it applies.

1. fp16 on the CPU. The CPU accelerator reports fp16 as supported only when oneDNN has
   native fp16 kernels (``torch.ops.mkldnn._is_mkldnn_fp16_supported()``: AVX512-FP16/AMX
   parts), and ``deepspeed.initialize`` then refuses ``fp16.enabled``. PyTorch's CPU kernels
   compute fp16 on any x86/ARM CPU (slower, upcast inside), and the point of fp16 on a CPU
   here is to exercise the loss-scaling numerics, so the trainer lets fp16 through.
2. Stage-0 fp16 loss scaling. ``engine.backward`` scales the loss only for ZeRO optimizers
   (and torch autocast); the stage-0 ``FP16_Optimizer`` never sees a scaled loss, yet its
   ``step()`` divides the gradients by the loss scale and reports the norm divided by it.
   Measured: stage-0 fp16 grad norm 3.385 / 4096 vs 3.385 for ZeRO-1 on the same batch.
   ``scaled_for_backward`` multiplies the loss by the current scale before
   ``engine.backward`` when (and only when) the optimizer is such a stage-0 fp16 optimizer.
3. An inference op compiled for training. On the CPU accelerator, the torch backend that
   ``deepspeed.init_distributed`` creates loads the shared-memory all-reduce op
   (``deepspeed_shm_comm``, C++: a ninja build of 20 s to minutes and a compiler, the first
   time in an environment) whenever DeepSpeed finds it compatible
   (``deepspeed/comm/torch.py``, ``build_shm_op``). The only caller of that op is
   ``inference_all_reduce``, which serves the tensor-parallel inference layers of
   ``deepspeed/module_inject``; a training step's all-reduce, reduce-scatter and all-gather
   go through ``torch.distributed`` (gloo) at any number of ranks. ``decline_inference_ops``
   marks the op incompatible before the backend is made: DeepSpeed then loads nothing, and
   ``inference_all_reduce``, were it ever called, falls back to ``torch.distributed``.
"""

from __future__ import annotations

from typing import Any

import torch


def allow_cpu_fp16() -> bool:
    """Let DeepSpeed's CPU accelerator accept fp16; True if it had to be told."""
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu" or accelerator.is_fp16_supported():
        return False
    type(accelerator).is_fp16_supported = lambda self: True  # type: ignore[method-assign]
    return True


INFERENCE_OPS = ("ShareMemCommBuilder",)
"""Builders of ops DeepSpeed loads at start for inference only (gap 3 above)."""


def decline_inference_ops() -> list[str]:
    """Tell DeepSpeed the inference-only ops do not fit here, before ``init_distributed``
    makes its backend (gap 3); returns the names of the ops declined."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    declined = []
    for builder_name in INFERENCE_OPS:
        builder = get_accelerator().create_op_builder(builder_name)
        if builder is not None:
            deepspeed.ops.__compatible_ops__[builder.NAME] = False
            declined.append(builder.NAME)
    return declined


def needs_manual_loss_scale(engine: Any) -> bool:
    """True for a stage-0 fp16 optimizer that engine.backward does not scale for."""
    from deepspeed.runtime.base_optimizer import ZeROOptimizer

    return bool(
        engine.fp16_enabled()
        and not isinstance(engine.optimizer, ZeROOptimizer)
        and not getattr(engine, "torch_autocast_z0_gradscaler", None)
        and hasattr(engine.optimizer, "loss_scale_config")
    )


def scaled_for_backward(engine: Any, loss: torch.Tensor, manual_scale: bool) -> torch.Tensor:
    """``loss`` times the current dynamic loss scale when ``manual_scale`` (see above)."""
    if not manual_scale:
        return loss
    return loss.float() * engine.optimizer.loss_scale_config.cur_scale
