"""A workload that brings its own LR scheduler (the workload contract's ``lr_scheduler``):
the built-in model and data with a chainable ExponentialLR, which computes each step's lr
from the param group's current one (the case where a multiplier could compound)."""

from __future__ import annotations

from dataclasses import replace

from torch.optim.lr_scheduler import ExponentialLR

from engine.config.run_config import RunConfig
from engine.trainer.workloads.workload import Workload, builtin_workload

GAMMA = 0.8  # lr of 1-based step k: train.lr * GAMMA ** (k - 1)


def build(config: RunConfig) -> Workload:
    return replace(builtin_workload(config), lr_scheduler=lambda optimizer: ExponentialLR(optimizer, GAMMA))
