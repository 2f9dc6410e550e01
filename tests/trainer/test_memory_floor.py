"""The fp16 loss-scale floor on the real trainer: an alert, a checkpoint, a stop with the
reason (not restartable), never a crash loop. Stage 0 skips silently (counted by
FloorWatch); ZeRO raises "Current loss scale already at minimum" (recognised)."""

from __future__ import annotations

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer

pytestmark = pytest.mark.deepspeed


@pytest.mark.parametrize("stage", [0, 1])
def test_loss_scale_floor_alerts_checkpoints_and_stops(stage: int) -> None:
    run = make_run(
        {
            "name": "floor",
            "steps": 30,
            "checkpoint": {"every_steps": 0},
            "workload": "tests.trainer.overflow_workload:build",  # inf gradients from step 3 on
            "memory": {"floor_skips": 3},
            "train": {"zero_stage": stage, "initial_scale_power": 1, "warmup_steps": 2},
        }
    )
    supervisor = SupervisorStub(run.socket)
    done = run_trainer(run)
    supervisor.close()
    assert done.returncode == 1, done.stdout + done.stderr
    alert = supervisor.events("loss_scale_floor")
    assert len(alert) == 1 and alert[0].severity == "critical" and "minimum" in alert[0].message
    saved = supervisor.events("checkpoint_saved")
    assert len(saved) == 1 and saved[0].data["step"] == supervisor.samples[-1].step < 10
    error = supervisor.events("trainer_error")[0]
    assert error.data["error"] == "MemoryHalt" and error.data["restartable"] is False
