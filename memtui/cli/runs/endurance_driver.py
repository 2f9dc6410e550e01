"""What ``memtui endure`` does between starting a run and writing its report: watch the
store, kill the whole process tree at seeded steps (a host reboot: the supervisor and its
trainer, SIGKILL to each process group), bring the run back as ``memtui resume`` does, and
print a progress line now and then, until the run ends.

A supervisor cannot rehearse its own death, so these kills come from outside; the resume
records them itself (its ``run_started`` names the state the dead supervisor left), which
is how ``memtui report`` counts them. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.domain import TERMINAL_STATES
from engine.run.directory import RunDir, pid_alive
from engine.run.storage.store import Store

POLL_S = 0.5  # s between two looks at the store
PROGRESS_S = 10.0  # s between two progress lines
DEATH_WAIT_S = 30.0  # s a killed process may take to be gone


def kill_steps(seed: int, steps: int, kills: int) -> list[int]:
    """The steps after which the tree is killed: ``kills`` distinct steps drawn with ``seed``
    from the middle 80% of the run (a kill at the very start or end rehearses little)."""
    low, high = max(1, steps // 10), max(1, steps * 9 // 10)
    pool = range(low, high + 1)
    return sorted(random.Random(seed).sample(pool, min(kills, len(pool))))


@dataclass
class Progress:
    """What the driver has seen of the run so far."""

    step: int = 0
    step_attempt: int = 0
    """The attempt that reported ``step``."""
    attempt: int = 0
    state: str | None = None
    supervisor_pid: int | None = None
    trainer_pid: int | None = None
    chaos_injected: int = 0
    chaos_recovered: int = 0

    def line(self, target: int, kills_done: int, kills: int) -> str:
        return (
            f"step {self.step}/{target}  attempt {self.attempt}  kills {kills_done}/{kills}  "
            f"chaos injected {self.chaos_injected} recovered {self.chaos_recovered}  [{self.state}]"
        )


def look(run: RunDir) -> Progress:
    """The run's newest step, state, pids and chaos counts, read-only from its store."""
    if not run.store.exists():
        return Progress()
    with Store(run.store, readonly=True) as store:
        meta = store.read_meta()
        latest = store.latest_step()
        counts = dict(
            store.query(
                "SELECT type, COUNT(*) FROM events WHERE type IN ('chaos_injected', 'chaos_recovered')"
                " GROUP BY type"
            )
        )
    return Progress(
        step=latest.step if latest else 0,
        step_attempt=latest.attempt if latest else 0,
        attempt=meta.attempt,
        state=meta.state,
        supervisor_pid=run.supervisor_pid(),
        trainer_pid=meta.trainer_pid,
        chaos_injected=int(counts.get("chaos_injected", 0)),
        chaos_recovered=int(counts.get("chaos_recovered", 0)),
    )


def kill_tree(run: RunDir, progress: Progress) -> None:
    """SIGKILL the supervisor's and the trainer's process groups, and wait until both are gone."""
    pids = [p for p in (progress.supervisor_pid, progress.trainer_pid) if p and _is_engine(p)]
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)  # each is its group's leader (its own session)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + DEATH_WAIT_S
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    _reap(pids)


def _is_engine(pid: int) -> bool:
    """``pid`` runs ``python -m engine...`` (a stale pid reused by another program is spared)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"engine" in f.read()
    except OSError:
        return False


def _reap(pids: list[int]) -> None:
    """Collect our own dead children (the first supervisor is ours), quietly."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@dataclass
class Endurance:
    """Drive ``run`` to its end, killing the tree after each of ``kills_at``'s steps."""

    run: RunDir
    target: int
    kills_at: list[int]
    resume: Callable[[RunDir], None]
    """Brings a dead run back (``memtui resume``'s path); raises to give up."""
    say: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr, flush=True))
    kills_done: int = 0
    _killed_attempt: int = 0  # the attempt the newest kill ended: the next waits for a newer one

    def drive(self) -> Progress:
        """Until the run ends (not interrupted): kill on schedule, resume, report progress."""
        next_line = 0.0
        while True:
            progress = look(self.run)
            if time.monotonic() >= next_line:
                self.say(progress.line(self.target, self.kills_done, len(self.kills_at)))
                next_line = time.monotonic() + PROGRESS_S
            alive = progress.supervisor_pid is not None
            if not alive and progress.state in TERMINAL_STATES - {"interrupted"}:
                return progress
            if not alive:  # gone without an ending: the supervisor died by itself
                self.say(f"the supervisor is gone at step {progress.step}; resuming")
                self.resume(self.run)
            elif self._kill_due(progress):
                self.kills_done += 1
                self.say(f"whole-tree kill {self.kills_done}/{len(self.kills_at)} at step {progress.step}")
                self._killed_attempt = progress.attempt
                kill_tree(self.run, progress)
                self.resume(self.run)
            time.sleep(POLL_S)

    def _kill_due(self, progress: Progress) -> bool:
        """A kill is due at its step, once the newest attempt has stepped (a kill before the
        resumed trainer's first step would rehearse nothing but a slower start)."""
        due = self.kills_done < len(self.kills_at) and progress.step >= self.kills_at[self.kills_done]
        stepped = progress.step_attempt == progress.attempt > self._killed_attempt
        return due and stepped and progress.state == "running"
