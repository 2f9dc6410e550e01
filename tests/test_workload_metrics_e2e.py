"""End to end: the guide's metric example (docs/your-model.md, examples/spiral.toml) through
the real CLI, supervisor and DeepSpeed trainer on the CPU: the workload's accuracy is stored
with every step, and ``status --json``, ``export`` and ``report`` give it back."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.run.directory import list_runs
from engine.run.storage.store import Store
from tests.waiting import CLI_POLL_S, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.deepspeed]

STEPS = 40


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtw")


def status(home: Path, run_id: str) -> dict:  # type: ignore[type-arg]
    done = memtui(home, "status", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_example_workloads_accuracy_is_stored_per_step_and_exported(home: Path) -> None:
    config = Path(__file__).resolve().parents[1] / "examples" / "spiral.toml"
    started = memtui(home, "run", str(config), "--steps", str(STEPS), "--detach")
    assert started.returncode == 0, started.stderr
    (run,) = list_runs(home)
    wait_for(
        lambda: status(home, run.run_id)["state"] in ("completed", "failed"),
        timeout=180,
        what="the run to end",
        every_s=CLI_POLL_S,
    )
    final = status(home, run.run_id)
    assert final["state"] == "completed", final
    with Store(run.store, readonly=True) as store:
        steps = store.steps()
    assert [s.step for s in steps] == list(range(1, STEPS + 1))
    accuracy = [s.metrics["accuracy"] for s in steps if s.metrics]
    assert len(accuracy) == STEPS and all(0.0 <= a <= 1.0 for a in accuracy)
    assert final["metrics"] == {"accuracy": accuracy[-1]}

    exported = memtui(home, "export", run.run_id)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert [float(r["metrics.accuracy"]) for r in rows] == accuracy

    report = memtui(home, "report", run.run_id, "--json")
    assert json.loads(report.stdout)["metrics"] == {"accuracy": accuracy[-1]}
