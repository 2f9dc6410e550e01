"""What the trainer leaves in ``RUN_DIR/oom/`` at each out-of-memory error, so an operator
can see afterwards why memory ran out (``memtui oom RUN`` lists them).

Everywhere: a memory breakdown (``engine.run.oom_files.OomBreakdown``): the plan's parts
for the run's model (params, grads, optimizer states, margin, activations at the failed
micro-batch), the measured baseline, the failed step's peak, the ballast, the budget.
On CUDA with ``memory.history_entries`` > 0: PyTorch's allocator history is recorded from
the start (a ring of that many alloc/free events with their stacks) and at each OOM its
snapshot is dumped beside the breakdown, before the failed window's tensors are freed, so
the visualiser shows the segments as they were when the allocation failed.

Nothing here may stop an OOM's recovery: a write that fails is logged and skipped.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Protocol

import torch

from engine.config.run_config import RunConfig
from engine.events import PlannedMemory
from engine.memory.model_description import ModelDescription
from engine.run.oom_files import (
    SNAPSHOT_SUFFIX,
    OomBreakdown,
    OomOutcome,
    oom_dir,
    oom_stem,
    prune,
    write_breakdown,
)
from engine.trainer.memory.ballast import Ballast
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.memory.oom_recovery import redone_in_place
from engine.trainer.memory.planned_memory import planned_memory
from engine.trainer.ranks.rank_group import RankGroup

log = logging.getLogger(__name__)

INACTIVE_SPLIT = "inactive_split_bytes.all.current"
"""``torch.cuda.memory_stats`` key: bytes of split blocks no tensor uses right now."""


class MemoryAtOom(Protocol):
    """What adaptive memory knows at an OOM (``AdaptiveMemory`` is one)."""

    engine: Any
    probe: MemoryProbe
    ranks: RankGroup
    ballast: Ballast
    budget: int
    predicted: int | None
    fragmented: int


class OomForensics:
    """Records allocator history (CUDA, when asked) and writes what each OOM leaves."""

    def __init__(
        self,
        directory: Path,
        attempt: int,
        device: torch.device,
        history_entries: int = 0,
        snapshots_kept: int = 3,
        planned: PlannedMemory | None = None,
    ) -> None:
        self.directory = directory
        self.attempt = attempt
        self.device = device
        self.snapshots_kept = snapshots_kept
        self.planned = planned
        self.recording = device.type == "cuda" and history_entries > 0
        if self.recording:
            torch.cuda.memory._record_memory_history(max_entries=history_entries)

    @classmethod
    def for_run(
        cls, config: RunConfig, run_path: Path, attempt: int, memory: MemoryAtOom, model: ModelDescription
    ) -> OomForensics:
        """The run's: ``RUN_DIR/oom/``, ``[memory]``'s history and retention, the plan's parts."""
        device, world = memory.probe.device, memory.ranks.world
        return cls(
            oom_dir(run_path),
            attempt,
            device,
            config.memory.history_entries,
            config.memory.snapshots_kept,
            planned_memory(config, model, world, device.type),
        )

    def record(
        self,
        memory: MemoryAtOom,
        step: int,
        before: int,
        after: int | None,
        err: BaseException,
        peak: int,
        baseline: int,
    ) -> Path | None:
        """At the OOM of ``step`` (telemetry's name) at micro-batch ``before``, going to
        ``after`` (None: none smaller): the breakdown's path, None if it could not be written."""
        ranks = memory.ranks
        stem = oom_stem(step, self.attempt, before, ranks.rank, ranks.world)
        try:
            snapshot = self._dump_snapshot(stem)
            breakdown = OomBreakdown(
                step=step,
                attempt=self.attempt,
                rank=ranks.rank,
                world_size=ranks.world,
                at=time.time(),
                error=f"{type(err).__name__}: {err}"[:500],
                outcome=_outcome(memory, after),
                micro_batch_before=before,
                micro_batch_after=after,
                mem_kind=memory.probe.kind,
                budget=memory.budget,
                baseline=baseline,
                step_peak=peak,
                predicted=memory.predicted,
                ballast=memory.ballast.held,
                fragmented=memory.fragmented,
                allocator=self._allocator(),
                planned=self.planned.model_dump() if self.planned else None,
                planned_activations=self.planned.activations_per_sample * before if self.planned else None,
                snapshot=snapshot,
            )
            path = write_breakdown(self.directory, stem, breakdown)
            prune(self.directory, self.snapshots_kept)
        except OSError as error:
            log.warning("OOM at step %s: its breakdown was not written: %s", step, error)
            return None
        return path

    def _dump_snapshot(self, stem: str) -> str | None:
        """The allocator snapshot's file name, None when history is not recorded."""
        if not self.recording:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{stem}{SNAPSHOT_SUFFIX}"
        partial = path.with_name(path.name + ".partial")  # a listing never sees half a file
        torch.cuda.memory._dump_snapshot(str(partial))
        os.replace(partial, path)
        return path.name

    def _allocator(self) -> dict[str, int] | None:
        """CUDA: the caching allocator's figures now (bytes); None on the CPU."""
        if self.device.type != "cuda":
            return None
        stats = torch.cuda.memory_stats(self.device)
        return {
            "allocated": int(torch.cuda.memory_allocated(self.device)),
            "reserved": int(torch.cuda.memory_reserved(self.device)),
            "inactive_split": int(stats.get(INACTIVE_SPLIT, 0)),
        }


def _outcome(memory: MemoryAtOom, after: int | None) -> OomOutcome:
    if after is None:
        return "halted"
    return "redone" if redone_in_place(memory.engine, memory.ranks.world) else "restart"
