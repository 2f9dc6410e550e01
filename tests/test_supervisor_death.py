"""A supervisor that dies alone leaves no hole: its trainer finishes the step, saves, spools
what nobody heard, and the next supervisor stores it before it serves anyone.

Real DeepSpeed (the tiny preset), the real CLI: three times the supervisor alone is
SIGKILLed, the trainer left to save and exit, and ``memtui resume`` brings the run back.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.run.directory import RunDir, pid_alive
from engine.run.report_spool import spools
from engine.run.reports.endurance_report import endurance_report
from engine.run.storage.store import Store
from tests.waiting import wait_for

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtsd")


def stored_steps(run: RunDir) -> list[tuple[int, int]]:
    with Store(run.store, readonly=True) as store:
        return [(s.attempt, s.step) for s in store.steps()]


def events(run: RunDir, type_: str) -> list[dict]:
    with Store(run.store, readonly=True) as store:
        return [e.data for e in store.events_since(0) if e.type == type_]


def stepping_trainer(run: RunDir, after: int) -> tuple[int, int] | None:
    """(attempt, pid) of the current trainer once an attempt after ``after`` stored a step."""
    with Store(run.store, readonly=True) as store:
        meta = store.read_meta()
    stepped = meta.attempt > after and any(a == meta.attempt for a, _ in stored_steps(run))
    return (meta.attempt, meta.trainer_pid) if stepped and meta.trainer_pid else None


def test_three_supervisor_deaths_leave_every_step_stored_once(home: Path) -> None:
    config = home / "alone.toml"
    config.write_text('name = "alone"\nsteps = 100000\n[checkpoint]\nevery_steps = 1000\n')
    done = memtui(home, "run", str(config), "--detach", "--json")
    assert done.returncode == 0, done.stderr
    run = RunDir(Path(json.loads(done.stdout)["run_dir"]))

    attempt = 0
    for _ in range(3):
        attempt, trainer = wait_for(
            lambda a=attempt: stepping_trainer(run, a),
            timeout=300,
            what=f"an attempt after {attempt} stepping",
        )
        supervisor = run.supervisor_pid()
        assert supervisor is not None
        os.kill(supervisor, signal.SIGKILL)  # the supervisor alone: its trainer goes on
        wait_for(lambda t=trainer: not pid_alive(t), timeout=120, what="the trainer's save and exit")
        assert spools(run), "the trainer spooled what its dead supervisor did not hear"
        resumed = memtui(home, "resume", run.run_id, "--detach", "--json")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert not spools(run)  # taken in before the supervisor served the resume

    wait_for(lambda: stepping_trainer(run, attempt), timeout=300, what="the last resume stepping")
    stopped = memtui(home, "stop", run.run_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr

    steps = [s for _, s in stored_steps(run)]
    assert steps == list(range(1, len(steps) + 1)), "every step stored once, in order, no hole"
    resumed_at = events(run, "trainer_resumed")
    assert len(resumed_at) >= 3 and {r["steps_lost"] for r in resumed_at} == {0}  # from each final save
    assert len(events(run, "reports_recovered")) == 3
    with Store(run.store, readonly=True) as store:
        report = endurance_report(run, store)
    assert report.whole_tree_resumes == 0  # the trainers outlived their supervisors
