"""Saving, pruning and resuming DeepSpeed checkpoints under ``run.checkpoints``.

Basic on purpose (the Checkpoints issue makes it durable): DeepSpeed writes tag
``global_step{N}`` and the ``latest`` pointer; we keep the newest ``keep`` tags, deleting the
older ones only after the new save returned. ``client_state`` carries what DeepSpeed does not
restore: the data position, the seed, the batch geometry and running counts.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAG_PATTERN = re.compile(r"^global_step(\d+)$")


@dataclass(frozen=True)
class Resumed:
    """What a loaded checkpoint said; ``step`` is the next optimizer step's data position."""

    path: str
    tag: str
    step: int
    client_state: dict[str, Any]


@dataclass(frozen=True)
class Saved:
    tag: str
    step: int
    seconds: float
    pruned: list[str]


def tag_for(step: int) -> str:
    return f"global_step{step}"


def tags_on_disk(directory: Path) -> list[tuple[int, str]]:
    """(step, tag) of every ``global_step{N}`` directory, oldest first."""
    if not directory.is_dir():
        return []
    found = [
        (int(m.group(1)), p.name)
        for p in directory.iterdir()
        if p.is_dir() and (m := TAG_PATTERN.match(p.name))
    ]
    return sorted(found)


def tags_to_prune(steps_and_tags: list[tuple[int, str]], keep: int, newest: str) -> list[str]:
    """Tags beyond the newest ``keep`` (by step); never the one just written."""
    ordered = sorted(steps_and_tags, reverse=True)
    return [tag for _, tag in ordered[keep:] if tag != newest]


def save(engine: Any, directory: Path, keep: int, client_state: dict[str, Any]) -> Saved:
    """Save tag ``global_step{N}`` (N = engine.global_steps), then prune to ``keep`` tags."""
    step = int(engine.global_steps)
    tag = tag_for(step)
    started = time.perf_counter()
    engine.save_checkpoint(str(directory), tag=tag, client_state=client_state)
    seconds = time.perf_counter() - started
    pruned = tags_to_prune(tags_on_disk(directory), keep, newest=tag)
    for old in pruned:
        shutil.rmtree(directory / old, ignore_errors=True)
    return Saved(tag=tag, step=step, seconds=seconds, pruned=pruned)


def load_latest(engine: Any, directory: Path) -> Resumed | None:
    """Load the tag named by ``latest``; None when there is none (a fresh start)."""
    latest = directory / "latest"
    if not latest.is_file():
        return None  # checked here: DeepSpeed would only warn and return (None, None)
    tag = latest.read_text().strip()
    path, client_state = engine.load_checkpoint(str(directory), tag=tag)
    if path is None:
        raise RuntimeError(f"checkpoint {directory / tag} named by 'latest' could not be loaded")
    client_state = dict(client_state or {})
    step = int(client_state.get("step", engine.global_steps))
    return Resumed(path=str(path), tag=tag, step=step, client_state=client_state)
