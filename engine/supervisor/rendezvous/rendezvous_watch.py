"""Each attempt of a run over several nodes waits at the rendezvous: said, watched, bounded.

From an attempt's launch until torchrun starts its ranks nothing of the trainer runs, so
the supervisor says the wait itself: the start-up phase ``waiting_for_nodes`` with the
endpoint, the rendezvous id and (node 0) the nodes joined so far, said again when that
count changes. Every ``TICK_S`` it looks at its torchrun (``rendezvous_sockets``); the
ranks' start (or, on node 0, the trainer's first word) ends the wait with ``nodes_joined``,
and a follower's state becomes running. A wait past ``train.rdzv_timeout_s`` records
``rendezvous_timed_out`` with one line naming the likely mismatch and ends the run with that
line: waiting again would meet nobody. A follower whose node 0 stopped the run waits for
its resume without a limit. Torch-free.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from engine.config.run_config import RunConfig
from engine.domain import Event
from engine.events import (
    NodesJoined,
    RendezvousTimedOut,
    RendezvousWait,
    RunEnded,
    StartupPhase,
    TrainerExited,
    TrainerLaunched,
    TrainerStarted,
)
from engine.rendezvous import rendezvous_id
from engine.run.node_outcome import read_node_outcome
from engine.supervisor.journal import Journal
from engine.supervisor.rendezvous.rendezvous_sockets import RendezvousSeen, look
from engine.supervisor.trainers.attempts import Attempts

TICK_S = 1.0  # s between looks at torchrun; a timeout is caught within its limit plus this
WAITING = "waiting_for_nodes"


class RendezvousWatch:
    """Says, watches and bounds one node's waits at the rendezvous, attempt by attempt."""

    def __init__(
        self,
        journal: Journal,
        attempts: Attempts,
        wait: RendezvousWait,
        *,
        end_run: Callable[[str], None],
        looker: Callable[[int, int], RendezvousSeen] = look,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.journal = journal
        self.attempts = attempts
        self.template = wait
        """This node's wait as it begins: endpoint, id, nodes, timeout."""
        self.current: RendezvousWait | None = None
        """The wait under way (None: none; the nodes met, or the attempt ended)."""
        self._end_run = end_run
        self._look = looker
        self._now = clock
        self._port = int(wait.endpoint.rpartition(":")[2])
        self._attempt = 0
        self._pid: int | None = None
        self._since = 0.0  # monotonic s of the attempt's launch
        journal.watchers.append(self._watch)

    def waiting(self) -> bool:
        """A wait is under way (the hang watch leaves it to this one)."""
        return self.current is not None

    def _watch(self, event: Event) -> None:
        launched = TrainerLaunched.of(event)
        if launched is not None:
            self._begin(launched.attempt, launched.pid)
        elif self.current is None:
            return
        elif event.type in (TrainerExited.event_type, RunEnded.event_type):
            self.current = None
        elif event.type == TrainerStarted.event_type:
            self._met()
        else:
            phase = StartupPhase.of(event)
            if phase is not None and phase.phase != WAITING:  # rank 0 speaks: the nodes met
                self._met()

    def _begin(self, attempt: int, pid: int) -> None:
        self._attempt, self._pid, self._since = attempt, pid, self._now()
        patient = self.attempts.follower and read_node_outcome(self.attempts.run, attempt - 1) == "stopped"
        self._say(self.template.model_copy(update={"timeout_s": None}) if patient else self.template)

    def _say(self, wait: RendezvousWait) -> None:
        self.current = wait
        phase = StartupPhase(phase=WAITING, attempt=self._attempt, rendezvous=wait)
        self.journal.record(phase, wait.label(), attempt=self._attempt)

    async def run(self) -> None:
        """Until cancelled: look every TICK_S while a wait is under way."""
        while True:
            await asyncio.sleep(TICK_S)
            await self.tick()

    async def tick(self) -> None:
        """One look: the nodes met, a new count of them, or a wait past its limit."""
        pid = self._pid
        if self.current is None or pid is None or self.attempts.stop_reason is not None:
            return
        seen = await asyncio.to_thread(self._look, pid, self._port)
        wait = self.current
        if wait is None or pid != self._pid:  # the attempt ended (or another began) meanwhile
            return
        if seen.met:
            self._met()
            return
        if (updated := most_seen(wait, seen)) != wait:
            self._say(wait := updated)
        if wait.timeout_s is not None and self._now() - self._since >= wait.timeout_s:
            self._time_out(wait)

    def _met(self) -> None:
        wait, self.current = self.current, None
        if wait is None:
            return
        waited = self._now() - self._since
        joined = NodesJoined(
            attempt=self._attempt,
            endpoint=wait.endpoint,
            rdzv_id=wait.rdzv_id,
            nodes=wait.nodes,
            waited_s=round(waited, 1),
        )
        text = f"the {wait.nodes} nodes met at {wait.endpoint} after {waited:.0f} s (id {wait.rdzv_id})"
        self.journal.record(joined, text, attempt=self._attempt)
        if self.attempts.follower and self.journal.state in ("starting", "restarting"):
            self.journal.set_state("running")  # its ranks report to node 0's supervisor, never here

    def _time_out(self, wait: RendezvousWait) -> None:
        self.current = None
        line = wait.mismatch()
        self.journal.record(RendezvousTimedOut(attempt=self._attempt, wait=wait), line, attempt=self._attempt)
        self._end_run(line)


def most_seen(wait: RendezvousWait, seen: RendezvousSeen) -> RendezvousWait:
    """The wait after one look: the most seen during it, not only now (when the first node
    to time out leaves, the others must still say that it had come)."""
    if wait.node_rank > 0:
        return wait.model_copy(update={"reached": bool(wait.reached) or seen.reached})
    counts = [n for n in (wait.joined, seen.joined) if n is not None]
    return wait.model_copy(update={"joined": max(counts) if counts else None})


def rendezvous_watch(
    config: RunConfig, journal: Journal, attempts: Attempts, end_run: Callable[[str], None]
) -> RendezvousWatch | None:
    """The watch for a run over several nodes; None on one host (no rendezvous)."""
    train = config.train
    if train.nodes <= 1 or train.rdzv_endpoint is None:
        return None
    wait = RendezvousWait(
        endpoint=train.rdzv_endpoint,
        rdzv_id=rendezvous_id(config),
        nodes=train.nodes,
        node_rank=train.node_rank,
        timeout_s=train.rdzv_timeout_s,
    )
    return RendezvousWatch(journal, attempts, wait, end_run=end_run)
