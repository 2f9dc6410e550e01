"""``memtui endure`` end to end: a real engine on ``tiny`` with a ``[chaos]`` schedule of every
kind and a whole-tree kill, to its end; then its report, checked against direct counts in the
store: 0 fatal, every injection recovered, every resume good, samples per step constant."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.chaos.config import ChaosConfig, default_kinds
from engine.run.directory import list_runs
from engine.run.storage.store import Store
from engine.supervisor.chaos.schedule import schedule

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e]

STEPS = 1000
EVERY = 50  # mean steps between injections: one deck of every kind in ~600 steps
SEED = 5
CONFIG = """name = "endure"
[checkpoint]
every_steps = 25
keep = 3
[restart]
max_restarts = 20
backoff_initial_s = 0.1
backoff_max_s = 0.5
"""  # no [chaos] kinds: endure attacks with every kind, weight 1


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mte")


def test_endure_survives_chaos_and_a_whole_tree_kill(home: Path, tmp_path: Path) -> None:
    config = home / "endure.toml"
    config.write_text(CONFIG)
    md = tmp_path / "report.md"
    first_deck = list(
        islice(
            schedule(ChaosConfig(kinds=default_kinds(), every_steps=EVERY, seed=SEED)),
            len(default_kinds()),
        )
    )  # type: ignore[arg-type]
    corrupt = next(s.step for s in first_deck if s.kind == "corrupt_checkpoint")
    assert corrupt > 25 and first_deck[-1].step < STEPS // 2  # a checkpoint to corrupt; time to recover
    args = ("endure", str(config), "--steps", str(STEPS), "--chaos-every", str(EVERY), "--seed", str(SEED))
    done = memtui(home, *args, "--kills", "1", "--report", str(md), timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "whole-tree kill 1/1" in done.stderr and md.read_text() == done.stdout
    run_id = re.search(r"endurance run (\S+):", done.stderr).group(1)  # type: ignore[union-attr]
    answer = memtui(home, "report", run_id, "--json")
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert report["state"] == "completed" and report["steps_sustained"] == STEPS
    assert report["fatal_ooms"] == 0 and report["samples_per_step_constant"]
    assert report["whole_tree_resumes"] == 1 and report["resume_success"] == 1.0
    assert set(report["chaos"]) == set(default_kinds())  # every kind at least once
    for kind, tally in report["chaos"].items():  # every injection recovered
        assert tally["injected"] >= 1 and tally["recovered"] == tally["injected"] and tally["failed"] == 0, (
            kind
        )
    (run,) = [r for r in list_runs(home) if r.run_id == run_id]
    with Store(run.store, readonly=True) as store:
        events = store.events_since(0)
        types = [e.type for e in events]
        samples = list(store.iter_steps())
        resumed = json.loads(run.config_file.read_text())["config"]["restart"]["on_preemption"]
    assert resumed is True
    assert report["restarts"] == types.count("trainer_restarted")
    injected = Counter(e.data["kind"] for e in events if e.type == "chaos_injected")
    recovered = {e.data["chaos_id"]: e.data for e in events if e.type == "chaos_recovered"}
    assert {k: t["injected"] for k, t in report["chaos"].items()} == injected
    assert len(recovered) == sum(injected.values()) and all(v["recovered"] for v in recovered.values())
    assert report["step_samples"] == len(samples) and max(s.step for s in samples) == STEPS
    assert report["resumes"] == types.count("trainer_launched") - 1
