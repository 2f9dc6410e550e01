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
from trainer_harness import REPO_ROOT, make_run

from engine.domain import build_run_config
from engine.trainer.lr_schedule import lr_ratio

pytestmark = pytest.mark.timeout(120)
SCRIPT = Path(__file__).with_name("directive_run.py")


def run_script(run_dir: Path, steps: int, inject: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(run_dir), str(steps), "inject" if inject else "no"],
        capture_output=True,
        text=True,
        timeout=100,
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
