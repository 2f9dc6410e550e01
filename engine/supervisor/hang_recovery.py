"""A hung trainer is recovered: its stacks asked for, its processes killed, a restart.

A deadlock, a collective that never returns or a stopped process reports nothing and
never exits: the heartbeat alert says so, and without this the run would stay "running"
for ever. Every ``TICK_S`` while a trainer should be stepping (it runs, no stop, no hold)
the ``HangClock`` is asked whether it has been quiet past its limit. Then each of its
processes gets ``STACK_DUMP_SIGNAL`` (every rank registers ``faulthandler`` on it and
writes its Python stacks to the attempt's log) and SIGCONT (a stopped process can only
answer once continued); after the dumps (or ``STACKS_WAIT_S``) ``trainer_hung`` is
recorded with where they are, and the process group is killed. The attempt then ends
as any unasked death does, and the restart decision restarts it from the newest verified
checkpoint. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from engine.domain import STACK_DUMP_SIGNAL, Event
from engine.events import RunContinued, StartupPhase, TrainerHung
from engine.supervisor.attempts import Attempts
from engine.supervisor.hang_clock import HangClock
from engine.supervisor.journal import Journal

log = logging.getLogger("engine.supervisor.hang_recovery")

TICK_S = 1.0  # s between checks; a hang is caught within its limit plus this
STACKS_WAIT_S = 3.0  # s the dumps may take to reach the log before the kill
STACKS_POLL_S = 0.1
STACK_MARK = b"most recent call first"  # faulthandler's header of each thread's stack


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
        journal.watchers.append(self._watch)

    def _watch(self, event: Event) -> None:
        """Start-up phases are signs of life (a cold op build takes minutes before a step)."""
        if event.type in (StartupPhase.event_type, RunContinued.event_type):
            self.sign_of_life()

    def sign_of_life(self) -> None:
        """A start-up phase (or a launch, a continue): the quiet time starts again."""
        self.hang.sign_of_life(self._now())

    def on_step(self) -> None:
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
        where = self.attempts.run.trainer_log(attempt)
        targets = self.attempts.stack_targets()
        dumped = await dump_stacks(targets, pid, where)
        last_step = self._latest_step()
        relative = os.path.relpath(where, self.attempts.run.path)
        hung = TrainerHung(
            attempt=attempt,
            quiet_s=round(quiet, 1),
            limit_s=round(limit, 1),
            last_step=last_step,
            stacks_log=relative,
            stacks_dumped=dumped,
        )
        stacks = (
            f"stacks of {dumped} of {len(targets)} processes in {relative}"
            if dumped
            else (f"no stacks came ({relative})")
        )
        reason = f"hung: no sign of life for {quiet:.0f} s (limit {limit:.0f} s) after step {last_step}"
        self.journal.record(hung, f"trainer {reason}; {stacks}; killing it", attempt=attempt)
        self.attempts.kill_hung(reason)


async def dump_stacks(pids: list[int], group: int, log_path: Path) -> int:
    """Signal each of ``pids`` to dump its stacks, continue ``group`` (a stopped process
    dumps only once it runs), and wait until a dump per process reached ``log_path`` or
    STACKS_WAIT_S passed. Returns the dumps found there (at most one per process asked)."""
    start = _size(log_path)
    sig = signal.Signals[STACK_DUMP_SIGNAL]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGCONT)
    deadline = time.monotonic() + STACKS_WAIT_S
    found = 0
    while time.monotonic() < deadline:
        found = _dumps_since(log_path, start)
        if found >= len(pids):
            break
        await asyncio.sleep(STACKS_POLL_S)
    return min(found, len(pids))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _dumps_since(path: Path, offset: int) -> int:
    """Processes whose dump is in ``path`` after ``offset``: faulthandler starts each with
    the current thread's header ("Current thread 0x... (most recent call first)")."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read()
    except OSError:
        return 0
    return text.count(b"Current thread") or min(text.count(STACK_MARK), 1)
