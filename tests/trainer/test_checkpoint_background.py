"""Background sealing with real DeepSpeed: training goes on while a checkpoint is sealed,
and the final checkpoint is sealed before the trainer says it finished.

A chaos pause inside each seal (MEMTUI_CHAOS_SLOW_SAVE_S) makes the seal slower than the
steps between saves, so the order of messages on the socket shows who waited for whom.
"""

from __future__ import annotations

from typing import Any

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.checkpoints.catalog import committed_tags, latest_tag
from engine.checkpoints.manifest import verify_tag
from engine.checkpoints.store import SLOW_SAVE_ENV
from engine.wire.protocol import StepReport, TrainerEvent

pytestmark = pytest.mark.deepspeed


def position(messages: list[Any], step: int, saved: bool) -> int:
    """Index of the step report for ``step``, or (``saved``) of its checkpoint_saved event."""
    for index, m in enumerate(messages):
        if saved and isinstance(m, TrainerEvent) and m.type == "checkpoint_saved" and m.data["step"] == step:
            return index
        if not saved and isinstance(m, StepReport) and m.sample.step == step:
            return index
    raise AssertionError(f"no {'checkpoint' if saved else 'report'} for step {step}")


def train(background: bool) -> tuple[SupervisorStub, Any]:
    raw = {"name": "bg", "steps": 14, "checkpoint": {"every_steps": 4, "keep": 5, "background": background}}
    run = make_run(raw)
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, 1, 120.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    return stub, run


def test_training_goes_on_while_a_checkpoint_is_sealed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOW_SAVE_ENV, "0.5")
    stub, run = train(background=True)
    messages = stub.messages
    first = stub.events("checkpoint_saved")[0].data
    # Steps 5 and 6 were trained and reported before the seal of step 4 ended...
    assert position(messages, 6, saved=False) < position(messages, 4, saved=True)
    # ...so training did not wait for the seal, and the 0.5 s pause is in the seal. (How long
    # the in-line part took is a duration: on a loaded machine it can be anything.)
    assert first["background"] is True and first["seal_s"] >= 0.5
    # Every background seal is reported before the final save (at 14, off the cadence),
    # which is sealed in line before the trainer reports that it finished.
    saved = stub.events("checkpoint_saved")
    assert [(e.data["step"], e.data["background"]) for e in saved] == [
        (4, True),
        (8, True),
        (12, True),
        (14, False),
    ]
    assert messages.index(saved[-1]) < messages.index(stub.events("trainer_finished")[0])
    assert [s for s, _ in committed_tags(run.checkpoints)] == [4, 8, 12, 14]
    assert latest_tag(run.checkpoints) == "global_step14"
    assert all(verify_tag(run.checkpoints / f"global_step{s}", s).ok for s in (4, 8, 12, 14))


def test_without_background_training_waits_for_the_whole_save(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOW_SAVE_ENV, "0.5")
    stub, run = train(background=False)
    first = stub.events("checkpoint_saved")[0].data
    assert position(stub.messages, 4, saved=True) < position(stub.messages, 5, saved=False)
    assert first["background"] is False and first["seconds"] >= 0.5
    assert [s for s, _ in committed_tags(run.checkpoints)] == [4, 8, 12, 14]


def test_wall_clock_cadence_saves_in_the_background() -> None:
    checkpoint = {"every_steps": 0, "every_minutes": 0.005, "keep": 100}
    raw = {"name": "clock", "steps": 80, "checkpoint": checkpoint}
    # a save every 0.3 s of training, none by step count; keep > steps, so none is rotated away
    # even on a loaded machine, where a step can take longer than 0.3 s and each one saves
    run = make_run(raw)
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, 1, 120.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    saved = [(e.data["step"], e.data["background"]) for e in stub.events("checkpoint_saved")]
    periodic = [(step, background) for step, background in saved if step < 80]
    assert periodic and all(background for _, background in periodic), saved  # by the clock, mid-run
    assert saved[-1][0] == 80  # and the last step (in line, unless the clock was due right then)
    assert [s for s, _ in committed_tags(run.checkpoints)] == [*(step for step, _ in periodic), 80]
