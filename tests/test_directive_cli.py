"""Directive commands through the real CLI, the real supervisor and the torch-free fake trainer.

Two live runs, the older one holding the directives: ``memtui approve ID`` and ``reject ID``
find the run that holds ID (not the newest live run); RUN is a positional like every other
command's (``--run`` still read); an operator's rejection exits 0; ``propose --reset``
returns a cut learning rate to the run's default in one directive, beyond the lower-only
bound; ``directives`` shows each change from the value in effect to the new one, and the
audit trail stores the policy's verdicts apart from the operator's decisions.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_harness import memtui, throwaway_home

from engine.run.directory import RunDir
from engine.run.reports.status import offline_status
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FAKE_TRAINER = Path(__file__).resolve().parent / "fakes" / "fake_trainer.py"
ENV = {
    "MEMTUI_TRAINER_CMD": f"{sys.executable} {FAKE_TRAINER}",
    "FAKE_TRAINER_STEPS": "1000000",
    "FAKE_TRAINER_RATE_HZ": "20",
}


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtdc")


def live_run(home: Path, name: str) -> RunDir:
    # never stale: a slow CLI start on a loaded machine must not outlast the 500 steps (25 s)
    never_stale = "policy.max_staleness_steps=1000000000"
    started = memtui(
        home, "run", "--preset", "tiny", "--name", name, "--steps", "1000000", "--set", never_stale,
        "--detach", "--json", env=ENV,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run = RunDir(Path(json.loads(started.stdout)["run_dir"]))
    wait_for(
        lambda: offline_status(run).step > 0, what=f"{name}'s first step", seen=lambda: offline_status(run)
    )
    return run


def propose(home: Path, run: RunDir, *args: str) -> dict[str, Any]:
    """The directive the supervisor answered with (the listing is ordered by latest change:
    an older directive's measured effect may land after this one)."""
    done = memtui(home, "propose", run.run_id, *args, "--json")
    assert done.returncode == 0, done.stderr
    answered: dict[str, Any] = json.loads(done.stdout)
    return view_of(home, run, answered["id"])


def view_of(home: Path, run: RunDir, directive_id: str) -> dict[str, Any]:
    listed = json.loads(memtui(home, "directives", run.run_id, "--json").stdout)
    return next(v for v in listed if v["id"] == directive_id)


def test_directive_commands_find_their_run_take_run_first_and_exit_0_on_what_was_asked(home: Path) -> None:
    older = live_run(home, "holder")
    newer = live_run(home, "newer")  # the newest live run: not where the directives are

    cut = propose(home, older, "--set", "lr_multiplier=0.5", "--rationale", "e2e")
    approved = memtui(home, "approve", cut["id"])  # no RUN: the run that holds the id
    assert approved.returncode == 0, approved.stderr
    assert "approved" in approved.stdout or "applied" in approved.stdout
    applied = wait_for(
        lambda: (v := view_of(home, older, cut["id"]))["state"] == "applied" and v,
        what="the cut applied",
        seen=lambda: view_of(home, older, cut["id"]),
    )
    assert applied["in_effect"] == {"lr_multiplier": 1.0}
    listing = memtui(home, "directives", older.run_id).stdout
    assert "lr × 1→0.5" in listing and "0.5→0.5" not in listing

    unwanted = propose(home, older, "--set", "lr_multiplier=0.4")
    rejected = memtui(home, "reject", unwanted["id"], "--reason", "not now")
    assert rejected.returncode == 0, rejected.stderr  # the rejection the operator asked for
    assert " rejected " in rejected.stdout

    positional = propose(home, older, "--set", "lr_multiplier=0.3")
    answered = memtui(home, "reject", older.run_id, positional["id"], "--reason", "RUN first")
    assert answered.returncode == 0, answered.stderr
    deprecated = propose(home, older, "--set", "lr_multiplier=0.3")
    answered = memtui(home, "reject", deprecated["id"], "--run", older.run_id, "--reason", "old spelling")
    assert answered.returncode == 0, answered.stderr
    unknown = memtui(home, "approve", "d-0000000000")
    assert unknown.returncode == 1 and "no run" in unknown.stderr and "d-0000000000" in unknown.stderr

    back = propose(home, older, "--reset", "lr_multiplier", "--rationale", "undo the cut")
    assert back["requested"] == back["allowed"] == {"lr_multiplier": 1.0}  # beyond the 0.85 bound
    assert back["in_effect"] == {"lr_multiplier": 0.5}
    assert memtui(home, "approve", older.run_id, back["id"]).returncode == 0
    wait_for(
        lambda: view_of(home, older, back["id"])["state"] == "applied",
        what="the way back applied",
        seen=lambda: view_of(home, older, back["id"]),
    )
    assert "lr × 0.5→1" in memtui(home, "directives", older.run_id).stdout

    trail = json.loads(memtui(home, "directives", older.run_id, "--decisions", "--json").stdout)
    rows = {(r["directive_id"], r["verdict"], r["operator"], r["state"]) for r in trail}
    assert (cut["id"], "allow", None, "pending") in rows
    assert (cut["id"], "allow", "approve", "approved") in rows  # no clamp nobody made
    assert (unwanted["id"], "allow", "reject", "rejected") in rows
    for run in (older, newer):
        assert memtui(home, "stop", run.run_id).returncode == 0


def test_no_growth_is_allowed_into_the_micro_batch_that_just_ran_out_of_memory(home: Path) -> None:
    """The supervisor hands the trainer's OOM to the directive queue: growing back to the
    size that failed is refused within memory.retry_after_steps, naming the OOM's step."""
    run = live_run(home, "oomed")
    assert memtui(home, "chaos", run.run_id, "oom").returncode == 0
    wait_for(
        lambda: offline_status(run).micro_batch == 4,
        what="the OOM's smaller micro-batch in the steps",
        seen=lambda: offline_status(run),
    )
    grow = memtui(home, "propose", run.run_id, "--set", "micro_batch_size=8", "--json")
    assert grow.returncode == 2, (grow.stdout, grow.stderr)  # a refused value, as on the command line
    answered = json.loads(grow.stdout)
    assert answered["state"] == "rejected", answered
    assert "out of memory" in json.dumps(answered) or "OOM" in json.dumps(answered)
    assert memtui(home, "stop", run.run_id).returncode == 0
