"""The run's progress as its trainer shows it: the newest step, the start-up phase before
the first one, and the state the trainer's news moves.

A step is stored (batched), becomes the run's newest sample, ends the attempt's start-up,
moves a starting run to running and goes to every console. Of the recorded events (a
journal watcher), a ``startup_phase`` is kept for the run's status until the attempt's
first step or its exit, and is a sign of life to the heartbeat; ``trainer_started`` moves a
starting run to running, ``run_paused`` and ``run_continued`` hold and release it.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.alerts.watch import AlertWatch
from engine.domain import Event, StartupStatus, TelemetrySample
from engine.events import (
    RunContinued,
    RunEnded,
    RunPaused,
    StartupPhase,
    TrainerExited,
    TrainerStarted,
    nodes_met,
)
from engine.run.storage.store import Store
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.journal import Journal


class RunProgress:
    """The newest step and the start-up phase of one supervisor's life, and the state they move."""

    def __init__(self, journal: Journal, store: Store, consoles: Consoles, alerts: AlertWatch) -> None:
        self.journal = journal  # the state, and the events it watches
        self.store = store  # the steps' writer is this part, not the journal (events only)
        self.consoles = consoles
        self.alerts = alerts
        self.latest: TelemetrySample | None = None
        """The newest step sample of this supervisor's life."""
        self.startup: Event | None = None
        """The current attempt's newest ``startup_phase`` until its first step (or its exit)."""
        self._moves: dict[str, Callable[[], None]] = {
            TrainerStarted.event_type: self._started,
            RunPaused.event_type: self._paused,
            RunContinued.event_type: self._continued,
        }
        journal.watchers.append(self._watch)

    def on_step(self, sample: TelemetrySample) -> None:
        self.store.add_step(sample)
        self.latest = sample
        self.startup = None  # started: the first step is in
        self._started()
        self.consoles.offer_telemetry(sample, self.journal.state)

    def startup_status(self) -> StartupStatus | None:
        """The starting trainer's phase and since when; None once it stepped or exited."""
        phase = StartupPhase.of(self.startup) if self.startup is not None else None
        if phase is None or self.startup is None:
            return None
        since, attempt = self.startup.ts, phase.attempt
        return StartupStatus(phase=phase.phase, label=phase.label(), since=since, attempt=attempt)

    def _watch(self, event: Event) -> None:
        """Every recorded event: a phase begins; a trainer's exit ends its start-up; the
        trainer's start, pause and continue move the run's state."""
        if event.type == StartupPhase.event_type:
            self.startup = event
            # a sign of life: the heartbeat counts from here, not from a launch that a long
            # op build (minutes, once per environment) put far behind the first step
            self.alerts.trainer_launched()
        elif event.type in (TrainerExited.event_type, RunEnded.event_type) or nodes_met(event, self.startup):
            self.startup = None
        move = self._moves.get(event.type)
        if move is not None:
            move()

    def _started(self) -> None:
        if self.journal.state in ("starting", "restarting"):
            self.journal.set_state("running")

    def _paused(self) -> None:
        if self.journal.state == "running":
            self.journal.set_state("paused")  # no heartbeat alert while paused: no step is expected

    def _continued(self) -> None:
        if self.journal.state == "paused":
            self.journal.set_state("running")
            self.alerts.trainer_launched()  # the heartbeat clock starts again
