"""Chaos in a live run: every kind performed, each recorded first, its recovery judged, and
the run's ``[chaos]`` schedule carried out.

A request (an operator's ``Chaos`` or a scheduled draw) is refused with an Error that says
why, changing and storing nothing, when it cannot be done now: the run is stopping or
ended, or its performer cannot aim (no trainer runs, no verified checkpoint exists, ...).
Otherwise ``chaos_injected`` is stored (chaos id, kind, parameters with defaults, source,
newest step, the pid or file acted on), and then its performer acts
(``engine.supervisor.chaos.performer``: the supervisor's own kinds in
``chaos/performers/``, every trainer kind sent to the trainer as ``InjectChaos``; it says
``chaos_applied`` when one takes effect at a step boundary).

``chaos_recovery.RecoveryTracker`` turns steps and events into ``chaos_recovered`` verdicts.
The schedule (``chaos_schedule``) injects a kind when the newest step reaches its scheduled
step and no earlier injection waits for its verdict (so each one's recovery is judged on
its own; a postponed one keeps its turn, so no kind of the deck is lost); a new supervisor
goes on after the newest scheduled injection stored and the newest step. Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from engine.chaos.config import ChaosConfig
from engine.chaos.kind import rank_outside
from engine.chaos.table import CHAOS_ADAPTER, ChaosKindSpec, ChaosRequest, chaos_specs, values_of
from engine.directives.queue import DirectiveQueue
from engine.domain import Event, Severity, TelemetrySample
from engine.events import ChaosInjected, ChaosRecovered
from engine.run.directory import RunDir
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.channel.trainer_link import TrainerLink
from engine.supervisor.chaos.performer import Aim, performers
from engine.supervisor.chaos.recovery import Pending, RecoveryTracker
from engine.supervisor.chaos.schedule import Scheduled, schedule
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.attempts import Attempts
from engine.wire.protocol import Chaos, Error, Ok

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 1.0  # s between checks of the recovery deadlines
REPLAY_PAGE = 1000  # stored events read per page when taking up a predecessor's injections


def advertised() -> list[ChaosKindSpec]:
    """The kinds this supervisor carries out (a performer for each): sent in ``Welcome``."""
    return chaos_specs(performers())


class ChaosDesk:
    """Takes chaos requests and the schedule's draws for one run, and judges the recoveries."""

    def __init__(
        self,
        run: RunDir,
        journal: Journal,
        attempts: Attempts,
        directives: DirectiveQueue,
        config: ChaosConfig,
        *,
        trainer: Callable[[], TrainerLink | None],
        latest_step: Callable[[], int],
        spawn: Callable[..., Any],
        world: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run = run
        self.world = world
        """Ranks in the run (train.ranks x train.nodes): a request aimed past them is refused."""
        self.journal = journal
        self.attempts = attempts
        self.directives = directives
        self.consoles: Consoles = journal.consoles
        self.trainer = trainer
        self.latest_step = latest_step
        self.spawn = spawn
        self.clock = clock
        self.tracker = RecoveryTracker(config.recovery_timeout_s)
        self._watch_wake = asyncio.Event()  # set when an injection starts waiting for its verdict
        self._schedule: Iterator[Scheduled] = iter(())
        self.next: Scheduled | None = None
        """The next scheduled injection (None: no schedule)."""
        self._resume_schedule(config)
        self._take_up_pending()
        journal.watchers.append(self._on_event)

    def _resume_schedule(self, config: ChaosConfig) -> None:
        """Go on after the newest scheduled injection stored and the newest step."""
        newest = self.journal.store.newest_event((ChaosInjected.event_type,))
        done = ChaosInjected.of(newest) if newest is not None else None
        after = max(self.latest_step(), (done.scheduled_step or 0) if done is not None else 0)
        self._schedule = schedule(config)
        self.next = next(self._schedule, None)
        while self.next is not None and self.next.step <= after:
            self.next = next(self._schedule, None)

    def _take_up_pending(self) -> None:
        """The previous supervisor's injections without a verdict yet (a whole-tree kill)."""
        store = self.journal.store
        if store.newest_event((ChaosInjected.event_type,)) is None:
            return  # the run was never attacked: nothing to read

        def stored() -> Iterator[Event]:
            cursor = 0
            while page := store.events_since(cursor, REPLAY_PAGE):
                yield from page
                cursor = page[-1].seq

        self._record(self.tracker.replay(stored()))
        if self.tracker.pending:
            log.info("taking up %d chaos injections without a verdict", len(self.tracker.pending))

    # ------------------------------------------------------------------- requests

    def inject(self, message: Chaos) -> Ok | Error:
        """An operator's request: done, or an Error that says why not (nothing changed)."""
        return self.perform(message.request, "operator", request_id=message.id)

    def perform(
        self, request: ChaosRequest, source: str, *, request_id: Any = None, scheduled_step: int | None = None
    ) -> Ok | Error:
        kind = request.kind
        performer = performers().get(kind)
        aim: Aim | str = f"this supervisor does not perform {kind}"
        outside = rank_outside(request, self.world)
        if self.journal.ended or self.attempts.stop_reason is not None:
            aim = f"the run is {self.journal.state}: there is nothing to inject into"
        elif outside is not None:
            aim = outside
        elif performer is not None:
            aim = performer.aim(self, self.journal.state)
        if performer is None or isinstance(aim, str):
            return Error(id=request_id, reason=f"chaos {kind}: {aim}")
        chaos_id = f"c-{uuid.uuid4().hex[:8]}"
        params = values_of(request)
        injected = ChaosInjected(
            chaos_id=chaos_id,
            kind=kind,
            params=params,
            source=source,
            step=self.latest_step(),
            pid=aim.pid,
            target=aim.target,
            scheduled_step=scheduled_step,
        )
        self.journal.record(injected, _describe(injected, aim), attempt=self.attempts.attempt)
        pending = Pending(chaos_id, kind, params, self.clock(), self.attempts.attempt)
        performer.taken_up(pending, injected)  # what it acts on, as a new supervisor reads it back
        self.tracker.injected(pending)
        self._watch_wake.set()
        performer.act(self, request, chaos_id, aim)
        return Ok(id=request_id, result={"chaos_id": chaos_id, "kind": kind, "pid": aim.pid})

    def resolve(self, chaos_id: str, recovered: bool, detail: str) -> None:
        """A verdict the performer decided itself (how many consoles closed, a storm refused)."""
        self._record(self.tracker.resolve(chaos_id, recovered, self.clock(), detail))

    # ---------------------------------------------------------------- the run's news

    def on_step(self, sample: TelemetrySample) -> None:
        """A step from the trainer: verdicts it shows, then a scheduled injection due."""
        self._record(self.tracker.on_step(sample, self.clock()))
        due = self.next
        if due is None or sample.step < due.step or self.tracker.pending:
            return
        request: ChaosRequest = CHAOS_ADAPTER.validate_python({"kind": due.kind})  # its defaults
        answer = self.perform(request, "schedule", request_id=f"schedule-{due.step}", scheduled_step=due.step)
        if isinstance(answer, Error):
            log.warning("scheduled %s at step %d skipped: %s", due.kind, due.step, answer.reason)
        self.next = next(self._schedule, None)  # postponed ones keep their turn: no kind lost

    def _on_event(self, event: Event) -> None:
        if event.type not in (ChaosInjected.event_type, ChaosRecovered.event_type):
            self._record(self.tracker.on_event(event, self.clock()))

    async def keep_watch(self) -> None:
        """Verdicts for injections past their deadline (until cancelled). Asleep while no
        injection waits (most runs): no wake-up per second for nothing."""
        while True:
            if not self.tracker.pending:
                self._watch_wake.clear()
                await self._watch_wake.wait()
            await asyncio.sleep(WATCH_INTERVAL_S)
            self._record(self.tracker.expired(self.clock()))

    def settle(self, state: str) -> None:
        """The run ends as ``state``: a verdict for every injection still waiting."""
        self._record(self.tracker.settle(state, self.clock()))

    def _record(self, verdicts: list[ChaosRecovered]) -> None:
        for verdict in verdicts:
            how = "recovered" if verdict.recovered else "did NOT recover"
            message = f"chaos {verdict.kind} ({verdict.chaos_id}) {how} after {verdict.seconds:.1f} s"
            message += f": {verdict.detail}"
            severity: Severity = "info" if verdict.recovered else "warning"
            self.journal.record(verdict, message[:4096], severity=severity, attempt=self.attempts.attempt)


def _describe(injected: ChaosInjected, aim: Aim) -> str:
    what = f"chaos {injected.kind}"
    if injected.params:
        what += " (" + ", ".join(f"{k}={v}" for k, v in injected.params.items()) + ")"
    if injected.pid is not None:
        what += f" on trainer pid {injected.pid}"
    if injected.target is not None:
        what += f": {aim.done_to_it or 'acted on'} in {injected.target}"
    return what + f" [{injected.source}]"
