"""How the cores of a CPU-only host are shared: every core this process may run on
(its affinity mask) goes to training, divided evenly between the ranks on the host;
``OMP_NUM_THREADS``, when the user set it, wins. Torch-free: the supervisor uses it to
give each rank its share under torchrun (which otherwise pins every rank to 1 thread), the
trainer to size torch's intra-op pool.

The supervisor and the console do not reserve a core: they run at a lower priority instead
(see ``engine.supervisor.trainers.trainer_launcher``), so training gets every core whenever it wants one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

OMP_ENV = "OMP_NUM_THREADS"
OMP_WAIT_ENV = "OMP_WAIT_POLICY"  # the user's to set: no default (trainer_process says why)


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask; ``os.cpu_count()`` where the
    platform has no mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def threads_per_rank(cores: int, local_ranks: int) -> int:
    """Intra-op threads for each of ``local_ranks`` ranks on ``cores`` cores (at least 1)."""
    return max(1, cores // max(1, local_ranks))


def user_threads(environ: Mapping[str, str]) -> int | None:
    """The user's ``OMP_NUM_THREADS`` (a positive integer), or None when unset or unusable."""
    raw = environ.get(OMP_ENV, "").strip()
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value > 0 else None


SUPERVISOR_NICE = 10  # nice steps below the trainer: the supervisor waits on events, mostly idle
CONSOLE_NICE = 10  # the console redraws a few times a second; a frame late costs nothing


def step_aside(steps: int) -> bool:
    """Lower the calling thread's priority by ``steps`` nice steps (threads and processes
    it creates afterwards inherit it). True if lowered.

    Linux only: there the nice value is a thread's (``setpriority(PRIO_PROCESS, 0)``
    changes the calling thread), so a process can keep one thread at its old priority to
    fork children that must not inherit the lower one (the supervisor's trainer launcher).
    Elsewhere it is the process's, and nothing is changed. No root needed: anyone may lower
    their own priority (but never raise it back).
    """
    if not sys.platform.startswith("linux") or steps <= 0:
        return False
    try:
        os.nice(steps)
    except OSError:
        return False
    return True
