"""The auto checkpoint cadence in a real DeepSpeed trainer: it starts from the default, says
each interval it picks with its figures, and saves on the interval it said; with two ranks
both save at the same steps (rank 0 decides, the interval is broadcast at each save)."""

from __future__ import annotations

from typing import Any

import pytest
from test_ranks import TWO_RANKS, logs, supervise
from trainer_harness import REPO_ROOT, SupervisorStub, make_run, rewrite_config, run_trainer

from engine.checkpoints.catalog import committed_tags
from engine.checkpoints.manifest import read_manifest
from engine.config.config_file import build_run_config
from engine.events import CheckpointCadence, CheckpointSaved
from engine.run.storage.store import Store

pytestmark = pytest.mark.deepspeed

STEPS = 24
BOUNDS = {"min_interval_steps": 3, "max_interval_steps": 5, "keep": 10}  # every_steps: auto


def expected_saves(decisions: list[CheckpointCadence], steps: int) -> list[int]:
    """The steps saved when each interval holds from the save that decided it (and the final save)."""
    first, changes = decisions[0], {d.step: d.interval for d in decisions[1:]}
    in_force, last, saves = first.interval, 0, []
    while last + in_force <= steps:
        last += in_force
        saves.append(last)
        in_force = changes.get(last, in_force)
    return saves if saves and saves[-1] == steps else [*saves, steps]


def check_decisions(decisions: list[CheckpointCadence], messages: list[str]) -> None:
    first, measured = decisions[0], decisions[1:]
    assert (first.step, first.interval, first.limit) == (0, 5, "first")  # the default, clamped
    assert "until a save is measured" in messages[0]
    assert measured, "no interval was decided from a measured save"
    for decision in measured:
        assert 3 <= decision.interval <= 5
        assert decision.stall_s is not None and decision.step_s is not None and decision.share is not None
        assert decision.max_stall == 0.01 and decision.room_bytes is not None


def test_auto_cadence_saves_on_the_interval_it_announces() -> None:
    run = make_run({"name": "cadence", "steps": STEPS, "checkpoint": BOUNDS})
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, 1, 180.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    events = stub.events(CheckpointCadence.event_type)
    decisions = [CheckpointCadence.model_validate(e.data) for e in events]
    check_decisions(decisions, [e.message for e in events])
    saves = [CheckpointSaved.model_validate(e.data).step for e in stub.events(CheckpointSaved.event_type)]
    assert saves == expected_saves(decisions, STEPS)

    # a restarted trainer starts from the figures its checkpoint carried, not the default
    rewrite_config(run, build_run_config({"name": "cadence", "steps": STEPS + 6, "checkpoint": BOUNDS}))
    run.socket.unlink()
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, 2, 180.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    resumed = CheckpointCadence.model_validate(stub.events(CheckpointCadence.event_type)[0].data)
    assert resumed.step == STEPS and resumed.limit != "first"
    assert resumed.stall_s is not None and resumed.step_s is not None


@pytest.mark.e2e
def test_two_ranks_save_at_the_steps_rank_0_decides() -> None:
    raw: dict[str, Any] = {"name": "cadence2", "steps": STEPS, "checkpoint": BOUNDS, "train": TWO_RANKS}
    run = make_run(raw)
    proc = supervise(run, {"PYTHONPATH": str(REPO_ROOT)})  # the ranks run this checkout's engine
    assert proc.wait(timeout=300) == 0, logs(run, proc)
    with Store(run.store, readonly=True) as store:
        events = store.events_since(0)
        state = store.read_meta().state
    assert state == "completed", logs(run, proc)
    cadence = [e for e in events if e.type == CheckpointCadence.event_type]
    decisions = [CheckpointCadence.model_validate(e.data) for e in cadence]
    check_decisions(decisions, [e.message for e in cadence])
    saves = [CheckpointSaved.model_validate(e.data).step for e in events if e.type == "checkpoint_saved"]
    assert saves == expected_saves(decisions, STEPS)
    assert [s for s, _ in committed_tags(run.checkpoints)] == saves  # every rank wrote each one
    for _, tag in committed_tags(run.checkpoints):  # and each rank's RNG states are kept
        manifest = read_manifest(run.checkpoints / tag)
        assert len(manifest.rank_rng) == 2 and manifest.rank_rng[0] == manifest.rng
