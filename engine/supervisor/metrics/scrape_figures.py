"""``ScrapeFigures``: what a ``/metrics`` scrape reports, taken from the supervisor's state at
the moment of the scrape (on the supervisor's event loop: the store is not shared between
threads). Nothing here runs per step: a run nobody scrapes pays nothing. Torch-free, and
free of ``prometheus_client`` (``metrics_families`` turns these figures into metrics).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from engine.alerts.rules import still_firing
from engine.directives.queue import DirectiveQueue
from engine.domain import Event, RunStatus, Severity, TelemetrySample
from engine.events import AlertRaised, CheckpointSaved
from engine.run.storage.store import Store

_EVENT_COLUMNS = ("seq", "ts", "type", "severity", "message", "data", "attempt")


@dataclass(frozen=True)
class LastSave:
    """The newest checkpoint saved (``checkpoint_saved``): its step and when (Unix s)."""

    step: int
    ts: float


@dataclass(frozen=True)
class ScrapeFigures:
    status: RunStatus
    """The supervisor's ``status`` answer: the same figures ``memtui status --json`` prints."""
    sample: TelemetrySample | None
    """The newest step sample (for what status leaves out: budget, overflows, skipped steps)."""
    alerts: dict[str, Severity]
    """Firing alert rule -> its severity."""
    pending_directives: int
    last_save: LastSave | None
    now: float
    """Unix time of the scrape (s): the checkpoint's age is reckoned from it."""


class FiguresSource(Protocol):
    """What of the supervisor a scrape reads (``engine.supervisor.daemon.Supervisor``)."""

    directives: DirectiveQueue | None

    def status(self) -> RunStatus: ...

    @property
    def latest(self) -> TelemetrySample | None: ...

    @property
    def store(self) -> Store: ...


def gather(source: FiguresSource, now: float) -> ScrapeFigures:
    """The figures of one scrape, at ``now`` (Unix s); call on the supervisor's loop."""
    status = source.status()
    queue = source.directives
    pending = sum(1 for view in queue.views() if view.state == "pending") if queue is not None else 0
    return ScrapeFigures(
        status=status,
        sample=source.latest or source.store.latest_step(),
        alerts=firing_alerts(source.store),
        pending_directives=pending,
        last_save=last_save(source.store),
        now=now,
    )


def firing_alerts(store: Store) -> dict[str, Severity]:
    """Each alert rule firing now (its newest ``alert`` event not resolved) -> its severity.
    Reads the run's ``alert`` events (a few per episode) at each scrape: the store is the
    truth a restarted supervisor also reads, and a scrape every 15 s costs nothing per step."""
    columns = ", ".join(_EVENT_COLUMNS)
    rows = store.query(f"SELECT {columns} FROM events WHERE type = ? ORDER BY seq", (AlertRaised.event_type,))
    events = (_event(row) for row in rows)
    return {rule: event.severity for rule, event in still_firing(e for e in events if e is not None).items()}


def last_save(store: Store) -> LastSave | None:
    event = store.newest_event((CheckpointSaved.event_type,))
    saved = CheckpointSaved.of(event) if event is not None else None
    return LastSave(saved.step, event.ts) if saved is not None and event is not None else None


def _event(row: tuple[object, ...]) -> Event | None:
    """An ``events`` row as an Event; None for a damaged one (left out, never a crash)."""
    fields = dict(zip(_EVENT_COLUMNS, row, strict=True))
    try:
        fields["data"] = json.loads(str(fields["data"]))
        return Event.model_validate(fields)
    except ValueError:
        return None
