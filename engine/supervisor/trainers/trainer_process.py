"""The trainer as the supervisor's child process: its command line, how an attempt ended,
and signalling its process tree.

One rank is ``python -m engine.trainer RUN_DIR --attempt N``; several are that module under
torchrun, which starts each rank in a session of its own. Torch-free.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from engine.config.run_config import RunConfig, TrainConfig
from engine.cpu_share import OMP_ENV, threads_per_rank, usable_cores
from engine.domain import RunState
from engine.rendezvous import rendezvous_id
from engine.run.directory import RunDir

TRAINER_CMD_ENV = "MEMTUI_TRAINER_CMD"  # shlex string; run dir and --attempt N are appended
STORE_TIMEOUT_S = 600  # s: torchrun's static rendezvous default (its store's every wait)
STORE_TIMEOUT_MARGIN_S = 60  # s torchrun's limit stays beyond the supervisor's join timeout


# ------------------------------------------------------------------- command line


@dataclass(frozen=True)
class Placement:
    """Where this supervisor's ranks sit in the run, as the run's ``[train]`` section says:
    ``ranks`` here, on node ``node_rank`` of ``nodes``, meeting the others at
    ``rdzv_endpoint`` (torchrun's rendezvous on node 0) under ``rdzv_id``, the id every node
    derives from the whole config (``engine.rendezvous``). No defaults of its own: the
    section's are the run's."""

    train: TrainConfig
    rdzv_id: str

    @classmethod
    def of(cls, config: RunConfig) -> Placement:
        return cls(config.train, rendezvous_id(config))

    @property
    def follower(self) -> bool:
        """A node other than node 0: its ranks report to node 0's supervisor, which owns the
        run's checkpoints, directives and consoles."""
        return self.train.node_rank > 0

    @property
    def store_timeout_s(self) -> int:
        """s torchrun's store waits: its own limit stays behind the supervisor's join timeout
        (``train.rdzv_timeout_s``), which names the mismatch."""
        return max(STORE_TIMEOUT_S, math.ceil(self.train.rdzv_timeout_s) + STORE_TIMEOUT_MARGIN_S)

    def torchrun_args(self) -> list[str]:
        """One host: ``--standalone``. Several: the static rendezvous at node 0's endpoint with
        this node's rank, so that node 0 always holds rank 0 (the rank that talks to node 0's
        supervisor). c10d would rank nodes by host name and pid instead, and restart workers
        by itself when a node rejoins, behind the supervisors' backs: each node's supervisor
        restarts its own torchrun instead, and the group meets again at the endpoint."""
        train = self.train
        if train.nodes == 1:
            return ["--standalone", "--nnodes=1", f"--nproc-per-node={train.ranks}"]
        return [
            f"--nnodes={train.nodes}",
            f"--node-rank={train.node_rank}",
            f"--nproc-per-node={train.ranks}",
            "--rdzv-backend=static",
            f"--rdzv-endpoint={train.rdzv_endpoint}",
            f"--rdzv-id={self.rdzv_id}",
            f"--rdzv-conf=timeout={self.store_timeout_s}",
        ]


def default_trainer_command(
    environ: Mapping[str, str] | None = None, place: Placement | None = None
) -> list[str]:
    """``$MEMTUI_TRAINER_CMD`` split like a shell would, else ``python -m engine.trainer``;
    for several ranks (or nodes) of ``place`` (None: one rank on one host) that module under
    torchrun, which starts one process per rank and tears the group down when one dies (we
    restart it, so torchrun itself never does)."""
    env = os.environ if environ is None else environ
    custom = env.get(TRAINER_CMD_ENV, "").strip()
    if custom:
        return shlex.split(custom)
    if place is None or place.train.world_size == 1:
        return [sys.executable, "-m", "engine.trainer"]
    torchrun = ["-m", "torch.distributed.run", *place.torchrun_args()]
    return [sys.executable, *torchrun, "--max-restarts=0", "--monitor-interval=1", "-m", "engine.trainer"]


def trainer_environment(environ: Mapping[str, str], ranks: int) -> dict[str, str]:
    """The trainer's environment: ours, unbuffered, and for several ranks each rank's share
    of the cores as ``OMP_NUM_THREADS`` (torchrun would set 1 per rank); a user's own values
    are kept. ``OMP_WAIT_POLICY`` is left to the user: PASSIVE keeps a restarted trainer's
    first steps fast on a busy host (a tiny CPU step took 1-2 s instead of 0.04 s at a load
    average of 8 on 2 cores) but halved tiny's CPU throughput on a quiet one (57 and 51
    against 29 and 29 steps/s, ``bench/tiny_speed.py --steps 800``, interleaved)."""
    env = dict(environ, PYTHONUNBUFFERED="1")
    if ranks > 1 and OMP_ENV not in env:
        env[OMP_ENV] = str(threads_per_rank(usable_cores(), ranks))
    return env


# ---------------------------------------------------------------- trainer endings


@dataclass(frozen=True)
class TrainerExit:
    """How one trainer attempt ended, as the restart decision and the run's ending see it."""

    attempt: int
    returncode: int | None
    """Exit status; negative = killed by that signal; None = never started."""
    finished_reason: str | None = None
    """``reason`` of the trainer's trainer_finished event, if it sent one."""
    last_error: str | None = None
    """Message of its last trainer_error event."""
    launch_error: str | None = None
    """Why it could not be started at all."""
    gave_up: str | None = None
    """The restart limit that ended the run after this attempt, in words."""


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"trainer killed by {name}"
    return f"trainer exited with code {returncode}"


PREEMPTED_ENDING = (
    "preempted: the trainer saved and stopped on SIGTERM, unasked; the run ends there "
    "(restart.on_preemption is false; memtui resume goes on from its checkpoint)"
)
"""Why a run ended whose trainer stopped itself with no stop asked of the run: it stops by
itself only on SIGTERM (a preempting host, chaos ``preempt``), and a run that restarts on
preemption never ends this way."""


def ending(outcome: TrainerExit, stop_reason: str | None) -> tuple[RunState, str]:
    """The run's final state and exit_reason after its last trainer attempt."""
    if outcome.launch_error is not None:
        return "failed", outcome.launch_error
    if outcome.returncode is None:
        return "stopped", f"stopped before the trainer started ({stop_reason or 'no reason given'})"
    how = describe_exit(outcome.returncode)
    if stop_reason is not None or outcome.finished_reason == "stopped":
        why = f"on request ({stop_reason})" if stop_reason else PREEMPTED_ENDING
        return "stopped", why if outcome.returncode == 0 else f"{why}; {how}"
    if outcome.returncode == 0:
        if outcome.finished_reason == "completed":
            return "completed", "the trainer reached its target step"
        return "failed", f"{how} without reporting trainer_finished"
    if outcome.returncode > 0 and outcome.last_error:
        how = f"{how}: {outcome.last_error}"
    return "failed", f"{how}; {outcome.gave_up}" if outcome.gave_up else how


# ------------------------------------------------------------------ signalling


def kill_group(pid: int, sig: signal.Signals) -> None:
    """Signal the trainer's process group (it leads its own session), else just it. A
    SIGKILL also reaches descendants in sessions of their own (torchrun's ranks), read
    before the launcher dies; the ranks die with it anyway (PR_SET_PDEATHSIG)."""
    others = descendant_groups(pid) if sig == signal.SIGKILL else []
    for target in (pid, *others):
        try:
            os.killpg(target, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, sig)


def descendant_groups(pid: int) -> list[int]:
    """Process groups led by descendants of ``pid`` other than its own (psutil; [] if gone)."""
    import psutil  # imported when needed: most runs never SIGKILL a trainer

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    groups = set()
    for child in children:
        with contextlib.suppress(psutil.Error, OSError):
            groups.add(os.getpgid(child.pid))
    groups.discard(pid)
    return sorted(groups)


def signal_name(returncode: int) -> str | None:
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return None


def geometry_note(run: RunDir, since: float) -> str | None:
    """The reason an attempt's OOM left in ``memory.json`` after ``since`` (Unix time), if any.

    With several ranks only rank 0 talks to the supervisor: a rank that ran out of memory
    exits with no word to it, but writes why into ``memory.json`` for the next attempt.
    """
    try:
        if run.geometry_file.stat().st_mtime < since:
            return None
        reason = json.loads(run.geometry_file.read_text(encoding="utf-8")).get("reason")
    except (OSError, ValueError, AttributeError):
        return None
    return str(reason) if reason else None
