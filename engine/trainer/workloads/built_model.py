"""The description of the model this trainer built (``engine.memory.model_description``):
its parameters counted from the module, its shape from the workload (built-in, Hugging
Face or declared by a user's workload), and where it came from. Built once at start; MFU,
the memory prior, the planned memory and ``trainer_started`` all read it."""

from __future__ import annotations

import torch

from engine.config.run_config import RunConfig
from engine.memory.model_description import ModelDescription, describe
from engine.trainer.workloads.model import parameter_count
from engine.trainer.workloads.workload import Workload


def describe_built(workload: Workload, config: RunConfig) -> ModelDescription:
    """``workload``'s model as built (before or after ``deepspeed.initialize``: a ZeRO-3
    shard counts its whole parameter through ``ds_numel``)."""
    module = workload.model
    return describe(
        parameter_count(module), largest_module_params(module), model_source(config), workload.shape
    )


def model_source(config: RunConfig) -> str:
    if config.hf.model_dir is not None:
        return f"{config.hf.model_dir}/config.json"
    if config.workload is not None:
        return f"workload {config.workload}"
    return "built-in"


def largest_module_params(module: torch.nn.Module) -> int:
    """Parameters held directly by the largest single submodule (ZeRO-3 gathers one at a time)."""
    return max((_own_params(m) for m in module.modules()), default=0)


def _own_params(module: torch.nn.Module) -> int:
    return sum(getattr(p, "ds_numel", p.numel()) for p in module.parameters(recurse=False))


def describe_module(module: torch.nn.Module) -> ModelDescription:
    """A bare module, its parameters alone (no workload to give its shape)."""
    return describe(parameter_count(module), largest_module_params(module), "module", None)
