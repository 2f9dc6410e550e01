"""One supervisor per run: the run directory's lock, held for the supervisor's life.

A second supervisor on a held run leaves at once naming the owner, having touched nothing
of the run; a supervisor removes only the socket it bound; the lock goes when the supervisor
goes (SIGKILL included) and never with its trainer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.run import launch
from engine.run.directory import RunDir, pid_alive
from engine.run.ownership import Ownership, OwnershipRefused, recorded_owner
from engine.run.storage.store import Store
from engine.supervisor.daemon import Supervisor, SupervisorError
from engine.wire.protocol import Stop
from tests.engine.conftest import FAKE_TRAINER, FAKE_TRAINER_CMD
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CHECKOUT = str(Path(__file__).resolve().parents[2])
HOLDER = """
import sys
from pathlib import Path
from engine.run.directory import RunDir
from engine.run.ownership import Ownership

held = Ownership.take(RunDir(Path(sys.argv[1])))
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
held.release()
"""


@pytest.fixture
def holder(run: RunDir) -> Iterator[subprocess.Popen[str]]:
    """Another process that owns ``run`` until the test ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=CHECKOUT,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    yield proc
    proc.communicate(timeout=30)


def entries(run: RunDir) -> dict[str, tuple[int, int, int]]:
    """(inode, mtime ns, size) of the run directory and of everything in it."""
    paths = [run.path, *run.path.iterdir(), *run.logs.iterdir()]
    return {str(p): (s.st_ino, s.st_mtime_ns, s.st_size) for p in paths for s in [p.lstat()]}


def holds(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open."""
    fds = Path(f"/proc/{pid}/fd")
    return any(os.readlink(fd) == str(path) for fd in fds.iterdir() if fd.is_symlink())


async def test_a_second_supervisor_leaves_a_held_run_as_it_was(
    run: RunDir, holder: subprocess.Popen[str]
) -> None:
    Store(run.store).close()  # the run's history, which a second supervisor must not touch
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as served:
        served.bind(str(run.socket))  # the owner's socket
        before = entries(run)
        with pytest.raises(SupervisorError, match=f"already served by supervisor pid {holder.pid}$"):
            await Supervisor(run, FAKE_TRAINER_CMD).serve()
        assert entries(run) == before
    assert int(run.pid_file.read_text()) == recorded_owner(run) == holder.pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/fd")
async def test_the_run_is_locked_while_served_and_never_by_its_trainer(
    run: RunDir, start, fake_env, wait_until
) -> None:
    running = await start()
    trainer = await wait_until(lambda: running.supervisor.attempts.pid, "the trainer")
    assert recorded_owner(run) == int(run.pid_file.read_text()) == os.getpid()
    with pytest.raises(OwnershipRefused, match=f"supervisor pid {os.getpid()}$"):
        Ownership.take(run)  # flock: another open of the file conflicts, even in this process
    assert holds(os.getpid(), run.lock_file) and not holds(trainer, run.lock_file)
    running.supervisor.request_stop("test")
    assert await running.result(60) == 0
    assert recorded_owner(run) is None and not run.pid_file.exists()
    Ownership.take(run).release()  # let go at the end


async def test_a_supervisor_removes_only_the_socket_it_bound(
    run: RunDir, start, fake_env, wait_until
) -> None:
    running = await start()
    await wait_until(lambda: running.supervisor.latest, "the trainer's first step")  # connected
    run.socket.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(run.socket))  # someone else's socket where ours was
        theirs = run.socket.lstat().st_ino
        running.supervisor.request_stop("test")
        assert await running.result(60) == 0
        assert run.socket.is_socket() and run.socket.lstat().st_ino == theirs


async def test_a_removed_socket_is_bound_again_and_the_run_still_obeys(
    run: RunDir, start, connect, fake_env, wait_until
) -> None:
    running = await start()
    await wait_until(lambda: running.supervisor.latest, "the trainer's first step")
    run.socket.unlink()  # `rm engine.sock` while the run trains on: stop and pause said "no supervisor"
    await wait_until(run.socket.is_socket, "the socket bound again")
    client = await connect()
    await client.recv()  # welcome
    ok, _ = await client.answer(Stop(id="stop", reason="after the socket came back"))
    assert ok.kind == "ok"
    assert await running.result(60) == 0
    with Store(run.store, readonly=True) as store:
        restored = [e for e in store.events_since(0) if e.type == "socket_restored"]
    assert len(restored) == 1 and restored[0].severity == "warning"
    assert restored[0].message == "engine.sock was removed: the supervisor listens there again"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/fd")
def test_a_killed_supervisor_leaves_the_run_free_even_with_its_trainer_alive(run: RunDir) -> None:
    env = {"MEMTUI_TRAINER_CMD": f"{sys.executable} {FAKE_TRAINER}", "FAKE_TRAINER_STEPS": "100000"}
    pid = launch.spawn_supervisor(run, extra_env=env)
    trainer = None
    try:
        launch.wait_until_serving(run, pid, timeout=30)
        trainer = wait_for(lambda: trainer_pid(run), timeout=30, what="the trainer to start")
        assert holds(pid, run.lock_file) and not holds(trainer, run.lock_file)
        os.kill(pid, signal.SIGKILL)  # the supervisor alone: its trainer is orphaned
        launch._spawned[pid].wait(30)
        Ownership.take(run).release()  # the kernel let the lock go with the process
    finally:
        for group in (pid, trainer):
            if group is not None and pid_alive(group):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)


def trainer_pid(run: RunDir) -> int | None:
    with Store(run.store, readonly=True) as store:
        return store.read_meta().trainer_pid


SPARE_MARK = "spare.pid"  # in the run dir: the pid of each spare the supervisor started
MARKING_SPARE = f"sh -c 'echo $$ >> {SPARE_MARK}; exec sleep 600' spare"


def losing_supervisor(run: RunDir) -> subprocess.CompletedProcess[str]:
    """``python -m engine supervise RUN`` on a run another process holds, with a spare that
    writes its pid (the spare's cwd is the run dir); it must exit 2."""
    env = {**os.environ, "MEMTUI_STANDBY_CMD": MARKING_SPARE}
    done = subprocess.run(
        [sys.executable, "-m", "engine", "supervise", str(run.path)],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "already served" in done.stdout + done.stderr, done
    return done


def test_a_supervisor_starts_no_spare_for_a_run_a_live_supervisor_names(run: RunDir, holder) -> None:
    losing_supervisor(run)
    assert not (run.path / SPARE_MARK).exists()


def test_a_supervisor_that_loses_the_run_kills_the_spare_it_started(run: RunDir) -> None:
    """The owner has the lock but has not named itself yet (the race of two resumes): the
    loser's head start is already running, and dies with its loss, not minutes later."""
    fd = os.open(run.lock_file, os.O_RDWR | os.O_CREAT)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        losing_supervisor(run)
    finally:
        os.close(fd)
    (spare,) = map(int, (run.path / SPARE_MARK).read_text().split())
    assert not pid_alive(spare)
