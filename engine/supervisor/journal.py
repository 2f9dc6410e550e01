"""The run's journal: every event stored, then told to every console; the run's state; its
beginning under a supervisor and its ending.

An event is committed to the store before any console hears of it, so a console that
reconnects gets it by replay and never sees one the store lacks. The exception is a disk
that refuses writes: the event then goes out at once with the seq the store reserved for
it, and is stored under that seq once the disk takes writes again
(``engine.supervisor.storage_outage``). A change of state is a ``state_changed`` event plus
the store's meta, in that order. Parts that follow the run by its events (the chaos
recovery tracker, the run's progress, the reactions to the trainer's events) watch the
journal, the one fan-out of events: each is told of every event once it is recorded, in the
order the watchers were added (the order the supervisor's wiring builds their parts).
Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from engine.domain import TERMINAL_STATES, Event, RunState, Severity
from engine.events import PauseKept, Payload, RunEnded, RunStarted, StateChanged
from engine.run.meta import RunMeta
from engine.run.storage.store import Store
from engine.supervisor.channel.consoles import Consoles

log = logging.getLogger(__name__)


class Journal:
    """Records the run's events and state in ``store`` and fans them out to ``consoles``."""

    def __init__(self, store: Store, consoles: Consoles) -> None:
        self.store = store
        self.consoles = consoles
        self.state: RunState = "starting"
        self.watchers: list[Callable[[Event], None]] = []
        """Told of every event once it is recorded and sent; a watcher's error is logged,
        never raised into the part that recorded the event."""

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES

    def record(
        self,
        payload: Payload,
        message: str = "",
        *,
        severity: Severity | None = None,
        attempt: int | None = None,
    ) -> Event:
        """Store an event of the payload's type (committed), then tell every console;
        ``severity`` None is the type's usual one."""
        return self.append(
            payload.event_type, severity or payload.severity, message, payload.data(), attempt=attempt
        )

    def append(
        self, type: str, severity: Severity, message: str, data: dict[str, Any], *, attempt: int | None = None
    ) -> Event:
        """``record`` for an event that arrived typed already (a trainer's, validated)."""
        event = self.store.append_event(type, severity=severity, message=message, data=data, attempt=attempt)
        log.info("event %d %s %s", event.seq, event.type, event.message)
        self.consoles.push_event(event)
        for watcher in list(self.watchers):
            try:
                watcher(event)
            except Exception:  # a watcher's bug must not cost the event's writer
                log.exception("a journal watcher failed on event %d (%s)", event.seq, event.type)
        return event

    async def keep_flushing(self, interval_s: float) -> None:
        """Write the store's batched steps and decisions every ``interval_s`` s (until cancelled)."""
        while True:
            await asyncio.sleep(interval_s)
            self.store.flush()

    def set_state(self, to: RunState) -> None:
        if to == self.state:
            return
        before, self.state = self.state, to
        self.store.update_meta(state=to)
        self.record(StateChanged(from_state=before, to=to), f"{before} -> {to}")

    def begin(self, run_id: str, run_dir: str, pid: int, *, trainer_outlived: bool = False) -> RunMeta:
        """This supervisor takes the run: meta, ``run_started``, state ``starting``.

        Returns the meta as the previous supervisor (if any) left it: its attempt and restart
        counters go on, and a run held paused stays paused (``pause_kept``).
        """
        before = self.store.read_meta()
        self.store.update_meta(
            started_at=before.started_at or time.time(),
            supervisor_pid=pid,
            exit_reason=None,
            attempt=before.attempt,
            restarts=before.restarts,
        )
        self.record(
            RunStarted(
                supervisor_pid=pid,
                run_dir=run_dir,
                previous_state=before.state,
                trainer_outlived=trainer_outlived,
            ),
            f"supervisor pid {pid} serving {run_id}",
        )
        self.state = "starting"
        self.store.update_meta(state="starting")
        if before.state != "starting":  # None for a fresh store
            self.record(
                StateChanged(from_state=before.state, to="starting"),
                f"{before.state or '(new run)'} -> starting",
            )
        if before.hold:
            self.record(
                PauseKept(previous_state=before.state),
                "the run was paused when its last supervisor ended: it stays paused "
                "(memtui unpause lets it go on)",
            )
        return before

    def end(self, state: RunState, reason: str) -> None:
        """The run's ending: meta (reason, time, no trainer, no hold), the state, ``run_ended``."""
        self.store.update_meta(exit_reason=reason, ended_at=time.time(), trainer_pid=None, hold=False)
        self.set_state(state)
        self.record(
            RunEnded(state=state, reason=reason),
            f"run ended {state}: {reason}",
            severity="critical" if state == "failed" else "info",
        )
        self.store.flush()
        log.info("run %s: %s", state, reason)
