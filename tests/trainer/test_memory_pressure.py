"""Injected memory pressure through the real supervisor and store: the run adapts down
and back up without a crash, and every optimizer step has the configured global batch.

``python -m engine supervise RUN_DIR`` launches the real trainer (DeepSpeed on the CPU)
with ``MEMTUI_BALLAST``: 768 MiB of ballast from step 10 to step 20 under a 1 GiB budget
pushes the expected peak (process RSS on the CPU) over critical; the controller drops the
micro-batch to 1 and raises GAS to 8. When the ballast goes, it grows back one notch per
cool-down to the configured 8. Everything is checked from telemetry.sqlite.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from trainer_harness import REPO_ROOT, make_run

from engine.run.storage.store import Store
from engine.trainer.memory.ballast import BALLAST_ENV

pytestmark = pytest.mark.deepspeed

GIB = 1 << 30


def test_ballast_pressure_adapts_down_and_back_up_keeping_the_global_batch() -> None:
    run = make_run(
        {
            "name": "pressure",
            "steps": 40,
            "checkpoint": {"every_steps": 0},
            "train": {"micro_batch": 8, "global_batch": 8, "warmup_steps": 5},
            # throughput_margin 0.99: these runs test pressure, not the choice by measured speed;
            # on a loaded machine a smaller size can time faster and keep the group below 8.
            "memory": {"budget": GIB, "steady_steps": 3, "cooldown_steps": 4, "throughput_margin": 0.99},
        }
    )
    env = {**os.environ, BALLAST_ENV: "10:768M,20:0"}
    done = subprocess.run(
        [sys.executable, "-m", "engine", "supervise", os.fspath(run.path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    logs = done.stdout + done.stderr + "".join(p.read_text() for p in run.logs.glob("trainer-*.log"))
    assert done.returncode == 0, logs

    with Store(run.store, readonly=True) as store:
        steps = store.steps()
        events = store.events_since(0)
        state = store.read_meta().state
    assert state == "completed", logs
    assert [s.step for s in steps] == list(range(1, 41))
    assert all(s.attempt == 1 for s in steps)  # no crash, no restart
    assert all(s.micro_batch * s.grad_accum * s.world_size == 8 for s in steps)
    assert all(s.samples == 8 * s.step for s in steps)  # samples per optimizer step == global batch
    assert all(s.mem_budget == GIB and s.mem_predicted and s.mem_step_peak for s in steps)

    micro = [s.micro_batch for s in steps]  # micro[i] ran step i (0-based)
    assert micro[:10] == [8] * 10
    assert set(micro[10:20]) == {1}  # under pressure: the smallest micro-batch
    held = [s.mem_ballast for s in steps]  # named, so a plan compared with a peak leaves it out
    assert held == [None] * 10 + [768 << 20] * 10 + [None] * 20
    assert micro[-1] == 8 and max(micro) == 8  # grown back, never above the configured maximum

    adapted = [e for e in events if e.type == "memory_adapted"]
    kinds = [(e.data["kind"], e.data["from_micro_batch"], e.data["to_micro_batch"]) for e in adapted]
    assert kinds[0] == ("shrink", 8, 1) and adapted[0].data["step"] == 10
    assert kinds[1:] == [("grow", 1, 2), ("grow", 2, 4), ("grow", 4, 8)]
    grow_steps = [e.data["step"] for e in adapted[1:]]
    assert all(b - a >= 4 for a, b in zip([10, *grow_steps[:-1]], grow_steps, strict=True))  # the cool-down
    assert adapted[0].data["mem_before"] > 0.95 * GIB  # the expected peak that triggered it
    levels = [e.data["level"] for e in events if e.type == "memory_level"]
    assert levels[0] == "critical" and levels[-1] == "ok"
