"""``memtui endure`` end to end: a real engine on ``tiny`` with a ``[chaos]`` schedule and a
whole-tree kill, to its end; then its report, checked against direct counts in the store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.run.directory import list_runs
from engine.run.store import Store

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e]

STEPS = 400
CONFIG = """name = "endure"
[checkpoint]
every_steps = 25
keep = 3
[restart]
max_restarts = 20
backoff_initial_s = 0.1
backoff_max_s = 0.5
[chaos]
kinds = { kill = 1 }
"""


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mte")


def test_endure_survives_chaos_and_a_whole_tree_kill(home: Path, tmp_path: Path) -> None:
    config = home / "endure.toml"
    config.write_text(CONFIG)
    md = tmp_path / "report.md"
    args = ("endure", str(config), "--steps", str(STEPS), "--chaos-every", "100", "--seed", "5")
    done = memtui(home, *args, "--kills", "1", "--report", str(md), timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "whole-tree kill 1/1" in done.stderr and md.read_text() == done.stdout
    run_id = re.search(r"endurance run (\S+):", done.stderr).group(1)  # type: ignore[union-attr]
    answer = memtui(home, "report", run_id, "--json")
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert report["state"] == "completed" and report["steps_sustained"] == STEPS
    assert report["fatal_ooms"] == 0 and report["samples_per_step_constant"]
    assert report["whole_tree_resumes"] == 1 and report["resume_success"] == 1.0
    for kind, tally in report["chaos"].items():  # every injection recovered
        assert tally["recovered"] == tally["injected"] and tally["failed"] == 0, kind
    (run,) = [r for r in list_runs(home) if r.run_id == run_id]
    with Store(run.store, readonly=True) as store:
        types = [e.type for e in store.events_since(0)]
        samples = list(store.iter_steps())
        resumed = json.loads(run.config_file.read_text())["config"]["restart"]["on_preemption"]
    assert resumed is True
    assert report["restarts"] == types.count("trainer_restarted")
    assert report["chaos"].get("kill", {}).get("injected", 0) == types.count("chaos_injected")
    assert report["step_samples"] == len(samples) and max(s.step for s in samples) == STEPS
    assert report["resumes"] == types.count("trainer_launched") - 1
