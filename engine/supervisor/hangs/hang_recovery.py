"""A hung trainer is recovered: its stacks asked for, its processes killed, a restart.

A deadlock, a collective that never returns or a stopped process reports nothing and
never exits: the heartbeat alert says so, and without this the run would stay "running"
for ever. Every ``TICK_S`` while a trainer should be stepping (it runs, no stop, no hold)
the ``HangClock`` is asked whether it has been quiet past its limit. Then every rank's
Python stacks are collected (``stack_collection``: one file per rank, stopped ranks
included), ``stacks_collected`` and ``trainer_hung`` are recorded with where each rank
is, and the process group is killed. The heartbeat alert (``alerts.no_step_s``) firing
collects them too, earlier and without any kill, so the operator sees where each rank
waits while deciding. The attempt then ends
as any unasked death does, and the restart decision restarts it from the newest verified
checkpoint. Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from engine.domain import Event, TelemetrySample
from engine.events import (
    HEARTBEAT_RULE,
    AlertRaised,
    RunContinued,
    StacksCollected,
    StartupPhase,
    TrainerHung,
)
from engine.run.stack_files import STACKS_DIR
from engine.supervisor.hangs.hang_clock import HangClock
from engine.supervisor.hangs.stack_collection import collect_stacks
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.attempts import Attempts

log = logging.getLogger(__name__)

TICK_S = 1.0  # s between checks; a hang is caught within its limit plus this
HUNG_RULE = TrainerHung.event_type


class HangRecovery:
    """Watches one run's trainer attempts for hangs and ends a hung one."""

    def __init__(
        self,
        attempts: Attempts,
        journal: Journal,
        hang_s: float | None,
        latest_step: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
        at_rendezvous: Callable[[], bool] = lambda: False,
    ) -> None:
        self.attempts = attempts
        self._at_rendezvous = at_rendezvous  # waiting for other nodes: their watch bounds it
        self.journal = journal
        self.hang = HangClock(hang_s)
        self._latest_step = latest_step
        self._now = clock
        self.ticks = 0
        """Checks made so far (a test waits for the watch to have looked)."""
        self._collecting: asyncio.Task[StacksCollected | None] | None = None
        journal.watchers.append(self._watch)

    def _watch(self, event: Event) -> None:
        """Start-up phases are signs of life (a cold op build takes minutes before a step);
        the heartbeat alert firing has every rank's stacks collected."""
        phase = StartupPhase.of(event)
        if phase is not None:
            self.hang.sign_of_life(self._now(), phase.phase)  # a build: never judged by a short hang_s
        elif event.type == RunContinued.event_type:
            self.sign_of_life()
        alert = AlertRaised.of(event)
        busy = self._collecting is not None and not self._collecting.done()
        if alert is not None and alert.rule == HEARTBEAT_RULE and not alert.resolved and not busy:
            self._collecting = asyncio.get_running_loop().create_task(self.collect(HEARTBEAT_RULE))

    async def collect(self, rule: str) -> StacksCollected | None:
        """Every rank's stacks into ``stacks/``, recorded as ``stacks_collected``; None when no
        trainer runs."""
        attempt, targets = self.attempts.attempt, self.attempts.stack_targets()
        if not targets:
            return None
        collected = await collect_stacks(self.attempts.run.path, attempt, targets, rule)
        where = "; ".join(f"rank {r}: {w}" for r, w in collected.where.items()) or "no rank answered"
        stopped = f" (stopped: rank {', '.join(map(str, collected.stopped))})" if collected.stopped else ""
        message = f"stacks of {len(collected.files)} of {len(targets)} ranks{stopped}: {where}"
        self.journal.record(collected, message, attempt=attempt)
        return collected

    def sign_of_life(self) -> None:
        """A start-up phase (or a launch, a continue): the quiet time starts again."""
        self.hang.sign_of_life(self._now())

    def on_step(self, sample: TelemetrySample) -> None:
        """A step: the trainer is alive (its content is the other consumers' business)."""
        self.hang.on_step(self._now())

    def watching(self) -> bool:
        """A trainer runs that should be stepping: not stopping, not held, not paused, not
        waiting for other nodes, and its steps come here (a follower node's ranks report to
        node 0's supervisor)."""
        attempts = self.attempts
        return (
            not attempts.follower
            and not self._at_rendezvous()
            and attempts.pid is not None
            and attempts.stop_reason is None
            and not attempts.held
            and self.journal.state not in ("paused", "stopping")
        )

    async def run(self) -> None:
        """Until cancelled: check every TICK_S; recover a hung trainer."""
        while True:
            await asyncio.sleep(TICK_S)
            self.ticks += 1
            if not self.watching():
                self.sign_of_life()  # quiet time counts only while steps are expected
            elif self.hang.hung(self._now()):
                await self.recover()

    async def recover(self) -> None:
        """Dump the hung trainer's stacks into its log, record it, kill it (a restart follows)."""
        pid, attempt = self.attempts.pid, self.attempts.attempt
        if pid is None:
            return
        quiet = self.hang.quiet_s(self._now()) or 0.0
        limit = self.hang.limit_s()
        self.hang.sign_of_life(self._now())  # one recovery per hang, however long the kill takes
        if self._collecting is not None and not self._collecting.done():
            await self._collecting  # the heartbeat's collection: never two rounds of signals at once
        collected = await self.collect(HUNG_RULE)
        dumped = len(collected.files) if collected is not None else 0
        last_step = self._latest_step()
        hung = TrainerHung(
            attempt=attempt,
            quiet_s=round(quiet, 1),
            limit_s=round(limit, 1),
            last_step=last_step,
            stacks_log=STACKS_DIR,
            stacks_dumped=dumped,
        )
        stacks = f"stacks of {dumped} ranks in {STACKS_DIR}/" if dumped else "no stacks came"
        reason = f"hung: no sign of life for {quiet:.0f} s (limit {limit:.0f} s) after step {last_step}"
        self.journal.record(hung, f"trainer {reason}; {stacks}; killing it", attempt=attempt)
        self.attempts.kill_hung(reason)
