"""What a run keeps of each out-of-memory error: ``RUN_DIR/oom/``.

At each OOM the trainer writes a memory breakdown (``OomBreakdown`` as JSON: where the
memory went by the plan and by measurement) and, on CUDA with allocator history recording
on, PyTorch's allocator snapshot beside it (a pickle for https://pytorch.org/memory_viz).
Both are named by the step, the attempt and (several ranks) the rank, so a listing needs
no store. Snapshots are large (up to hundreds of MB for a long history): only the newest
``memory.snapshots_kept`` stay; breakdowns are a few KB and ``BREAKDOWNS_KEPT`` stay.

Written by the trainer, read by ``memtui oom``. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

OOM_DIR = "oom"
BREAKDOWN_SUFFIX = ".json"
SNAPSHOT_SUFFIX = ".pickle"
BREAKDOWNS_KEPT = 200
"""Breakdowns kept per run (a few KB each): the newest, by time written."""
VIEW_COMMAND = "python -m torch.cuda._memory_viz trace_plot {file} -o {file}.html"
"""How to open a snapshot offline; or drop the file on https://pytorch.org/memory_viz."""

OomOutcome = Literal["redone", "restart", "halted"]
"""What became of the step: redone in place at ``micro_batch_after``, left to a restart
from the newest checkpoint (ZeRO-3, several ranks), or the run halted (the smallest size)."""


class OomBreakdown(BaseModel):
    """Where one rank's memory went when an optimizer step ran out (bytes)."""

    model_config = ConfigDict(extra="ignore")  # a newer trainer may add figures

    step: int
    """The step that ran out, as telemetry names it (steps done once it completes)."""
    attempt: int
    rank: int = 0
    world_size: int = 1
    at: float
    """Unix time of the OOM."""
    error: str
    outcome: OomOutcome
    micro_batch_before: int
    micro_batch_after: int | None
    """None when there was no smaller micro-batch to go to."""
    mem_kind: str
    """``cuda`` or ``cpu-rss`` (the process's RSS stands in for device memory)."""
    budget: int
    baseline: int
    """Measured bytes no micro-batch changes (the model states until first measured)."""
    step_peak: int
    """The failed step's peak up to the error."""
    predicted: int | None = None
    """The memory model's peak for the failed step's micro-batch."""
    ballast: int = 0
    """Bytes a rehearsal's ballast held."""
    fragmented: int = 0
    """CUDA: inactive split bytes (reserved, unused, not freeable) at the last boundary."""
    allocator: dict[str, int] | None = None
    """CUDA at the error: allocated, reserved, inactive_split bytes."""
    planned: dict[str, int] | None = None
    """``memtui plan``'s parts for the run (params, grads, optimizer, gathered, margin,
    activations_per_sample, planned_peak at the configured micro-batch); None: no shape."""
    planned_activations: int | None = None
    """The plan's activations at ``micro_batch_before``."""
    snapshot: str | None = None
    """File name of the allocator snapshot written with it (CUDA, history on)."""


def oom_dir(run_path: Path) -> Path:
    return run_path / OOM_DIR


def oom_stem(step: int, attempt: int, micro_batch: int, rank: int, world_size: int) -> str:
    """``step-00000012-attempt-1-mb-8`` (``-rank-N`` with several ranks): sorts by step; the
    micro-batch that failed tells apart two OOMs of one step (redone smaller, failed again)."""
    stem = f"step-{step:08d}-attempt-{attempt}-mb-{micro_batch}"
    return f"{stem}-rank-{rank}" if world_size > 1 else stem


def write_breakdown(directory: Path, stem: str, breakdown: OomBreakdown) -> Path:
    """``directory/stem.json``, whole or not at all (a temp file replaced into place)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}{BREAKDOWN_SUFFIX}"
    partial = path.with_name(path.name + ".partial")
    partial.write_text(breakdown.model_dump_json(indent=1))
    os.replace(partial, path)
    return path


def read_breakdowns(directory: Path) -> list[tuple[Path, OomBreakdown]]:
    """Every breakdown under ``directory`` in step order; an unreadable file is skipped."""
    found: list[tuple[Path, OomBreakdown]] = []
    for path in sorted(directory.glob(f"*{BREAKDOWN_SUFFIX}")):
        try:
            found.append((path, OomBreakdown.model_validate_json(path.read_bytes())))
        except (OSError, ValueError, ValidationError):
            continue
    found.sort(key=lambda item: (item[1].step, item[1].attempt, item[1].rank, item[1].at))
    return found


def prune(directory: Path, snapshots_kept: int, breakdowns_kept: int = BREAKDOWNS_KEPT) -> list[Path]:
    """Delete all but the newest ``snapshots_kept`` snapshots and ``breakdowns_kept``
    breakdowns (newest by time written); the paths deleted."""
    gone = _oldest_beyond(directory.glob(f"*{SNAPSHOT_SUFFIX}"), snapshots_kept)
    gone += _oldest_beyond(directory.glob(f"*{BREAKDOWN_SUFFIX}"), breakdowns_kept)
    for path in gone:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return gone


def _oldest_beyond(paths: Iterable[Path], kept: int) -> list[Path]:
    dated: list[tuple[int, str, Path]] = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            dated.append((path.stat().st_mtime_ns, path.name, path))
    dated.sort(reverse=True)  # newest first; the name breaks a tie (a coarse clock)
    return [path for _, _, path in dated[kept:]]
