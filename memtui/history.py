"""A run's past read from disk: ``run.json`` for identity and thresholds, the store for the rest.

Plain stored data, no view: the console folds it into what it shows (a finished run is shown
read-only from its history; a live one opens on it before the supervisor answers), the CLI
prints it. ``read_identity`` and ``read_stored_run`` read ``run.json`` and the newest steps and
events; ``stored_steps`` streams the steps of a time window for a chart. Blocking, read-only
SQLite reads (call them off the event loop when the store may be large) and torch-free.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.run_config import RunConfig
from engine.domain import Event, RunState, TelemetrySample, Thresholds
from engine.events import EvalCompleted
from engine.run.directory import RunDir

PAGE_ROWS = 5000
"""Stored steps read per keyset page when streaming a window."""


@dataclass(frozen=True)
class RunIdentity:
    """What ``run.json`` says about a run; loosely read, so an old or damaged file still names it."""

    run_id: str
    name: str = ""
    target_steps: int = 0
    started_at: float | None = None
    """Unix time the run was created."""
    thresholds: Thresholds | None = None
    """The run's levels (``RunConfig.thresholds()``); None when its config does not validate."""


@dataclass(frozen=True)
class StoredRun:
    """The newest of what the store kept, as plain records, oldest first."""

    identity: RunIdentity
    state: RunState
    """The run's state as read from disk (the store, the supervisor's pid)."""
    samples: tuple[TelemetrySample, ...] = ()
    """The newest steps (by step number, in the order they were recorded)."""
    events: tuple[Event, ...] = ()
    """The newest events, in seq order."""
    newest_data_at: float | None = None
    """Unix time of the newest stored step; None without one."""
    evals: tuple[EvalCompleted, ...] = ()
    """Every stored eval, oldest first (older ones too than the newest events)."""


@dataclass(frozen=True)
class StepStream:
    """A window's stored steps: how many there are, and the steps themselves, read lazily."""

    total: int
    samples: Iterator[TelemetrySample]
    """In the order they were recorded (a resumed attempt's repeated steps after the first's)."""


def read_identity(run: RunDir) -> RunIdentity:
    """Identity, target and thresholds from ``run.json``; only the run id when it is unreadable."""
    try:
        doc = json.loads(run.config_file.read_text(encoding="utf-8"))
        config = doc.get("config") or {}
        return RunIdentity(
            run_id=str(doc.get("run_id") or run.run_id),
            name=str(config.get("name") or ""),
            target_steps=int(config.get("steps") or 0),
            started_at=float(doc["created_at"]) if "created_at" in doc else None,
            thresholds=_thresholds(config),
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return RunIdentity(run_id=run.run_id)


def _thresholds(config: Any) -> Thresholds | None:
    """The config as the supervisor validates it (all or nothing, like ``RunDir.read_config``)."""
    try:
        return RunConfig.model_validate(config).thresholds()
    except ValueError:  # pydantic's ValidationError: an old or damaged config
        return None


def read_stored_run(run: RunDir, *, steps: int, events: int) -> StoredRun:
    """The identity, the state, the stored steps numbered above the newest step minus
    ``steps`` and the newest ``events`` events. An unreadable store still gives the identity
    and the state."""
    from engine.run.reports.status import offline_status

    samples, newest, latest_ts, evals = _newest(run.store, steps, events) if run.store.exists() else NOTHING
    return StoredRun(
        read_identity(run),
        state=offline_status(run).state,
        samples=samples,
        events=newest,
        newest_data_at=latest_ts,
        evals=evals,
    )


Newest = tuple[tuple[TelemetrySample, ...], tuple[Event, ...], float | None, tuple[EvalCompleted, ...]]
NOTHING: Newest = ((), (), None, ())


def _newest(store_path: Path, steps: int, events: int) -> Newest:
    """(newest samples, newest events, the newest step's ts, every eval); nothing from a
    store that cannot be read."""
    from engine.run.reports.eval_history import stored_evals
    from engine.run.storage.store import Store, StoreError

    try:
        with Store(store_path, readonly=True) as store:
            latest = store.latest_step()
            samples = [] if latest is None else store.steps(since_step=max(0, latest.step - steps))
            newest = store.events_since(max(0, store.last_seq() - events))
            evals = tuple(e.result for e in stored_evals(store))
    except (StoreError, OSError, sqlite3.Error):
        return NOTHING
    return tuple(samples), tuple(newest), latest.ts if latest else None, evals


@contextlib.contextmanager
def stored_steps(store_path: Path, since_ts: float | None = None) -> Iterator[StepStream]:
    """The stored steps from the first one at or after ``since_ts`` (Unix time; None: all),
    streamed in keyset pages of PAGE_ROWS while the block runs: memory stays one page however
    long the run. No store yet: no steps."""
    from engine.run.storage.store import Store

    if not Path(store_path).exists():
        yield StepStream(0, iter(()))
        return
    with Store(Path(store_path), readonly=True) as store:
        yield StepStream(store.count_steps(since_ts=since_ts), store.iter_steps(PAGE_ROWS, since_ts=since_ts))
