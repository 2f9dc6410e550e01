"""The DeepSpeed config dict, built from a RunConfig (a pure function: no DeepSpeed import).

Ours are the batch geometry, precision, ZeRO stage and clipping (``domain.OWNED_DEEPSPEED_KEYS``):
they come from the RunConfig whatever the user's ``deepspeed_config`` says. Everything else
of the user's passes through and wins over our defaults (optimizer, logging...). The lr
schedule is not here: see lr_schedule.py (a user's ``scheduler`` key still replaces it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from engine.config.config_file import deep_merge
from engine.config.run_config import RunConfig

QUIET_STEPS_PER_PRINT = 10**12  # DeepSpeed prints a progress line every N steps: never


def grad_accum_steps(global_batch: int, micro_batch: int, world_size: int) -> int:
    """Micro-batches per optimizer step on one rank; the geometry must divide exactly."""
    per_step = micro_batch * world_size
    if global_batch % per_step:
        raise ValueError(
            f"global_batch {global_batch} is not a multiple of "
            f"micro_batch {micro_batch} x world_size {world_size}"
        )
    return global_batch // per_step


def precision_section(config: RunConfig) -> dict[str, Any]:
    """fp16 with dynamic loss scaling (loss_scale 0), bf16, or neither (fp32)."""
    precision = config.train.precision
    return {
        "fp16": {
            "enabled": precision == "fp16",
            "loss_scale": 0,  # 0 = dynamic
            "initial_scale_power": config.train.initial_scale_power,
        },
        "bf16": {"enabled": precision == "bf16"},
    }


def defaults(config: RunConfig) -> dict[str, Any]:
    """Our choices that a user's deepspeed_config may override."""
    train = config.train
    return {
        "optimizer": {
            "type": "AdamW",
            # torch_adam: torch.optim.AdamW instead of DeepSpeed's FusedAdam, which is built
            # with ninja on first use (minutes on 2 cores, and a killed build leaves a lock
            # in ~/.cache/torch_extensions that hangs every later start).
            "params": {
                "lr": train.lr,
                "weight_decay": train.weight_decay,
                "betas": [0.9, 0.95],
                "eps": 1e-8,
                "torch_adam": True,
            },
        },
        "steps_per_print": QUIET_STEPS_PER_PRINT,
        "wall_clock_breakdown": False,
    }


def owned(config: RunConfig, world_size: int) -> dict[str, Any]:
    """The keys memtui sets from the RunConfig (see domain.OWNED_DEEPSPEED_KEYS)."""
    train = config.train
    return {
        "train_batch_size": train.global_batch,
        "train_micro_batch_size_per_gpu": train.micro_batch,
        "gradient_accumulation_steps": grad_accum_steps(train.global_batch, train.micro_batch, world_size),
        **precision_section(config),
        "zero_optimization": {"stage": train.zero_stage},
        "gradient_clipping": train.grad_clip,
    }


def build_deepspeed_config(config: RunConfig, world_size: int = 1) -> dict[str, Any]:
    """defaults <- user's deepspeed_config <- owned keys (later wins), deep-merged."""
    merged = deep_merge(defaults(config), copy.deepcopy(config.deepspeed_config or {}))
    # Owned keys last: a user's fp16 sub-keys (loss_scale_window, hysteresis) pass through,
    # but "enabled", the batch geometry and the ZeRO stage are always ours.
    return deep_merge(merged, owned(config, world_size))


def required_ops(ds_config: Mapping[str, Any]) -> list[str]:
    """The ops a DeepSpeed config cannot run without (a best effort for the common optimizers).

    memtui's own config (``engine.config.deepspeed_config.defaults``) sets ``torch_adam``:
    the optimizer is torch's AdamW, so no op is required and a default run is never degraded
    by an op it cannot build. A user's ``deepspeed_config`` may ask for DeepSpeed's own:
    Adam/AdamW without ``torch_adam`` is ``fused_adam`` (``cpu_adam`` with the optimizer
    offloaded to the CPU), Lion is ``fused_lion``/``cpu_lion``, offloaded Adagrad ``cpu_adagrad``.
    """
    optimizer = ds_config.get("optimizer") or {}
    kind = str(optimizer.get("type", "")).lower()
    params = optimizer.get("params") or {}
    offload = (ds_config.get("zero_optimization") or {}).get("offload_optimizer") or {}
    on_cpu = offload.get("device") in ("cpu", "nvme")
    if kind in ("adam", "adamw") and not params.get("torch_adam"):
        return ["cpu_adam" if on_cpu else "fused_adam"]
    if kind == "lion":
        return ["cpu_lion" if on_cpu else "fused_lion"]
    if kind == "adagrad" and on_cpu:
        return ["cpu_adagrad"]
    return []
