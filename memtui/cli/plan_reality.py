"""Plan against reality: a run's measured peak beside what ``memtui plan`` predicts for its
configuration at the micro-batch it measured, so the planner's error is visible.

Reads the run's store read-only: the step with the largest measured step peak
(``mem_step_peak``: CUDA's max allocated in the step, the CPU's RSS after a forward).
Torch-free.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.memory.capacity_plan import PlanRequest

PEAK_QUERY = (
    "SELECT step, mem_step_peak, micro_batch, world_size, mem_kind FROM steps"
    " WHERE mem_step_peak IS NOT NULL ORDER BY mem_step_peak DESC LIMIT 1"
)


@dataclass(frozen=True)
class Measured:
    """The run's measured peak and the plan's figure for the same geometry."""

    run: str
    step: int
    micro_batch: int
    world_size: int
    memory_kind: str
    """``cuda`` or ``cpu-rss`` (the process's resident memory stands in on a CPU)."""
    measured_peak: int
    predicted_peak: int
    ratio: float
    """predicted / measured: above 1 the plan was cautious, below 1 it under-counted."""


def measured_against(run_path: Path, request: PlanRequest) -> Measured | None:
    """None when the run has no measured step yet (or no readable store)."""
    from engine.memory.capacity_plan import activation_bytes, per_gpu_bytes
    from engine.memory.model import model_state_bytes
    from engine.run.store import Store, StoreError

    store_path = run_path / "telemetry.sqlite"
    if not store_path.exists():
        return None
    try:
        with Store(store_path, readonly=True) as store:
            rows = store.query(PEAK_QUERY)
    except (StoreError, OSError, sqlite3.Error):
        return None
    if not rows:
        return None
    step, peak, micro_batch, world_size, kind = rows[0]
    req = dataclasses.replace(request, gpus_per_node=int(world_size), nodes=1)
    shape = req.shape
    states = model_state_bytes(
        shape.params(), req.precision, req.zero_stage, req.gpus, shape.largest_layer_params(), req.offload
    ).total
    predicted = per_gpu_bytes(req, states, activation_bytes(req), int(micro_batch))
    return Measured(
        run=run_path.name,
        step=int(step),
        micro_batch=int(micro_batch),
        world_size=int(world_size),
        memory_kind=str(kind),
        measured_peak=int(peak),
        predicted_peak=predicted,
        ratio=predicted / peak if peak else 0.0,
    )
