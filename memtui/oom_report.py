"""``memtui oom [RUN] [--json]``: the out-of-memory errors a run kept a record of (its
``oom/`` directory): step, attempt, micro-batch before and after, what became of the step,
the peak against the budget, the breakdown file and the allocator snapshot with the
command that opens it. Reads the run directory only (no supervisor needed). Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.run.directory import RunDir
from engine.run.oom_files import VIEW_COMMAND, OomBreakdown, oom_dir, read_breakdowns
from memtui.formatting import format_bytes
from memtui.status_report import render_table

HEADER = ("STEP", "ATTEMPT", "RANK", "MICRO-BATCH", "OUTCOME", "PEAK / BUDGET", "BREAKDOWN", "SNAPSHOT")
VIEWER = "https://pytorch.org/memory_viz"


def oom_rows(run: RunDir) -> list[dict[str, Any]]:
    """One JSON-ready dict per OOM, in step order; a pruned snapshot is None."""
    directory = oom_dir(run.path)
    return [_row(path, found, directory) for path, found in read_breakdowns(directory)]


def _row(path: Path, found: OomBreakdown, directory: Path) -> dict[str, Any]:
    snapshot = directory / found.snapshot if found.snapshot else None
    kept = snapshot is not None and snapshot.exists()
    return {
        "step": found.step,
        "attempt": found.attempt,
        "rank": found.rank,
        "micro_batch_before": found.micro_batch_before,
        "micro_batch_after": found.micro_batch_after,
        "outcome": found.outcome,
        "breakdown_file": str(path),
        "snapshot_file": str(snapshot) if kept else None,
        "open_command": VIEW_COMMAND.format(file=snapshot) if kept else None,
        "breakdown": found.model_dump(mode="json"),
    }


def render_ooms(rows: Sequence[dict[str, Any]]) -> str:
    """A table, then how to open a snapshot (when any was kept)."""
    table = [
        (
            str(r["step"]),
            str(r["attempt"]),
            str(r["rank"]),
            f"{r['micro_batch_before']} → {r['micro_batch_after'] or '-'}",
            r["outcome"],
            f"{format_bytes(r['breakdown']['step_peak'])} / {format_bytes(r['breakdown']['budget'])}",
            Path(r["breakdown_file"]).name,
            Path(r["snapshot_file"]).name if r["snapshot_file"] else "-",
        )
        for r in rows
    ]
    text = render_table(table, HEADER)
    opened = [r["open_command"] for r in rows if r["open_command"]]
    if opened:
        text += f"\n\nopen a snapshot in PyTorch's memory visualiser ({VIEWER}), or offline:\n  {opened[-1]}"
    return text
