"""A spare trainer's command line, its environment, and the head start: the spare a new
supervisor starts for its own first attempt before it has finished starting itself. Torch-free.

A new supervisor (``memtui run``, ``memtui resume``, the one after a whole-tree kill) spends
about a second importing its own parts, opening the store and listening before it launches
its first trainer, and that trainer then spends seconds importing torch and DeepSpeed. The
two need not wait for each other: once ``python -m engine supervise`` has read the run's
config, and before it imports the rest of itself, it starts the spare that
``engine.supervisor.trainers.standby`` would keep (``head_start``). It warms up at the trainer's
priority (nothing trains yet, so it takes no core from anyone; ``HEAD_START_ENV``), the
standby adopts it, and the first attempt is handed to it as a restart is to a waiting spare.

Where no spare would be kept (``restart.standby = false``, several ranks or nodes, a custom
trainer command without a spare command) there is no head start, and the first trainer
starts cold as before. A supervisor that leaves before it launches a trainer (another one
serves the run, its config is unusable) takes the spare with it: a spare dies with its
parent while it waits (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping

from engine.config.config_file import ConfigError
from engine.config.run_config import RunConfig
from engine.run.directory import RunDir
from engine.run.standby_orders import HEAD_START_ENV, PARENT_ENV, STANDBY_FLAG
from engine.supervisor.trainers.trainer_process import TRAINER_CMD_ENV, trainer_environment

log = logging.getLogger(__name__)

STANDBY_CMD_ENV = "MEMTUI_STANDBY_CMD"  # shlex string: a custom trainer command's spare, if it has one
LOG_NAME = "standby.log"  # in logs/: what spares print before they have an attempt


def default_standby_command(
    environ: Mapping[str, str] | None = None, custom_trainer: bool = False
) -> list[str] | None:
    """The spare trainer's command: ``$MEMTUI_STANDBY_CMD``, else ``python -m engine.trainer
    --standby``; None for a custom trainer command (given to the supervisor, or
    ``$MEMTUI_TRAINER_CMD``) without a spare command of its own."""
    env = os.environ if environ is None else environ
    custom = env.get(STANDBY_CMD_ENV, "").strip()
    if custom:
        return shlex.split(custom)
    if custom_trainer or env.get(TRAINER_CMD_ENV, "").strip():
        return None
    return [sys.executable, "-m", "engine.trainer", STANDBY_FLAG]


def spare_command(config: RunConfig, custom_trainer: bool) -> list[str] | None:
    """The command of the run's spares, or None where the run keeps none: ``restart.standby``
    off, several ranks or nodes (their processes are torchrun's, started after the
    rendezvous: ``engine.supervisor.trainers.standby``), or no spare command."""
    train = config.train
    if not config.restart.standby or train.ranks > 1 or train.nodes > 1:
        return None
    return default_standby_command(custom_trainer=custom_trainer)


def spare_environment() -> dict[str, str]:
    """A spare's environment: what a cold single-rank trainer would get."""
    return trainer_environment(os.environ, 1)


def spare_popen(run: RunDir, command: list[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start ``command RUN_DIR`` as a spare: orders on its stdin, ``ready`` on its stdout, what
    it prints before its orders appended to ``logs/standby.log``, a session of its own (once
    taken, a stop kills what it starts). Raises OSError if it cannot be started."""
    with open(run.path / "logs" / LOG_NAME, "ab") as err:
        return subprocess.Popen(
            [*command, str(run.path)],  # names its run in ps
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=run.path,
            env={**env, PARENT_ENV: str(os.getpid())},
            start_new_session=True,
        )


def head_start(run: RunDir) -> subprocess.Popen[bytes] | None:
    """Start the spare the run's first attempt will be handed to, at once, from the calling
    thread (the supervisor's main thread, before it lowers its priority: the spare dies with
    the thread that forked it while it waits). None where the run keeps no spare, its
    config cannot be read (the supervisor says why, and ends the run), or it could not be
    started (the first trainer then starts cold)."""
    try:
        command = spare_command(run.read_config(), custom_trainer=False)
    except ConfigError:
        return None
    if command is None:
        return None
    try:
        run.ensure_layout()
        return spare_popen(run, command, spare_environment() | {HEAD_START_ENV: "1"})
    except OSError as err:
        log.warning("no head start for the first trainer (%s): %s", shlex.join(command), err)
        return None
