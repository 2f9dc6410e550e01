"""The standby trainer end to end, with the real CLI and the real supervisor.

- Real DeepSpeed (the tiny preset): after a SIGKILL of the trainer the waiting spare becomes
  the next attempt (same pid) and goes on from the newest verified checkpoint.
- The fake trainer and its spare: the supervisor's and the trainer's process groups are
  SIGKILLed as ``memtui endure`` does (a host reboot), the waiting spare dies with its
  supervisor (``PR_SET_PDEATHSIG``), and ``memtui resume`` starts its first trainer cold.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_harness import memtui, throwaway_home

from engine.checkpoints.store import newest_verified_step
from engine.run.directory import RunDir, pid_alive
from engine.run.standby_orders import STANDBY_FLAG
from engine.run.storage.store import Store
from engine.supervisor.trainers.spare_launch import STANDBY_CMD_ENV
from engine.supervisor.trainers.trainer_process import TRAINER_CMD_ENV
from memtui.cli.runs.endurance_driver import kill_tree, look
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

FAKE_TRAINER = Path(__file__).resolve().parent / "fakes" / "fake_trainer.py"
ENV = {
    TRAINER_CMD_ENV: f"{sys.executable} {FAKE_TRAINER}",
    STANDBY_CMD_ENV: f"{sys.executable} {FAKE_TRAINER} {STANDBY_FLAG}",
    "FAKE_TRAINER_STEPS": "100000",
    "FAKE_TRAINER_RATE_HZ": "50",
}


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtsb")


def events(run: RunDir, type_: str) -> list[dict[str, Any]]:
    with Store(run.store, readonly=True) as store:
        return [e.data for e in store.events_since(0) if e.type == type_]


def stepped(run: RunDir, attempt: int) -> bool:
    with Store(run.store, readonly=True) as store:
        latest = store.latest_step()
    return latest is not None and latest.attempt == attempt


def test_a_whole_tree_kill_leaves_no_spare_and_the_new_supervisor_gives_its_head_start(home: Path) -> None:
    options = ("--preset", "tiny", "--steps", "100000", "--set", "restart.standby_after_s=0")
    started = memtui(home, "run", *options, "--detach", "--json", env=ENV)
    assert started.returncode == 0, started.stderr
    run = RunDir(Path(json.loads(started.stdout)["run_dir"]))
    spare = wait_for(lambda: events(run, "standby_ready"), what="a spare ready")[0]["pid"]
    first = next(e for e in events(run, "trainer_launched") if e["attempt"] == 1)
    assert first["head_start"] is True and first["pid"] != spare  # begun with its supervisor

    kill_tree(run, look(run))
    wait_for(lambda: not pid_alive(spare), what=f"the spare {spare} gone with its supervisor")

    resumed = memtui(home, "resume", run.run_id, "--detach", "--json", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    wait_for(lambda: stepped(run, 2), what="a step of attempt 2")
    second = next(e for e in events(run, "trainer_launched") if e["attempt"] == 2)
    assert second["standby"] is False and second["pid"] != spare  # nothing warm survived
    assert second["head_start"] is True  # the new supervisor's own, started before its imports
    assert memtui(home, "stop", run.run_id).returncode == 0


def test_no_head_start_without_the_standby(home: Path) -> None:
    options = ("--preset", "tiny", "--steps", "100000", "--set", "restart.standby=false")
    started = memtui(home, "run", *options, "--detach", "--json", env=ENV)
    assert started.returncode == 0, started.stderr
    run = RunDir(Path(json.loads(started.stdout)["run_dir"]))
    wait_for(lambda: stepped(run, 1), what="a step of attempt 1")
    first = next(e for e in events(run, "trainer_launched") if e["attempt"] == 1)
    assert first["head_start"] is False and first["standby"] is False
    assert memtui(home, "stop", run.run_id).returncode == 0


@pytest.mark.deepspeed
def test_the_spare_takes_over_a_killed_deepspeed_trainer_from_its_checkpoint(home: Path) -> None:
    config = home / "warm.toml"
    config.write_text(
        'name = "warm"\nsteps = 100000\n[checkpoint]\nevery_steps = 5\n'
        "[restart]\nbackoff_initial_s = 0.1\nstandby = true\nstandby_after_s = 0\n"
    )
    started = memtui(home, "run", str(config), "--detach", "--json")
    assert started.returncode == 0, started.stderr
    run = RunDir(Path(json.loads(started.stdout)["run_dir"]))
    spare = wait_for(lambda: events(run, "standby_ready"), what="a spare ready", timeout=300)[0]["pid"]
    saved = wait_for(lambda: newest_verified_step(run.checkpoints), what="a verified checkpoint", timeout=300)
    with Store(run.store, readonly=True) as store:
        trainer = store.read_meta().trainer_pid
    assert trainer is not None and trainer != spare
    os.killpg(trainer, signal.SIGKILL)

    resumed = wait_for(lambda: events(run, "trainer_resumed"), what="attempt 2 resumed", timeout=300)[0]
    second = next(e for e in events(run, "trainer_launched") if e["attempt"] == 2)
    assert second["pid"] == spare and second["standby"] is True
    assert resumed["attempt"] == 2 and resumed["resume_step"] >= saved  # from the checkpoint, not step 0
    wait_for(lambda: stepped(run, 2), what="a step of attempt 2", timeout=300)
    assert memtui(home, "stop", run.run_id).returncode == 0
