"""The auto checkpoint cadence in a real DeepSpeed trainer: it starts from the default, says
each interval it picks with its figures, and saves on the interval it said."""

from __future__ import annotations

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.events import CheckpointCadence, CheckpointSaved

pytestmark = pytest.mark.deepspeed

STEPS = 24


def test_auto_cadence_saves_on_the_interval_it_announces() -> None:
    checkpoint = {"min_interval_steps": 3, "max_interval_steps": 5, "keep": 10}  # every_steps: auto
    run = make_run({"name": "cadence", "steps": STEPS, "checkpoint": checkpoint})
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, 1, 180.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr

    cadence_events = stub.events(CheckpointCadence.event_type)
    decisions = [CheckpointCadence.model_validate(e.data) for e in cadence_events]
    first, measured = decisions[0], decisions[1:]
    assert (first.step, first.interval, first.limit) == (0, 5, "first")  # the default, clamped
    assert "until a save is measured" in cadence_events[0].message
    assert measured, "no interval was decided from a measured save"
    for decision in measured:
        assert 3 <= decision.interval <= 5
        assert decision.stall_s is not None and decision.step_s is not None and decision.share is not None
        assert decision.max_stall == 0.01 and decision.room_bytes is not None

    # every save but the final one lands one interval (the one in force) after the last
    saves = [CheckpointSaved.model_validate(e.data).step for e in stub.events(CheckpointSaved.event_type)]
    in_force, last, expected = first.interval, 0, []
    changes = {d.step: d.interval for d in measured}
    while last + in_force <= STEPS:
        last += in_force
        expected.append(last)
        in_force = changes.get(last, in_force)
    if expected[-1] != STEPS:
        expected.append(STEPS)  # the final save when the run stops
    assert saves == expected
