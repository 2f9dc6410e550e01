"""A user's workload that declares no shape (``Workload.shape`` left None): the built-in
model and data, known to memtui by its parameter count alone."""

from __future__ import annotations

from dataclasses import replace

from engine.config.run_config import RunConfig
from engine.trainer.workloads.workload import Workload, builtin_workload


def build(config: RunConfig) -> Workload:
    return replace(builtin_workload(config), shape=None)
