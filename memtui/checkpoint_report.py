"""``memtui checkpoints [RUN] [--json]``: a run's checkpoints with step, size, age and whether
each verifies against its manifest. Reads the run directory only (no supervisor needed).

Also what the console's checkpoint list reads: ``checkpoint_rows`` for each of ``PASSES``
(``Check`` names a pass), so the console needs nothing from ``engine.checkpoints``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.checkpoints.catalog import Listed, list_checkpoints
from engine.checkpoints.manifest import Check
from engine.run.directory import RunDir
from memtui.formatting import format_age, format_bytes
from memtui.status_report import render_table

HEADER = ("TAG", "STEP", "SIZE", "AGE", "STATE", "")
PASSES: tuple[Check, ...] = ("quick", "full")
"""A reader's passes in turn: manifests and sizes (shown at once), then sha256 of every file."""


def checkpoint_rows(run: RunDir, now: float, check: Check = "full") -> list[dict[str, Any]]:
    """One JSON-ready dict per checkpoint, newest first."""
    return [_row(item, now) for item in list_checkpoints(run.checkpoints, check)]


def _row(item: Listed, now: float) -> dict[str, Any]:
    return {
        "tag": item.tag,
        "step": item.step,
        "state": item.state,
        "problem": item.problem,
        "size_bytes": item.size_bytes,
        "age_s": round(max(0.0, now - item.mtime), 3),
        "latest": item.latest,
    }


def render_checkpoints(rows: Sequence[dict[str, Any]]) -> str:
    """A table; a problem follows its state, ``latest`` marks the pointer's tag."""
    table = [
        (
            r["tag"],
            str(r["step"]),
            format_bytes(r["size_bytes"]),
            format_age(r["age_s"]),
            r["state"] + (f": {r['problem']}" if r["problem"] and r["state"] != "staging" else ""),
            "latest" if r["latest"] else "",
        )
        for r in rows
    ]
    return render_table(table, HEADER)
