"""Plan against reality: a run's measured peak beside what ``memtui plan`` predicts for its
configuration at the micro-batch it measured, so the planner's error is visible.

Reads the run's store read-only: the step with the largest measured step peak
(``mem_step_peak``: CUDA's max allocated in the step, the CPU's RSS after a forward), less
the chaos ballast held in it (``mem_ballast``: injected pressure, which no plan counts).
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
    from engine.memory.model_description import ModelDescription

_PEAK_QUERY = (
    "SELECT step, mem_step_peak - {ballast}, {ballast}, micro_batch, world_size, mem_kind FROM steps"
    " WHERE mem_step_peak IS NOT NULL ORDER BY mem_step_peak - {ballast} DESC LIMIT 1"
)


def peak_query(columns: set[str]) -> str:
    """The largest step peak net of ballast; a store from before ``mem_ballast`` has none."""
    return _PEAK_QUERY.format(ballast="COALESCE(mem_ballast, 0)" if "mem_ballast" in columns else "0")


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
    """Bytes, the chaos ballast left out."""
    ballast: int
    """Bytes of chaos ballast the step held, subtracted from the measured peak."""
    predicted_peak: int
    ratio: float
    """predicted / measured: above 1 the plan was cautious, below 1 it under-counted."""


def built_description(run_path: Path) -> ModelDescription | None:
    """The model the run's newest trainer built, as its ``trainer_started`` described it;
    None without one (no store, an older trainer, a description that does not read)."""
    from engine.events import TrainerStarted
    from engine.memory.model_description import from_wire
    from engine.memory.transformer_shape import ShapeError
    from engine.run.storage.store import Store, StoreError

    store_path = run_path / "telemetry.sqlite"
    if not store_path.exists():
        return None
    try:
        with Store(store_path, readonly=True) as store:
            started = store.newest_event((TrainerStarted.event_type,))
        wire = started.data.get("model_description") if started is not None else None
        return from_wire(wire) if isinstance(wire, dict) else None
    except (StoreError, OSError, sqlite3.Error, ShapeError):
        return None


def measured_against(run_path: Path, request: PlanRequest) -> Measured | None:
    """None when the run has no measured step yet (or no readable store)."""
    from engine.memory.capacity_plan import activation_bytes, per_gpu_bytes
    from engine.memory.model import model_state_bytes
    from engine.run.storage.store import Store, StoreError

    store_path = run_path / "telemetry.sqlite"
    if not store_path.exists():
        return None
    try:
        with Store(store_path, readonly=True) as store:
            columns = {str(row[1]) for row in store.query("PRAGMA table_info(steps)")}
            rows = store.query(peak_query(columns))
    except (StoreError, OSError, sqlite3.Error):
        return None
    if not rows:
        return None
    step, peak, ballast, micro_batch, world_size, kind = rows[0]
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
        ballast=int(ballast),
        predicted_peak=predicted,
        ratio=predicted / peak if peak else 0.0,
    )
