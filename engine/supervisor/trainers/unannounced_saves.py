"""Checkpoints sealed on disk that no ``checkpoint_saved`` announced.

A trainer SIGKILLed between sealing a tag (manifest written, renamed into place) and sending
its event leaves a checkpoint the run's history never mentions, though a resume verifies and
loads it. Before each trainer launch (a restart, or a new supervisor's first after a whole-tree
death) the supervisor records one ``checkpoint_saved`` marked ``reconciled`` for each such tag,
attributed to the attempt before the launch: the history then names every checkpoint a resume
may load. Sealed means its manifest and sizes check (the quick check a restart's candidate
gets); the new trainer still verifies it in full before loading it. Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.checkpoints import catalog
from engine.checkpoints.manifest import Verdict, verify_tag
from engine.events import CheckpointSaved
from engine.run.storage.store import Store
from engine.supervisor.essential_pool import off_loop
from engine.supervisor.journal import Journal


def announced_steps(store: Store) -> set[int]:
    """Steps of every ``checkpoint_saved`` in the store (a damaged row is left out)."""
    steps: set[int] = set()
    for (data,) in store.query("SELECT data FROM events WHERE type = ?", (CheckpointSaved.event_type,)):
        step = json.loads(data).get("step")
        if isinstance(step, int):
            steps.add(step)
    return steps


def sealed_unannounced(checkpoints: Path, announced: set[int]) -> list[Verdict]:
    """Committed tags, oldest first, whose step no event announced and that are sealed
    (quick check). Reads the disk: run it off the event loop."""
    found = [
        verify_tag(checkpoints / tag, step, "quick") for step, tag in catalog.committed_tags(checkpoints)
    ]
    return [v for v in found if v.step not in announced and v.ok and v.manifest is not None]


async def reconcile_saves(journal: Journal, checkpoints: Path, attempt: int | None) -> list[str]:
    """Record a reconciled ``checkpoint_saved`` for every tag sealed but never announced;
    returns their tags."""
    verdicts = await off_loop(sealed_unannounced, checkpoints, announced_steps(journal.store))
    for v in verdicts:
        assert v.manifest is not None  # sealed_unannounced keeps only tags with one
        saved = CheckpointSaved(
            step=v.step,
            tag=v.tag,
            seconds=None,
            write_s=None,
            seal_s=None,
            background=False,
            size_bytes=v.manifest.size_bytes,
            reconciled=True,
        )
        message = f"{v.tag} (step {v.step}) was sealed on disk but never announced: its trainer died first"
        journal.record(saved, message, severity="info", attempt=attempt)
    return [v.tag for v in verdicts]
