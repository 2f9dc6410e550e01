"""``memory.json``: what one trainer attempt leaves the next about its memory.

``{"micro_batch": m, "grad_accum": g, "history": {...}, "reason": "..."}``, replaced
atomically. The micro-batch in use and the controller's measured history (samples/s per
micro-batch, recent failures: ``SizeHistory.as_json``) are written at each geometry change
and every ``HISTORY_EVERY`` steps by rank 0; ``reason`` only when an OOM ends the attempt
(ZeRO-3, several ranks, the smallest micro-batch: the supervisor reports it as that
attempt's end, engine/supervisor/trainers/trainer_process.py), not for a window redone in place.

The file sits in the run directory, or in the shared checkpoint directory with several
nodes (``RunDir.geometry_file``), so every rank of the next attempt starts alike.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.memory.controller import Geometry
from engine.memory.size_history import SizeHistory
from engine.run.durable_file import replace_atomically

log = logging.getLogger(__name__)

GEOMETRY_FILE = "memory.json"
HISTORY_EVERY = 50  # optimizer steps between saves of the measured rates (and at each change)


@dataclass(frozen=True)
class LeftGeometry:
    """What an earlier attempt left: its micro-batch, and its history when it wrote one (a
    file without one comes from an older trainer, which wrote it only after an OOM)."""

    micro_batch: int
    history: SizeHistory | None


def read_geometry(path: Path | None, allowed: tuple[int, ...]) -> LeftGeometry | None:
    """The file at ``path``; None when there is none or it is malformed (logged: the
    attempt then starts as configured, never with half a file)."""
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        history = data.get("history")
        return LeftGeometry(
            int(data["micro_batch"]), None if history is None else SizeHistory.from_json(history, allowed)
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("ignoring %s: %s", path, err)
        return None


def write_geometry(path: Path, geometry: Geometry, history: SizeHistory, reason: str | None) -> None:
    """Replace the file with ``geometry`` and ``history``; ``reason`` only for an OOM's."""
    data: dict[str, Any] = {"micro_batch": geometry.micro_batch, "grad_accum": geometry.grad_accum}
    if reason is not None:
        data["reason"] = reason
    data["history"] = history.as_json()
    replace_atomically(path, (json.dumps(data) + "\n").encode("utf-8"))


class GeometryRecord:
    """A trainer's memory.json: written at an OOM's end (with its reason), and kept by rank 0
    in step with the geometry and the history (every rank holds the same: each controller
    decides on the same numbers). Only what changed is written: with adaptive memory off the
    history moves only when an OOM is redone in place (no "reason": the attempt goes on,
    nothing for the supervisor to report)."""

    def __init__(self, path: Path | None, rank: int) -> None:
        self.path = path
        """None: nothing is written (a bench, a test without a run directory)."""
        self.rank = rank
        self._saved: SizeHistory | None = None
        """The history the file holds (None: not written by this attempt)."""

    def write(self, geometry: Geometry, history: SizeHistory, reason: str | None) -> None:
        """``geometry`` and ``history``; ``reason`` only for an OOM that ends the attempt."""
        if self.path is not None:
            write_geometry(self.path, geometry, history, reason)
            self._saved = history

    def keep(self, geometry: Geometry, history: SizeHistory) -> None:
        """Rank 0: the file in step with ``geometry`` and ``history`` when the history moved."""
        if self.rank == 0 and history is not self._saved:
            self.write(geometry, history, None)
