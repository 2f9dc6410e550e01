"""The trainer applies admitted directives at a step boundary, refuses what lies outside its
hard limits, and a resume re-applies what a checkpoint recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scheduled_workload import GAMMA
from trainer_harness import REPO_ROOT, make_run

from engine.config.config_file import build_run_config
from engine.trainer.lr_schedule import lr_ratio

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # two trainer runs each, on a machine others share
SCRIPT = Path(__file__).with_name("directive_run.py")


def run_script(run_dir: Path, steps: int, inject: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(run_dir), str(steps), "inject" if inject else "no"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_directives_applied_at_the_boundary_refused_outside_limits_and_resumed() -> None:
    raw = {"steps": 12, "train": {"warmup_steps": 2}, "checkpoint": {"every_steps": 0}}
    run = make_run(raw)
    try:
        config = build_run_config(raw)
        peak, floor = config.train.lr, config.train.min_lr / config.train.lr

        def schedule(total: int) -> list[float]:  # the script sets steps, the schedule's length
            return [peak * lr_ratio(s, 2, total, floor) for s in range(total)]

        expected = schedule(6)
        first = run_script(run.path, 6, inject=True)
        lrs = {int(k): v for k, v in first["lrs"].items()}
        # sample.step N is the step with 0-based index N-1; injected when step 3 was reported
        for step in (1, 2, 3):
            assert lrs[step] == pytest.approx(expected[step - 1])
        for step in (4, 5, 6):
            assert lrs[step] == pytest.approx(0.5 * expected[step - 1])  # not compounding
        good, bad = first["events"]
        assert good["applied"] == {
            "lr_multiplier": 0.5,
            "gradient_clip_norm": 0.5,
            "loss_scale_initial_power": 8,
        }
        assert good["step"] == 3 and not good["refused"]
        assert not bad["applied"] and set(bad["refused"]) == {"lr_multiplier", "micro_batch_size"}
        assert "hard limits" in bad["refused"]["lr_multiplier"]
        assert first["clip"] == 0.5
        assert first["effective"] == good["applied"]

        second = run_script(run.path, 9, inject=False)  # resumes from the step-6 checkpoint
        lrs = {int(k): v for k, v in second["lrs"].items()}
        expected = schedule(9)
        for step in (7, 8, 9):
            assert lrs[step] == pytest.approx(0.5 * expected[step - 1])
        assert second["clip"] == 0.5 and second["effective"]["lr_multiplier"] == 0.5
    finally:
        shutil.rmtree(run.path.parent, ignore_errors=True)


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_loss_scale_set_in_the_scaler_trained_with_and_left_to_the_checkpoint_on_resume(
    stage: int,
) -> None:
    # loss_scale_window 2: the dynamic scaler doubles its scale every 2 clean steps, so the
    # scale the step-6 checkpoint pickles has grown past 2**8. The power is a one-shot
    # setting: a resume goes on from the pickled scale, it never drops back to 2**8.
    raw = {
        "steps": 12,
        "train": {"warmup_steps": 2, "zero_stage": stage, "precision": "fp16"},
        "checkpoint": {"every_steps": 0},
        "deepspeed_config": {"fp16": {"loss_scale_window": 2}},
    }
    run = make_run(raw)
    try:
        first = run_script(run.path, 6, inject=True)
        scales = {int(k): v for k, v in first["scales"].items()}
        good = first["events"][0]
        assert good["applied"]["loss_scale_initial_power"] == 8 and good["step"] == 3
        assert scales[3] != 256.0  # before the directive: the configured 2**12, grown
        assert scales[4] == 256.0  # reported step 4 (0-based 3, the boundary) backpropagates at 2**8
        assert first["scale"] > 256.0  # the ZeRO scaler grew on; the checkpoint pickles that
        assert first["effective"]["loss_scale_initial_power"] == 8
        assert first["clip"] == 0.5  # the ZeRO optimizer's clip_grad, set by the same directive

        second = run_script(run.path, 9, inject=False)
        scales = {int(k): v for k, v in second["scales"].items()}
        assert scales[7] == first["scale"]  # resumed: the pickled scale, not the directive's again
        assert "loss_scale_initial_power" not in second["effective"] and second["clip"] == 0.5
        lrs = {int(k): v for k, v in second["lrs"].items()}
        assert set(lrs) == {7, 8, 9}  # every resumed step trained and reported
    finally:
        shutil.rmtree(run.path.parent, ignore_errors=True)


def test_lr_multiplier_on_a_workloads_own_chainable_scheduler_does_not_compound() -> None:
    # fp32: no overflow-skipped steps, so the scheduler steps once per reported step.
    raw = {
        "steps": 12,
        "train": {"precision": "fp32"},
        "checkpoint": {"every_steps": 0},
        "workload": "scheduled_workload:build",
        "workload_dir": str(Path(__file__).parent),
    }
    run = make_run(raw)
    try:
        peak = build_run_config(raw).train.lr

        def own(step: int) -> float:  # ExponentialLR alone, for the 1-based reported step
            return peak * GAMMA ** (step - 1)

        first = run_script(run.path, 6, inject=True)
        lrs = {int(k): v for k, v in first["lrs"].items()}
        for step in (1, 2, 3):
            assert lrs[step] == pytest.approx(own(step))
        for step in (4, 5, 6):
            assert lrs[step] == pytest.approx(0.5 * own(step))  # the lr used, not compounding
        assert first["events"][0]["applied"]["lr_multiplier"] == 0.5

        second = run_script(run.path, 9, inject=False)  # resumes: the factor set again, once
        lrs = {int(k): v for k, v in second["lrs"].items()}
        for step in (7, 8, 9):
            assert lrs[step] == pytest.approx(0.5 * own(step))
    finally:
        shutil.rmtree(run.path.parent, ignore_errors=True)


def test_lr_multiplier_on_a_deepspeed_config_scheduler_at_zero() -> None:
    # DeepSpeed's WarmupLR (closed form in its iteration) from the user's deepspeed_config,
    # at ZeRO-1, whose checkpoint does not restore the param groups' lr.
    warmup = {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3, "warmup_num_steps": 20, "warmup_type": "linear"}
    raw = {
        "steps": 12,
        "train": {"precision": "fp32", "zero_stage": 1},
        "checkpoint": {"every_steps": 0},
        "deepspeed_config": {"scheduler": {"type": "WarmupLR", "params": warmup}},
    }
    run = make_run(raw)
    try:

        def own(step: int) -> float:
            # The 1-based reported step k runs at WarmupLR iteration k - 2 (DeepSpeed steps
            # the scheduler once at start-up, to iteration -1 -> 0 on the first step).
            return 3e-3 * max(0, step - 2) / 20

        first = run_script(run.path, 6, inject=True)
        lrs = {int(k): v for k, v in first["lrs"].items()}
        assert lrs[3] == pytest.approx(own(3))
        for step in (4, 5, 6):
            assert lrs[step] == pytest.approx(0.5 * own(step))

        second = run_script(run.path, 9, inject=False)
        lrs = {int(k): v for k, v in second["lrs"].items()}
        for step in (7, 8, 9):
            assert lrs[step] == pytest.approx(0.5 * own(step))
    finally:
        shutil.rmtree(run.path.parent, ignore_errors=True)
