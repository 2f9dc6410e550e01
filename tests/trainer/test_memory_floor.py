"""The fp16 loss-scale floor on the real trainer: an alert, a checkpoint, a stop with the
reason (not restartable), never a crash loop. Stage 0 skips silently (counted by
FloorWatch); ZeRO raises "Current loss scale already at minimum" (recognised)."""

from __future__ import annotations

import pytest
from overflow_workload import OVERFLOW_FROM
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.trainer.memory.loss_scale_floor import FLOOR_SKIPS

pytestmark = pytest.mark.deepspeed


@pytest.mark.parametrize("stage", [0, 1])
def test_loss_scale_floor_alerts_checkpoints_and_stops(stage: int) -> None:
    run = make_run(
        {
            "name": "floor",
            "steps": 30,
            "checkpoint": {"every_steps": 0},
            "workload": "tests.trainer.overflow_workload:build",  # inf gradients from step 3 on
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
    # The floor is FLOOR_SKIPS overflowing steps at the minimum scale (stage 0), or ZeRO's
    # "already at minimum" at once: within a few halvings (and their hysteresis) of it.
    assert len(saved) == 1 and saved[0].data["step"] == supervisor.samples[-1].step
    assert saved[0].data["step"] <= OVERFLOW_FROM + FLOOR_SKIPS + 4
    error = supervisor.events("trainer_error")[0]
    assert error.data["error"] == "MemoryHalt" and error.data["restartable"] is False

    # Telemetry of the overflows, as real DeepSpeed reported them: the flag, the running
    # counts, no grad norm for a skipped step, and a dynamic scale that only goes down.
    samples = supervisor.samples
    clean = [s for s in samples if s.step <= OVERFLOW_FROM]  # reported steps are 1-based
    assert [s.step for s in clean] == [1, 2, 3]
    assert all(not s.overflow and s.overflow_count == s.skipped_steps == 0 for s in clean)
    assert all(s.loss_scale == 2.0 and s.grad_norm is not None for s in clean)  # 2**initial_scale_power
    overflowed = samples[OVERFLOW_FROM:]
    assert overflowed and all(s.overflow and s.grad_norm is None for s in overflowed)
    assert [s.overflow_count for s in overflowed] == [s.step - OVERFLOW_FROM for s in overflowed]
    assert [s.skipped_steps for s in overflowed] == [s.step - OVERFLOW_FROM for s in overflowed]
    scales = [s.loss_scale for s in overflowed]
    assert scales == sorted(scales, reverse=True) and scales[-1] == 1.0  # halved (ZeRO: after hysteresis)
