"""Controller policies for the controller's pure tests, built from a real ``MemoryConfig``
(the one place the controller's thresholds are declared)."""

from __future__ import annotations

from typing import Any

from engine.config.run_config import MemoryConfig
from engine.memory.controller import Policy


def policy_of(global_batch: int, world_size: int = 1, max_micro_batch: int = 1, **memory: Any) -> Policy:
    """The policy for ``global_batch`` samples over ``world_size`` ranks, micro-batches up to
    ``max_micro_batch``, the ``memory`` section's keys as given (its defaults otherwise)."""
    section = MemoryConfig(max_micro_batch=max_micro_batch, **memory)
    return Policy(section, global_batch, world_size, max_micro_batch)
