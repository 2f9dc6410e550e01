"""What the supervisor does with what the trainer reports: its steps and its events.

A step is stored (batched), becomes the run's newest sample, moves a starting run to
running, and goes to every console, the alert rules, the directive queue and the planner.
An event is recorded with the current attempt; a few also move the run's state
(``trainer_started``, ``run_paused``, ``run_continued``) or tell the attempts how the
trainer is about to end (``trainer_finished``, ``trainer_error``): a table by event type.
The newest ``startup_phase`` is kept for the run's status until the attempt's first
step or its exit. A ``directive_applied`` echo is the directive queue's to record. (Event types only the
supervisor may write never get here: the connection refuses them.) Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from engine.alerts.watch import AlertWatch
from engine.directives.planners.factory import Planner
from engine.directives.queue import DirectiveQueue
from engine.domain import Event, StartupStatus, TelemetrySample
from engine.events import (
    DirectiveApplied,
    EvalCompleted,
    MemoryAdapted,
    Payload,
    RunContinued,
    RunEnded,
    RunPaused,
    StartupPhase,
    TrainerError,
    TrainerExited,
    TrainerFinished,
    TrainerStarted,
    nodes_met,
)
from engine.protocol import TrainerEvent
from engine.supervisor.attempts import Attempts
from engine.supervisor.journal import Journal

log = logging.getLogger(__name__)


class TrainerReports:
    """Takes the trainer's steps and events into the run."""

    def __init__(
        self,
        journal: Journal,
        attempts: Attempts,
        alerts: AlertWatch,
        directives: DirectiveQueue,
        planner: Planner | None,
        spawn: Callable[[Any], asyncio.Task[Any]],
    ) -> None:
        self.journal = journal
        self.attempts = attempts
        self.alerts = alerts
        self.directives = directives
        self.planner = planner
        self._spawn = spawn  # the planner asks in a task of the supervisor's
        self.latest: TelemetrySample | None = None
        """The newest step sample of this supervisor's life."""
        self.startup: Event | None = None
        """The current attempt's newest ``startup_phase`` until its first step (or its exit)."""
        journal.watchers.append(self._watch)
        self._reactions: dict[str, Callable[[Payload], None]] = {
            TrainerStarted.event_type: self._started,
            RunPaused.event_type: self._paused,
            RunContinued.event_type: self._continued,
            TrainerFinished.event_type: self._finished,
            MemoryAdapted.event_type: self._adapted,
            EvalCompleted.event_type: self._evaluated,
        }

    def on_step(self, sample: TelemetrySample) -> None:
        self.journal.store.add_step(sample)
        self.latest = sample
        self.startup = None  # started: the first step is in
        if self.journal.state in ("starting", "restarting"):
            self.journal.set_state("running")
        self.journal.consoles.offer_telemetry(sample, self.journal.state)
        self.alerts.on_step(sample)
        try:
            self.directives.on_step(sample)
            if self.planner is not None:
                self.planner.on_step(sample, self._spawn)  # asks in its own task
        except Exception:  # a planner bug must not cost the run its supervisor
            log.exception("directive planner failed on step %d", sample.step)

    def on_event(self, message: TrainerEvent, payload: Payload | None) -> None:
        """A trainer's event, its payload validated by the connection (None: a type this
        supervisor does not know, recorded as it came)."""
        if isinstance(payload, DirectiveApplied):
            self.directives.on_applied(payload)  # recorded by the queue with its DirectiveView
            return
        self.journal.append(
            message.type, message.severity, message.message, message.data, attempt=self.attempts.attempt
        )
        react = self._reactions.get(message.type)
        if react is not None and payload is not None:
            react(payload)
        self.attempts.resumption.on_event(payload, self.attempts.attempt)
        if isinstance(payload, TrainerError):
            self.attempts.note_error(message.message, payload.restartable)

    def startup_status(self) -> StartupStatus | None:
        """The starting trainer's phase and since when; None once it stepped or exited."""
        phase = StartupPhase.of(self.startup) if self.startup is not None else None
        if phase is None or self.startup is None:
            return None
        since, attempt = self.startup.ts, phase.attempt
        return StartupStatus(phase=phase.phase, label=phase.label(), since=since, attempt=attempt)

    def _watch(self, event: Event) -> None:
        """Every recorded event: a phase begins; a trainer's exit ends its start-up."""
        if event.type == StartupPhase.event_type:
            self.startup = event
            # a sign of life: the heartbeat counts from here, not from a launch that a long
            # op build (minutes, once per environment) put far behind the first step
            self.alerts.trainer_launched()
        elif event.type in (TrainerExited.event_type, RunEnded.event_type) or nodes_met(event, self.startup):
            self.startup = None

    def _evaluated(self, payload: Payload) -> None:
        """An eval: the planner may cite its trend (a planner bug never costs the supervisor)."""
        if self.planner is None or not isinstance(payload, EvalCompleted):
            return
        try:
            self.planner.on_eval(payload)
        except Exception:
            log.exception("directive planner failed on the eval of step %d", payload.step)

    def _started(self, payload: Payload) -> None:
        if self.journal.state in ("starting", "restarting"):
            self.journal.set_state("running")

    def _paused(self, payload: Payload) -> None:
        if self.journal.state == "running":
            self.journal.set_state("paused")  # no heartbeat alert while paused: no step is expected

    def _continued(self, payload: Payload) -> None:
        if self.journal.state == "paused":
            self.journal.set_state("running")
            self.alerts.trainer_launched()  # the heartbeat clock starts again

    def _finished(self, payload: Payload) -> None:
        assert isinstance(payload, TrainerFinished)
        self.attempts.note_finished(payload.reason)

    def _adapted(self, payload: Payload) -> None:
        """An OOM: the directives judge growth to that size by it for a while."""
        assert isinstance(payload, MemoryAdapted)
        if payload.kind == "oom":
            self.directives.on_oom(payload.from_micro_batch, payload.step)
