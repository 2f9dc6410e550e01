"""The detached supervisor: own session, survives SIGHUP, serves, stops on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.run import launch
from engine.run.directory import RunDir, pid_alive
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store
from tests.file_modes import loose_modes
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

FAKE_TRAINER = Path(__file__).resolve().parents[1] / "fakes" / "fake_trainer.py"


def _kill_group(pid: int | None) -> None:
    """SIGKILL the process group ``pid`` leads (the supervisor and the trainer lead their own)."""
    if pid is None or not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    proc = launch._spawned.get(pid)
    if proc is not None:
        proc.wait(timeout)
        return
    wait_for(lambda: not pid_alive(pid), timeout=timeout, what=f"pid {pid} to exit")


@pytest.fixture
def spawned(run: RunDir) -> Iterator[list[int]]:
    """Pids to kill (with their trainers) whatever the test did."""
    pids: list[int] = []
    yield pids
    with contextlib.suppress(Exception), Store(run.store, readonly=True) as store:
        _kill_group(store.read_meta().trainer_pid)
    for pid in pids:
        _kill_group(pid)
        with contextlib.suppress(Exception):
            _wait_gone(pid, 5)


def _env(**fake: object) -> dict[str, str]:
    env = {"MEMTUI_TRAINER_CMD": f"{sys.executable} {FAKE_TRAINER}", "FAKE_TRAINER_STEPS": "100000"}
    env.update({f"FAKE_TRAINER_{k.upper()}": str(v) for k, v in fake.items()})
    return env


@pytest.mark.slow
def test_detached_supervisor_survives_sighup_and_stops_on_sigterm(run: RunDir, spawned: list[int]) -> None:
    pid = launch.spawn_supervisor(run, extra_env=_env(rate_hz=50))
    spawned.append(pid)
    launch.wait_until_serving(run, pid, timeout=30)
    assert os.getsid(pid) != os.getsid(0)  # its own session: no terminal, no SIGHUP
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    assert run.supervisor_pid() == pid

    os.kill(pid, signal.SIGHUP)
    wait_for(
        lambda: "SIGHUP ignored" in run.supervisor_log.read_text(),
        timeout=30,
        what="the supervisor to handle SIGHUP",
    )
    assert pid_alive(pid)
    launch.wait_until_serving(run, pid, timeout=30)
    assert offline_status(run).state in ("starting", "running")

    os.kill(pid, signal.SIGTERM)
    _wait_gone(pid)
    status = offline_status(run)
    assert status.state == "stopped" and "SIGTERM" in (status.exit_reason or "")
    assert not run.socket.exists() and not run.pid_file.exists()
    assert "run stopped" in run.supervisor_log.read_text()


@pytest.mark.slow
def test_every_file_and_directory_of_a_run_is_private(home: Path, spawned: list[int]) -> None:
    """Files 0600 and directories 0700 under a typical login umask (022), so that a mistaken
    chmod of the home exposes no telemetry, log or checkpoint."""
    old = os.umask(0o022)
    try:
        run = RunDir.create(build_run_config(steps=100), home=home)  # as the CLI does
        pid = launch.spawn_supervisor(run, extra_env=_env(rate_hz=200, steps=30))
    finally:
        os.umask(old)
    spawned.append(pid)
    launch.wait_until_serving(run, pid, timeout=30)
    wait_for(lambda: offline_status(run).state == "completed", timeout=60, what="the run to complete")
    _wait_gone(pid)
    assert offline_status(run).step == 30 and run.trainer_log(1).is_file()
    assert loose_modes(run.path) == []


@pytest.mark.slow
def test_wait_until_serving_reports_a_supervisor_that_died(home: Path, spawned: list[int]) -> None:
    bogus = RunDir(home / "runs" / "nothing-here")  # no run.json: the supervisor refuses
    pid = launch.spawn_supervisor(bogus)
    spawned.append(pid)
    with pytest.raises(launch.LaunchError, match="exited before serving") as err:
        launch.wait_until_serving(bogus, pid, timeout=20)
    assert "not a run directory" in str(err.value)


def test_wait_until_serving_times_out(run: RunDir) -> None:
    with pytest.raises(launch.LaunchError, match="not serving"):
        launch.wait_until_serving(run, os.getpid(), timeout=0.3)


@pytest.mark.slow
def test_second_supervisor_on_a_served_run_is_refused(run: RunDir, spawned: list[int]) -> None:
    pid = launch.spawn_supervisor(run, extra_env=_env())
    spawned.append(pid)
    launch.wait_until_serving(run, pid, timeout=20)
    second = subprocess.run(
        [sys.executable, "-m", "engine", "supervise", str(run.path)],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, **_env()},
    )
    assert second.returncode == 2 and f"already served by supervisor pid {pid}" in second.stdout
    launch.wait_until_serving(run, pid, timeout=5)  # the first one is untouched


RACERS = 8  # supervisors started at once on one run


@pytest.mark.slow
def test_supervisors_started_at_once_on_a_stopped_run_leave_one_serving(
    run: RunDir, spawned: list[int], tmp_path: Path
) -> None:
    """What several ``memtui resume`` at once do, without their checks first: one supervisor
    takes the run, the others leave at once naming it, and each caller learns which."""
    first = launch.spawn_supervisor(run, extra_env=_env(rate_hz=50))
    spawned.append(first)
    launch.wait_until_serving(run, first, timeout=30)
    wait_for(lambda: offline_status(run).step > 0, what="the first step")
    os.kill(first, signal.SIGTERM)
    _wait_gone(first)
    assert offline_status(run).state == "stopped"

    gate = tmp_path / "gate"  # the resumed trainer waits for it: the run outlasts the race
    pids = [launch.spawn_supervisor(run, extra_env=_env(steps=40, gate=gate)) for _ in range(RACERS)]
    spawned.extend(pids)
    with ThreadPoolExecutor(RACERS) as pool:
        waits = [pool.submit(launch.wait_until_serving, run, pid, 60) for pid in pids]
    outcomes = [w.exception() for w in waits]
    owner = run.supervisor_pid()
    assert owner in pids and outcomes[pids.index(owner)] is None, outcomes
    others = [o for pid, o in zip(pids, outcomes, strict=True) if pid != owner]
    assert all(isinstance(o, launch.AlreadyServed) and o.owner == owner for o in others), outcomes
    assert [launch._spawned[pid].wait(30) for pid in pids if pid != owner] == [2] * (RACERS - 1)
    log = run.supervisor_log.read_text()
    assert log.count(f"already served by supervisor pid {owner}\n") == RACERS - 1, log
    assert "Traceback" not in log, log
    launch.wait_until_serving(run, owner, timeout=5)  # its socket is still there, and its own

    gate.touch()
    wait_for(lambda: offline_status(run).state == "completed", timeout=60, what="the run to complete")
    _wait_gone(owner)
    assert offline_status(run).step == 40 and not run.socket.exists()


@pytest.mark.slow
def test_engine_cli_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "engine", "--help"], capture_output=True, text=True, timeout=20
    )
    assert out.returncode == 0 and "supervise" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "engine", "supervise", "--help"], capture_output=True, text=True, timeout=20
    )
    assert out.returncode == 0 and "RUN_DIR" in out.stdout and "MEMTUI_TRAINER_CMD" in out.stdout
    out = subprocess.run([sys.executable, "-m", "engine"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 2


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the nice value is a thread's on Linux only")
def test_the_supervisor_runs_below_the_trainer_it_starts(run: RunDir, spawned: list[int]) -> None:
    import psutil

    from engine.cpu_share import SUPERVISOR_NICE

    pid = launch.spawn_supervisor(run, extra_env=_env(rate_hz=50))
    spawned.append(pid)
    launch.wait_until_serving(run, pid, timeout=30)

    def trainer_pid() -> int | None:
        with Store(run.store, readonly=True) as store:
            return store.read_meta().trainer_pid

    wait_for(lambda: trainer_pid() is not None, timeout=30, what="the trainer to start")
    ours = os.nice(0)
    assert psutil.Process(pid).nice() == min(19, ours + SUPERVISOR_NICE)
    assert psutil.Process(trainer_pid()).nice() == ours  # the launcher thread kept the user's priority
