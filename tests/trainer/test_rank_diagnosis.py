"""Two ranks (torchrun, gloo, real DeepSpeed on the CPU) through the real supervisor:

- ``slow_steps`` aimed at rank 1: each rank's own step time rides in the rank reports, rank 1's
  well above rank 0's, and the straggler alert names rank 1;
- rank 1 stopped (SIGSTOP): the heartbeat alert collects the stacks of both ranks (rank 0
  waiting in the training code for rank 1, rank 1 continued for its dump and stopped again),
  one file per rank, where each is in ``stacks_collected``; SIGCONT and the run goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest
from test_ranks import TWO_RANKS, events, logs, supervise, wait_for_event, wait_for_step
from trainer_harness import REPO_ROOT, make_run, wait_while_alive

from engine.domain import Event
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.supervisor.hangs.stack_collection import is_stopped
from engine.supervisor.trainers.rank_processes import rank_processes

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e]


def two_ranks(**raw: object) -> RunDir:
    train = {**TWO_RANKS, "rank_report_every": 2}
    return make_run(
        {"name": "diag", "steps": 100_000, "checkpoint": {"every_steps": 0}, "train": train, **raw}
    )


MEMTUI = [sys.executable, "-c", "import sys; from memtui.cli.main import main; sys.exit(main())"]


def memtui(*argv: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, as the operator types it."""
    done = subprocess.run([*MEMTUI, *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the supervisor stops the run
        proc.wait(timeout=120)


def test_slow_steps_on_one_rank_make_the_straggler_alert_name_it() -> None:
    run = two_ranks(alerts={"straggler_slower": 0.5})  # named after 3 slow reports in a row
    proc = supervise(run)
    try:
        wait_for_step(run, proc, 4)
        slow = ["slow_steps", "--steps", "40", "--delay-s", "0.3", "--jitter", "0", "--rank", "1"]
        memtui("chaos", str(run.path), *slow)
        # rank 1's alert; on a loaded machine rank 0 may also be slower for a while and be named
        # (it was, in CI): that alert is as true as this one and is not what is asserted here
        alert = first(run, proc, lambda e: e.type == "alert" and e.data["rule"] == "straggler.1")
        assert alert.data["rank"] == 1, logs(run, proc)
        assert "rank 1 is a straggler" in (alert.message or "")
        with Store(run.store, readonly=True) as store:
            reports = [s.ranks for s in store.steps() if s.ranks and s.step <= alert.data["step"]]
        last = reports[-1]
        assert last[1].step_s is not None and last[0].step_s is not None
        assert last[1].step_s > last[0].step_s + 0.2  # rank 1 slept 0.3 s of its own; rank 0 waited
        # ...and rank 0's wait for it is in its collective-to-end time, not its own
        assert last[0].comm_s is not None and last[1].comm_s is not None
        assert last[0].comm_s > last[1].comm_s + 0.2
        assert all(r.data_wait_s is not None for r in last)
        applied = next(e for e in events(run) if e.type == "chaos_applied")
        assert "on rank 1" in applied.data["detail"]
    finally:
        stop(proc)


def test_a_stopped_rank_has_the_stacks_of_both_ranks_collected_and_named() -> None:
    run = two_ranks(alerts={"no_step_s": 3.0})  # hang_s derived: no kill for 600 s
    proc = supervise(run)
    rank1 = None
    try:
        wait_for_step(run, proc, 4)
        with Store(run.store, readonly=True) as store:
            launcher = store.read_meta().trainer_pid
        assert launcher is not None
        rank1 = rank_processes(launcher)["rank 1"]
        os.kill(rank1, signal.SIGSTOP)
        collected = wait_for_event(run, proc, "stacks_collected")
        data = collected.data
        assert data["rule"] == "heartbeat" and data["stopped"] == [1], logs(run, proc)
        assert data["silent"] == []
        assert set(data["files"]) == {"0", "1"}
        for rank in ("0", "1"):
            dump = (run.path / data["files"][rank]).read_text()
            assert "most recent call first" in dump and "engine/trainer/" in dump
            assert data["where"][rank].startswith("engine/trainer/"), data["where"]
        wait_while_alive(proc, lambda: is_stopped(rank1), what="rank 1 stopped again, as it was found")
        assert not any(e.type == "trainer_hung" for e in events(run))  # a collection kills nothing
        listed = memtui("logs", str(run.path), "--trainer", "-n", "0")
        assert data["files"]["1"] in listed.stderr and data["files"]["0"] in listed.stderr
        os.kill(rank1, signal.SIGCONT)
        wait_for_step(run, proc, collected_step(run) + 3)  # both ranks go on
    finally:
        if rank1 is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank1, signal.SIGCONT)  # a stopped rank would outlive the test
        stop(proc)


def collected_step(run: RunDir) -> int:
    with Store(run.store, readonly=True) as store:
        latest = store.latest_step()
    return latest.step if latest else 0


def first(run: RunDir, proc: subprocess.Popen[str], match: Callable[[Event], bool]) -> Event:
    """The first stored event ``match`` accepts, once there is one."""
    seen = lambda: logs(run, proc)  # noqa: E731
    wait_while_alive(proc, lambda: any(map(match, events(run))), what="the event", seen=seen)
    return next(e for e in events(run) if match(e))
