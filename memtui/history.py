"""A run's view read from disk: ``run.json`` for identity, the store for the past.

Used to open the console on a run before (or without) a live connection: a finished run
is shown read-only from its stored history. Read-only and torch-free.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

from engine.run.directory import RunDir
from memtui.console.run_view import MAX_EVENTS, RunView

if TYPE_CHECKING:
    from engine.run.store import Store

SAMPLES_FOLDED = 200
"""Newest stored steps folded into the view (enough for the smoothed loss)."""


def initial_view(run: RunDir) -> RunView:
    """Identity and target from ``run.json``; no numbers yet."""
    try:
        doc = json.loads(run.config_file.read_text(encoding="utf-8"))
        config = doc.get("config") or {}
        return RunView(
            run_id=str(doc.get("run_id") or run.run_id),
            name=str(config.get("name") or ""),
            target_steps=int(config.get("steps") or 0),
            started_at=float(doc["created_at"]) if "created_at" in doc else None,
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return RunView(run_id=run.run_id)


def stored_view(run: RunDir) -> RunView:
    """The initial view plus the stored state, newest steps and newest events."""
    import contextlib
    import sqlite3

    from engine.run.status import offline_status
    from engine.run.store import Store, StoreError

    view = dataclasses.replace(initial_view(run), connection="history")
    if run.store.exists():
        # An unreadable store still opens the console: the state below says what is known.
        with contextlib.suppress(StoreError, OSError, sqlite3.Error):
            view = _fold_store(view, Store(run.store, readonly=True))
    return dataclasses.replace(view, state=offline_status(run).state)


def _fold_store(view: RunView, store: Store) -> RunView:
    with store:
        latest = store.latest_step()
        samples = [] if latest is None else store.steps(since_step=max(0, latest.step - SAMPLES_FOLDED))
        events = store.events_since(max(0, store.last_seq() - MAX_EVENTS))
    for sample in samples:
        view = view.with_sample(sample)
    for event in events:
        view = view.with_event(event)
    return dataclasses.replace(view, newest_data_at=latest.ts if latest else None)
