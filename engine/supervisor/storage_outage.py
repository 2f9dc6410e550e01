"""A store that cannot write (a full or failing disk) is a state of the run, not its end.

The store (``engine.run.storage.store``) never raises on a storage fault: it keeps what it was
given in its bounded backlog and tells its ``on_fault`` once. From there, ``StorageOutage``:

1. logs it and raises a critical ``alert`` (rule ``storage``), to every console at once
   and to the alert command, although the store cannot take it yet (see below);
2. holds training at the next step boundary (``Attempts.hold_for_storage``, the trainer's
   pause, kept apart from an operator's: an unpause does not release it, and the run's
   status says ``held by storage: REASON``); steps already under way wait in the backlog;
3. retries the write with backoff (``RETRY_FIRST_S`` doubling up to ``RETRY_MOST_S``);
4. once a retry gets through, everything that waited is written in order (no step row
   lost or written twice), a "resolved" alert says how long it lasted (and what the
   backlog's bound dropped, if anything), and training goes on by itself;
5. past ``storage.give_up_s``, stops the run (the trainer's stop: its final checkpoint if
   the disk takes it) to end it as failed, and goes on retrying, so that the ending is
   stored as soon as the disk takes it; ``settle``, once the trainer is gone, retries for
   ``FINAL_WRITE_S`` more, then logs what could not be written and lets the
   supervisor exit (the run then shows as interrupted; ``memtui resume`` takes it up).

**Events while the store refuses writes.** Consoles replay by seq and skip what they have
seen, so seqs must mean the same in the store and on the wire. An event is numbered when
it is recorded, as the store's newest seq plus its place in the backlog, sent out with that
seq at once, and written under exactly that seq, in order, when the store takes writes
again. A console that connects meanwhile gets the waiting events in its replay (the
store's reads include them). If the supervisor exits before the disk takes them they are
lost, and logged as such; the next supervisor numbers on from the newest stored seq, and a
console whose newest seq is past its Welcome's ``last_seq`` takes the store's word
(``memtui.client``), so the new events are not mistaken for ones it has seen. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from engine.alerts.rules import Alert
from engine.config.run_config import StorageConfig
from engine.domain import Severity
from engine.events import STORAGE_RULE
from engine.run.storage.store import Store
from engine.supervisor.trainers.attempts import Attempts

log = logging.getLogger(__name__)

RETRY_FIRST_S = 1.0
"""Seconds before the first retry of a refused write; doubled for each further one (a disk
freed by hand is taken up within a second or two; a failing one is not hammered)."""
RETRY_MOST_S = 30.0
"""Seconds the delay between retries grows to at most: a freed disk is noticed within this."""
HELD_STEPS = 10_000
"""Step samples (and, apart, policy verdicts) kept in memory while the store refuses
writes; past it newer ones are dropped and counted (the alert that closes the fault says
how many, and which). Training is held, so only the steps already under way arrive: a
few, never near the bound, which is there against a trainer that does not hold."""
FINAL_WRITE_S = 60.0
"""Once the run has ended, seconds the supervisor keeps retrying to record the ending
before it exits; what is still unwritten then is logged (the run shows as interrupted,
and ``memtui resume`` takes it up)."""


class StorageOutage:
    """Watches one run's store for refused writes; at most one outage at a time."""

    def __init__(
        self,
        store: Store,
        attempts: Attempts,
        config: StorageConfig,
        *,
        raise_alerts: Callable[[list[Alert]], None],
        spawn: Callable[..., asyncio.Task[Any]],
        end_run: Callable[[str], None],
    ) -> None:
        self.store = store
        self.attempts = attempts
        self.config = config
        self._raise_alerts = raise_alerts  # recorded (held if need be) and sent to the alert command
        self._spawn = spawn
        self._end_run = end_run  # stops the run and ends it as failed with the reason
        self.gave_up: str | None = None
        """Why the run was ended for its store, if it was."""
        self._task: asyncio.Task[None] | None = None
        store.held.limit = HELD_STEPS
        store.on_fault = self.on_fault
        if store.fault is not None:  # refused before the watch began: taken up now
            self.on_fault(store.fault)

    @property
    def active(self) -> bool:
        return self._task is not None

    def on_fault(self, reason: str) -> None:
        """The store's first refused write. Called from inside the store's write, so the
        answer (which records events itself) comes on the loop's next turn."""
        asyncio.get_running_loop().call_soon(self._begin)

    def _begin(self) -> None:
        reason = self.store.fault
        if reason is None or self._task is not None:
            return  # over already, or being handled
        log.critical(
            "the run's store cannot write (%s): training is held, what arrives waits in memory, "
            "and the write is retried",
            reason,
        )
        message = (
            f"the run's store cannot write: {reason}; training is held and goes on by itself "
            "once the store writes again"
        )
        self._alert(False, message, reason=reason, since=self.store.fault_since)
        self.attempts.hold_for_storage(reason)
        self._task = self._spawn(self._recover(), name="storage retries", essential=True)

    async def _recover(self) -> None:
        """Retry with backoff until the store takes everything; give up once, past the limit."""
        loop = asyncio.get_running_loop()
        began, delay = loop.time(), RETRY_FIRST_S
        while True:
            await asyncio.sleep(delay)
            if self.store.retry():
                break
            delay = min(delay * 2, RETRY_MOST_S)
            if self.gave_up is None and loop.time() - began >= self.config.give_up_s:
                self._give_up(loop.time() - began)
        self._task = None
        self._recovered(loop.time() - began)

    def _give_up(self, lasted_s: float) -> None:
        why = f"the run's store could not write for {lasted_s:.0f} s ({self.store.fault})"
        self.gave_up = why
        log.critical("%s: stopping the run", why)
        self._end_run(f"storage: {why}")

    def _recovered(self, lasted_s: float, *, release_hold: bool = True) -> None:
        dropped = self.store.held.take_dropped()
        log.warning(
            "the run's store writes again after %.1f s; what waited is written%s",
            lasted_s,
            f" (dropped past the buffer's bound: {dropped})" if dropped else "",
        )
        message = f"resolved: the run's store writes again after {lasted_s:.1f} s" + (
            f"; dropped past the buffer's bound: {dropped}" if dropped else "; nothing was lost"
        )
        self._alert(True, message, lasted_s=round(lasted_s, 3), dropped=dropped)
        if release_hold:
            self.attempts.hold_for_storage(None)

    def _alert(self, resolved: bool, message: str, **data: Any) -> None:
        severity: Severity = "info" if resolved else "critical"
        self._raise_alerts([Alert(STORAGE_RULE, severity, message, data, resolved=resolved)])

    async def settle(self) -> None:
        """The run has ended: retry for ``FINAL_WRITE_S`` so that its ending is stored, then
        log what is still unwritten (it is lost when the supervisor exits)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.store.fault is None:
            return
        since = self.store.fault_since or time.time()
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + FINAL_WRITE_S, RETRY_FIRST_S
        try:
            while not self.store.retry():
                left = deadline - loop.time()
                if left <= 0:
                    break
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, RETRY_MOST_S)
        except asyncio.CancelledError:
            log.warning("cancelled while waiting for the store to record the run's ending")
        if self.store.fault is None:
            log.info("the run's store took what waited: its ending is recorded")
            self._recovered(time.time() - since, release_hold=False)  # no training left to release
            return
        log.critical(
            "the run's store still cannot write (%s) after %.0f s: %s are not written and are "
            "lost; the run will show as interrupted (memtui resume takes it up)",
            self.store.fault,
            time.time() - since,
            self.store.held.describe(),
        )
