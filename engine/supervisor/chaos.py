"""Chaos in a live run: every kind performed, each recorded first, its recovery judged, and
the run's ``[chaos]`` schedule carried out.

A request (an operator's ``Chaos`` or a scheduled draw) is refused with an Error that says
why, changing and storing nothing, when it cannot be done now: the run is stopping or
ended, no trainer runs (trainer kinds and kill/preempt), no verified checkpoint exists
(corrupt_checkpoint). Otherwise ``chaos_injected`` is stored (chaos id, kind, parameters
with defaults, source, newest step, the pid or file acted on), and then it is done:

- supervisor kinds: ``kill`` (SIGKILL of the trainer's process group; the restart policy
  treats it like any unasked death), ``preempt`` (SIGTERM, as a preempting host sends: the
  trainer saves and exits; SIGKILL after the stop grace if it is still there),
  ``corrupt_checkpoint`` (``chaos_acts.corrupt``), ``drop_consoles`` (every console closed
  once its queue drained: they reconnect and replay), ``planner_storm``
  (``chaos_acts.storm``, in slices between which the loop serves steps and consoles);
- trainer kinds go to the trainer as ``InjectChaos``; it says ``chaos_applied`` when one
  takes effect at a step boundary.

``chaos_recovery.RecoveryTracker`` turns steps and events into ``chaos_recovered`` verdicts.
The schedule (``chaos_schedule``) injects a kind when the newest step reaches its scheduled
step and no earlier injection waits for its verdict (so each one's recovery is judged on
its own; a postponed one keeps its turn, so no kind of the deck is lost); a new supervisor
goes on after the newest scheduled injection stored and the newest step. Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from engine.chaos_kinds import CHAOS_ADAPTER, REQUESTS, ChaosConfig, ChaosKindSpec, ChaosRequest, chaos_specs
from engine.directives.queue import DirectiveQueue
from engine.domain import Event, Severity, TelemetrySample
from engine.events import ChaosInjected, ChaosRecovered
from engine.protocol import Chaos, Error, InjectChaos, Ok
from engine.run.directory import RunDir
from engine.supervisor import chaos_acts
from engine.supervisor.attempts import Attempts
from engine.supervisor.chaos_recovery import Pending, RecoveryTracker
from engine.supervisor.chaos_schedule import Scheduled, schedule
from engine.supervisor.consoles import Consoles
from engine.supervisor.journal import Journal
from engine.supervisor.trainer_link import TrainerLink
from engine.supervisor.trainer_process import kill_group

log = logging.getLogger(__name__)

PERFORMED = tuple(REQUESTS)
"""The kinds this supervisor carries out: advertised to consoles in ``Welcome``."""
WATCH_INTERVAL_S = 1.0  # s between checks of the recovery deadlines
REPLAY_PAGE = 1000  # stored events read per page when taking up a predecessor's injections
STORM_SLICE = 50  # hostile directives per slice of a storm (~10 ms of the event loop)
CONSOLE_DRAIN_S = 1.0  # s consoles get to receive what is queued before they are dropped


def advertised() -> list[ChaosKindSpec]:
    return chaos_specs(PERFORMED)


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run = run
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
        refusal = self._refusal(request)
        target = None
        if refusal is None and kind == "corrupt_checkpoint":
            target = chaos_acts.corruption_target(self.run.checkpoints)
            if target is None:
                refusal = "there is no verified checkpoint to corrupt yet"
        if refusal is not None:
            return Error(id=request_id, reason=f"chaos {kind}: {refusal}")
        chaos_id = f"c-{uuid.uuid4().hex[:8]}"
        pid = self.attempts.pid if kind in ("kill", "preempt") else None
        params = request.model_dump(mode="json", exclude={"kind"})
        injected = ChaosInjected(
            chaos_id=chaos_id,
            kind=kind,
            params=params,
            source=source,
            step=self.latest_step(),
            pid=pid,
            target=target.file if target is not None else None,
            scheduled_step=scheduled_step,
        )
        self.journal.record(injected, _describe(injected), attempt=self.attempts.attempt)
        pending = Pending(chaos_id, kind, params, self.clock(), self.attempts.attempt)
        if target is not None:
            pending.target, pending.target_step = target.tag, target.step
        self.tracker.injected(pending)
        self._watch_wake.set()
        self._act(request, chaos_id, pid, target)
        return Ok(id=request_id, result={"chaos_id": chaos_id, "kind": kind, "pid": pid})

    def _refusal(self, request: ChaosRequest) -> str | None:
        """Why ``request`` cannot be done now; None: it can."""
        if self.journal.ended or self.attempts.stop_reason is not None:
            return f"the run is {self.journal.state}: there is nothing to inject into"
        performer = REQUESTS[request.kind].performer
        if performer == "trainer" and self.trainer() is None:
            return f"no trainer is running (the run is {self.journal.state})"
        if request.kind in ("kill", "preempt") and self.attempts.pid is None:
            return f"no trainer is running to {request.kind} (the run is {self.journal.state})"
        return None

    def _act(self, request: ChaosRequest, chaos_id: str, pid: int | None, target: Any) -> None:
        kind = request.kind
        if kind == "kill":
            self.attempts.kill()
        elif kind == "preempt" and pid is not None:
            kill_group(pid, signal.SIGTERM)
            loop = asyncio.get_running_loop()
            loop.call_later(self.attempts.stop_grace_s, self._kill_if_still, pid)
        elif kind == "corrupt_checkpoint":
            try:
                chaos_acts.corrupt(self.run.checkpoints, target)
            except OSError as err:  # pruned meanwhile, or unwritable: injected, but not done
                detail = f"could not corrupt {target.file}: {err.strerror or err}"
                self._record(self.tracker.resolve(chaos_id, False, self.clock(), detail))
        elif kind == "drop_consoles":
            self.spawn(self._drop_consoles(chaos_id), "chaos: drop consoles")
        elif kind == "planner_storm":
            self.spawn(self._storm(chaos_id, request.count), "chaos: planner storm")  # type: ignore[union-attr]
        else:
            link = self.trainer()
            if link is not None:
                link.send(InjectChaos(chaos_id=chaos_id, request=request))

    def _kill_if_still(self, pid: int) -> None:
        """The preempting host's SIGKILL after the grace, to the same trainer only."""
        if self.attempts.pid == pid:
            log.warning("preempted trainer pid %d still there after the grace: SIGKILL", pid)
            self.attempts.kill()

    async def _storm(self, chaos_id: str, count: int) -> None:
        """The storm in slices, so that steps and consoles are served between them."""
        refused = admitted = 0
        for first in range(0, count, STORM_SLICE):
            done = chaos_acts.storm(self.directives, min(STORM_SLICE, count - first), first)
            refused, admitted = refused + done[0], admitted + done[1]
            await asyncio.sleep(0)
        detail = f"{refused} of {count} hostile directives refused, {admitted} admitted"
        self._record(self.tracker.resolve(chaos_id, admitted == 0, self.clock(), detail))

    async def _drop_consoles(self, chaos_id: str) -> None:
        await self.consoles.drain(CONSOLE_DRAIN_S)  # the requester gets its answer first
        dropped = sum(1 for _ in self.consoles)
        await self.consoles.close()
        detail = f"{dropped} console connection{'s' if dropped != 1 else ''} closed"
        self._record(self.tracker.resolve(chaos_id, True, self.clock(), detail))

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


def _describe(injected: ChaosInjected) -> str:
    what = f"chaos {injected.kind}"
    if injected.params:
        what += " (" + ", ".join(f"{k}={v}" for k, v in injected.params.items()) + ")"
    if injected.pid is not None:
        what += f" on trainer pid {injected.pid}"
    if injected.target is not None:
        what += f": bytes flipped in {injected.target}"
    return what + f" [{injected.source}]"
