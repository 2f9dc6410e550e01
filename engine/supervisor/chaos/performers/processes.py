"""``kill`` (SIGKILL of the trainer's process group; the restart policy treats it like any
unasked death) and ``preempt`` (SIGTERM, as a preempting host sends: the trainer saves and
exits; SIGKILL after the stop grace if it is still there)."""

from __future__ import annotations

import asyncio
import logging
import signal

from engine.chaos.kind import ChaosKind
from engine.chaos.kinds.processes import Kill, Preempt
from engine.supervisor.chaos.performer import Aim, Desk, SupervisorPerformer
from engine.supervisor.trainers.attempts import Attempts
from engine.supervisor.trainers.trainer_process import kill_group

log = logging.getLogger(__name__)


def _aim_at_the_trainer(desk: Desk, state: str, kind: str) -> Aim | str:
    pid = desk.attempts.pid
    return Aim(pid=pid) if pid is not None else f"no trainer is running to {kind} (the run is {state})"


class KillPerformer(SupervisorPerformer):
    model = Kill

    def aim(self, desk: Desk, state: str) -> Aim | str:
        return _aim_at_the_trainer(desk, state, self.kind)

    def act(self, desk: Desk, request: ChaosKind, chaos_id: str, aim: Aim) -> None:
        desk.attempts.kill()


class PreemptPerformer(SupervisorPerformer):
    model = Preempt

    def aim(self, desk: Desk, state: str) -> Aim | str:
        return _aim_at_the_trainer(desk, state, self.kind)

    def act(self, desk: Desk, request: ChaosKind, chaos_id: str, aim: Aim) -> None:
        if aim.pid is None:
            return
        kill_group(aim.pid, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        loop.call_later(desk.attempts.stop_grace_s, _kill_if_still, desk.attempts, aim.pid)


def _kill_if_still(attempts: Attempts, pid: int) -> None:
    """The preempting host's SIGKILL after the grace, to the same trainer only."""
    if attempts.pid == pid:
        log.warning("preempted trainer pid %d still there after the grace: SIGKILL", pid)
        attempts.kill()
