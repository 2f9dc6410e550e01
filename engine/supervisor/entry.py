"""The supervisor's process: ``python -m engine supervise RUN_DIR`` logs to stdout (which
``memtui run`` points at ``logs/supervisor.log``), ignores SIGHUP, and serves the run to
its end. Torch-free."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from engine.run.directory import RunDir
from engine.run.ownership import recorded_owner
from engine.supervisor.log_output import log_to
from engine.supervisor.trainers.spare_launch import head_start
from engine.supervisor.trainers.trainer_launcher import lower_supervisor_priority
from engine.supervisor.trainers.trainer_process import kill_group

log = logging.getLogger(__name__)


def main(run_dir: Path, *, stop_grace_s: float | None = None, fresh_start: bool = False) -> int:
    """``python -m engine supervise RUN_DIR``: log to stdout (supervisor.log), serve, exit."""
    log_to(sys.stdout)  # supervisor.log; a line it refuses (a full disk) is counted, never fatal
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the loop's handler takes over
    run = RunDir(Path(run_dir).resolve())
    # The first trainer's imports go on beside the supervisor's own; not for a run another
    # live supervisor names as its own (a concurrent resume that will lose the run).
    spare = head_start(run) if recorded_owner(run) is None else None
    lower_supervisor_priority()  # below the trainers it forks (see trainer_launcher)
    # Imported after the head start: the rest of the supervisor (about 0.3 s of imports) is
    # no longer in front of the first trainer's start.
    from engine.supervisor.daemon import Supervisor, SupervisorError

    supervisor = Supervisor(run, stop_grace_s=stop_grace_s, fresh_start=fresh_start, head_start=spare)
    try:
        return asyncio.run(supervisor.serve(handle_signals=True))
    except SupervisorError as err:
        log.error("%s", err)
        if spare is not None and spare.poll() is None:  # lost the run: its spare goes with it
            kill_group(spare.pid, signal.SIGKILL)
            spare.wait()
        return 2
