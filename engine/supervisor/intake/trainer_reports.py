"""What the supervisor does with what the trainer reports: its greeting, its steps, its events.

The connection hands every report straight here. A greeting tells the attempts and the
directive queue what the new trainer missed. A step goes to the step consumers, in the
order the wiring lists them (``engine.supervisor.daemon``). An event is recorded with the
current attempt (a ``directive_applied`` echo is the directive queue's to record); what it
tells the other parts is a journal watcher's, so the event is stored and every watcher has
heard of it first: ``trainer_finished`` and ``trainer_error`` say how the trainer is about
to end, a load after a restart says where it really resumed (``resumption``), an OOM's
``memory_adapted`` and an ``eval_completed`` go to the directives and the planner. (Event
types only the supervisor may write never get here: the connection refuses them.)
Torch-free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from engine.directives.planners.factory import Planner
from engine.directives.queue import DirectiveQueue
from engine.domain import Event, TelemetrySample
from engine.events import (
    CheckpointLoaded,
    CheckpointRejected,
    DirectiveApplied,
    EvalCompleted,
    MemoryAdapted,
    Payload,
    TrainerError,
    TrainerFinished,
    TrainerStarted,
    payload_of,
)
from engine.supervisor.channel.trainer_link import TrainerLink
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.attempts import Attempts
from engine.wire.protocol import TrainerEvent

log = logging.getLogger(__name__)

StepConsumer = Callable[[TelemetrySample], None]
"""A part that hears of every step the trainer reports."""


class TrainerReports:
    """Takes the trainer's greeting, steps and events into the run."""

    def __init__(
        self,
        journal: Journal,
        attempts: Attempts,
        directives: DirectiveQueue,
        planner: Planner | None,
        steps: Sequence[StepConsumer],
    ) -> None:
        self.journal = journal
        self.attempts = attempts
        self.directives = directives
        self.planner = planner
        self.steps = tuple(steps)
        """The step consumers, called in this order for each step."""
        self._reactions: dict[str, Callable[[Event, Payload], None]] = {
            TrainerStarted.event_type: self._loaded,
            CheckpointRejected.event_type: self._loaded,
            CheckpointLoaded.event_type: self._loaded,
            TrainerFinished.event_type: self._finished,
            TrainerError.event_type: self._failed,
            MemoryAdapted.event_type: self._adapted,
            EvalCompleted.event_type: self._evaluated,
        }
        journal.watchers.append(self._react)

    def greet(self, link: TrainerLink) -> None:
        """A trainer just connected: the stop or hold it has to know of, what it missed of
        the directives and the values in effect."""
        self.attempts.greet(link)
        self.directives.trainer_connected()

    def on_step(self, sample: TelemetrySample) -> None:
        for consume in self.steps:
            consume(sample)

    def on_event(self, message: TrainerEvent, payload: Payload | None) -> None:
        """A trainer's event, its payload validated by the connection (None: a type this
        supervisor does not know, recorded as it came)."""
        if isinstance(payload, DirectiveApplied):
            self.directives.on_applied(payload)  # recorded by the queue with its DirectiveView
            return
        self.journal.append(
            message.type, message.severity, message.message, message.data, attempt=self.attempts.attempt
        )

    def _react(self, event: Event) -> None:
        """A recorded event of a type the attempts, the directives or the planner learn from."""
        react = self._reactions.get(event.type)
        payload = payload_of(event) if react is not None else None
        if react is not None and payload is not None:
            react(event, payload)

    def _loaded(self, event: Event, payload: Payload) -> None:
        self.attempts.resumption.on_event(payload, self.attempts.attempt)

    def _finished(self, event: Event, payload: Payload) -> None:
        assert isinstance(payload, TrainerFinished)
        self.attempts.note_finished(payload.reason)

    def _failed(self, event: Event, payload: Payload) -> None:
        assert isinstance(payload, TrainerError)
        self.attempts.note_error(event.message, payload.restartable)

    def _adapted(self, event: Event, payload: Payload) -> None:
        """An OOM: the directives judge growth to that size by it for a while."""
        assert isinstance(payload, MemoryAdapted)
        if payload.kind == "oom":
            self.directives.on_oom(payload.from_micro_batch, payload.step)

    def _evaluated(self, event: Event, payload: Payload) -> None:
        """An eval: the planner may cite its trend (a planner bug never costs the supervisor)."""
        if self.planner is None or not isinstance(payload, EvalCompleted):
            return
        try:
            self.planner.on_eval(payload)
        except Exception:
            log.exception("directive planner failed on the eval of step %d", payload.step)
