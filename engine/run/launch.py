"""Starting a run's supervisor so that it outlives the terminal that started it.

``memtui run`` calls ``spawn_supervisor`` then ``wait_until_serving``. The supervisor gets
its own session and process group (``start_new_session``), stdin from /dev/null, its
output appended to ``logs/supervisor.log`` (0600) and the private umask (files it creates
are 0600, directories 0700): a closed terminal, an SSH hang-up or SIGHUP never reaches it.

Only one supervisor serves a run (``engine.run.ownership``): one started while another
holds the run leaves at once. ``wait_until_serving`` therefore trusts a Welcome only from
the supervisor it waits for, and says ``AlreadyServed`` (naming the owner) when its own
left and another answers instead. Torch-free, so ``memtui run`` stays quick.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import engine
from engine.run.directory import PRIVATE_FILE, PRIVATE_UMASK, RunDir, pid_alive
from engine.run.ownership import recorded_owner
from engine.wire import protocol

LOG_TAIL_BYTES = 4000  # of supervisor.log quoted in a start failure
POLL_S = 0.05  # between connection attempts

# Popen objects of supervisors started here, kept so that dropping one neither warns nor
# reaps: the supervisor outlives this process by design (init adopts it when we exit).
_spawned: dict[int, subprocess.Popen[bytes]] = {}


class LaunchError(RuntimeError):
    """The supervisor did not come up; the message carries the tail of its log."""


class AlreadyServed(LaunchError):
    """The supervisor started for ``run`` left because another (``owner``) serves the run:
    the run is served, only not by the process that was started."""

    def __init__(self, run: RunDir, owner: int) -> None:
        super().__init__(f"{run.run_id} already served by pid {owner}")
        self.owner = owner


def supervisor_command(run: RunDir, extra_args: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "engine", "supervise", str(run.path), *extra_args]


def spawn_supervisor(
    run: RunDir, *, extra_env: dict[str, str] | None = None, extra_args: Sequence[str] = ()
) -> int:
    """Start ``python -m engine supervise RUN_DIR [extra_args]`` detached; returns its pid at once."""
    run.ensure_layout()
    env = dict(os.environ)
    env.update(extra_env or {})
    # The child runs the same engine as this process, installed or not.
    source_root = str(Path(engine.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")  # log lines reach supervisor.log as they happen
    log_fd = os.open(run.supervisor_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    with open(os.devnull, "rb") as devnull, open(log_fd, "ab") as log:
        proc = subprocess.Popen(
            supervisor_command(run, extra_args),
            stdin=devnull,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=run.path,
            env=env,
            close_fds=True,
            start_new_session=True,  # own session + process group: no SIGHUP, no terminal
            umask=PRIVATE_UMASK,  # before the interpreter creates anything
        )
    _spawned[proc.pid] = proc
    return proc.pid


def wait_until_serving(run: RunDir, pid: int, timeout: float = 30.0) -> None:
    """Block until the supervisor ``pid`` answers a Hello on ``run.socket`` with a Welcome.

    Raises AlreadyServed if ``pid`` left because another supervisor owns the run and that
    one answers; LaunchError (with the tail of supervisor.log) if ``pid`` died otherwise or
    ``timeout`` seconds passed first. A Welcome that names no pid (a supervisor too old to
    say) is taken as ``pid``'s.
    """
    deadline = time.monotonic() + timeout
    last_problem = "socket not there yet"
    while True:
        answer = _greeting(run)
        if isinstance(answer, protocol.Welcome):
            serving = answer.supervisor_pid
            if serving is None or serving == pid:
                return
            last_problem = f"answered by supervisor pid {serving}"
            if not pid_alive(pid):
                raise AlreadyServed(run, serving)
        else:
            last_problem = answer
            # Gone: a failure, unless the run's lock names another live process, which owns the
            # run and may still be on its way to serving (its Welcome then names it).
            if not pid_alive(pid) and recorded_owner(run) is None:
                raise LaunchError(
                    f"supervisor (pid {pid}) exited before serving {run.socket}\n{log_tail(run)}"
                )
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"supervisor (pid {pid}) not serving {run.socket} after {timeout:.0f} s "
                f"({last_problem})\n{log_tail(run)}"
            )
        time.sleep(POLL_S)


def _greeting(run: RunDir) -> protocol.Welcome | str:
    """The Welcome a Hello on the run's socket is answered with, else what went wrong."""
    hello = protocol.Hello(
        protocol=protocol.PROTOCOL_VERSION,
        role="cli",
        client="memtui launch",
        replay_from=None,
        telemetry=False,
    )
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2.0)  # s: one attempt; the caller's deadline bounds the total
            sock.connect(str(run.socket))
            sock.sendall(protocol.encode(hello))
            line = sock.makefile("rb").readline(protocol.MAX_LINE_BYTES)
    except OSError as err:
        return f"{type(err).__name__}: {err}"
    if not line:
        return "connection closed before a welcome"
    try:
        answer = protocol.decode_server(line)
    except protocol.ProtocolError as err:
        return f"bad answer: {err.reason}"
    if isinstance(answer, protocol.Error):
        raise LaunchError(f"supervisor refused the hello: {answer.reason}")
    return answer if isinstance(answer, protocol.Welcome) else f"expected welcome, got {answer.kind}"


def log_tail(run: RunDir, limit: int = LOG_TAIL_BYTES) -> str:
    """The end of supervisor.log, for error messages."""
    try:
        with open(run.supervisor_log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            text = f.read().decode("utf-8", "replace")
    except OSError as err:
        return f"(no supervisor log: {err.strerror})"
    return f"--- {run.supervisor_log} (tail) ---\n{text.rstrip()}"
