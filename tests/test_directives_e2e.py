"""End to end: directives on a real run (supervisor + DeepSpeed trainer) through the CLI.

The rule planner proposes a larger micro-batch once memory headroom has been steady; an
operator approves it with ``memtui approve``; an operator proposes a lower learning rate
with ``memtui propose`` and approves it too. The trainer's telemetry shows the new values
from the step each was applied at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.run.directory import list_runs
from engine.run.storage.store import Store
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.deepspeed, pytest.mark.timeout(240)]

CONFIG = """
steps = 5000
[train]
micro_batch = 4
global_batch = 16
warmup_steps = 0
precision = "fp32"
[memory]
max_micro_batch = 16
adaptive = false  # the controller would grow it first: leave that to the planner here
[policy]
planner = "rules"
approval = "manual"
max_staleness_steps = 100000  # each CLI round trip takes seconds on a loaded machine: 500 steps
"""


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtd")


def directives(home: Path, run_id: str) -> list[dict]:
    done = memtui(home, "directives", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def latest_step(store_path: Path) -> int:
    """The newest step in the store (0 before the first)."""
    with Store(store_path, readonly=True) as store:
        sample = store.latest_step()
    return sample.step if sample is not None else 0


def applied_events(store_path: Path) -> list[dict]:
    with Store(store_path, readonly=True) as store:
        return [e.data for e in store.events_since(0) if e.type == "directive_applied"]


def test_planner_and_operator_directives_reach_the_trainer_via_the_cli(home: Path) -> None:
    config = home / "run.toml"
    config.write_text(CONFIG)
    started = memtui(home, "run", str(config), "--detach", "--json")
    assert started.returncode == 0, started.stderr
    run = list_runs(home)[0]

    # The rule planner: steady headroom for 50 steps -> micro_batch_size 8, pending.
    pending = wait_for(
        lambda: [d for d in directives(home, run.run_id) if d["state"] == "pending"],
        timeout=120,
        what="a planner proposal",
    )
    assert pending[0]["source"] == "rules" and pending[0]["requested"] == {"micro_batch_size": 8}
    approved = memtui(home, "approve", pending[0]["id"], "--run", run.run_id)
    assert approved.returncode == 0, approved.stderr

    # The operator: a lower learning rate, proposed and approved from the shell.
    proposed = memtui(home, "propose", run.run_id, "--set", "lr_multiplier=0.5", "--rationale", "e2e")
    assert proposed.returncode == 0, proposed.stderr
    mine = [d for d in directives(home, run.run_id) if d["source"] == "operator"][0]
    assert mine["state"] == "pending" and mine["allowed"] == {"lr_multiplier": 0.5}
    assert memtui(home, "approve", mine["id"], "--run", run.run_id).returncode == 0
    hostile = memtui(home, "propose", run.run_id, "--set", "lr_multiplier=NaN")
    assert hostile.returncode != 0 and "lr_multiplier" in hostile.stderr

    events = wait_for(
        lambda: len(applied := applied_events(run.store)) >= 2 and applied,
        timeout=60,
        what="both directives applied",
        seen=lambda: applied_events(run.store),
    )
    by_field = {next(iter(e["applied"])): e for e in events if e["applied"]}
    lr_step, mb_step = by_field["lr_multiplier"]["step"], by_field["micro_batch_size"]["step"]
    # Steps after both boundaries reach the store (it flushes every 0.5 s): the ones compared below.
    last_applied = max(lr_step, mb_step)
    wait_for(
        lambda: latest_step(run.store) >= last_applied + 3,
        timeout=60,
        what=f"stored steps past step {last_applied + 1}",
        seen=lambda: latest_step(run.store),
    )
    assert memtui(home, "stop", run.run_id).returncode == 0

    with Store(run.store, readonly=True) as store:
        lrs = {s.step: s.lr for s in store.steps()}
        micro = {s.step: s.micro_batch for s in store.steps()}
    # sample.step N reports the step with 0-based index N-1, the one the boundary preceded
    before, after = lrs[lr_step], lrs[lr_step + 1]
    assert after / before == pytest.approx(0.5, rel=0.01)
    assert all(lrs[s] < 0.51 * lrs[lr_step] for s in lrs if s > lr_step)
    assert micro[mb_step] == 4 and all(micro[s] == 8 for s in micro if s > mb_step)
    final = {d["id"]: d for d in directives(home, run.run_id)}
    assert final[mine["id"]]["state"] == "applied"

    # Every verdict is in the store's decisions table, read back through the CLI.
    listed = memtui(home, "directives", run.run_id, "--decisions", "--json")
    assert listed.returncode == 0, listed.stderr
    verdicts = json.loads(listed.stdout)
    for directive_id in (pending[0]["id"], mine["id"]):
        states = [v["state"] for v in verdicts if v["directive_id"] == directive_id]
        assert states[:2] == ["pending", "approved"]
