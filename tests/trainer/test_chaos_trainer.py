"""Chaos injected into the real trainer (DeepSpeed on the CPU) through its link.

A stand-in supervisor sends ``InjectChaos`` when given steps are reported; the trainer
applies each at its next step boundary (``chaos_applied`` says at which) and training goes
on to its last step: ballast held, slow steps slept, a NaN loss skipped (the weights stay
finite), an fp16 overflow burst lowering the loss scale, an OOM shrunk and redone, a save
failing on a full disk and the next one succeeding, samples per optimizer step constant.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from pydantic import BaseModel
from trainer_harness import REPO_ROOT, SupervisorStub, make_run, run_trainer

from engine.chaos.kinds.disk_full import DiskFull
from engine.chaos.kinds.memory import Ballast, Oom
from engine.chaos.kinds.numerics import NanLoss, Overflow
from engine.chaos.kinds.slow_steps import SlowSteps
from engine.domain import TelemetrySample
from engine.wire.protocol import InjectChaos

pytestmark = pytest.mark.deepspeed

STEPS = 24
GLOBAL_BATCH = 8


def inject(chaos_id: str, request: Any) -> InjectChaos:
    return InjectChaos(chaos_id=chaos_id, request=request)


def chaos_run(
    precision: str, send_at: dict[int, list[BaseModel]], background: bool = False
) -> tuple[SupervisorStub, dict[str, Any]]:
    run = make_run(
        {
            "name": "chaos",
            "steps": STEPS,
            "checkpoint": {"every_steps": 4, "background": background},
            "train": {
                "micro_batch": 4,
                "global_batch": GLOBAL_BATCH,
                "warmup_steps": 2,
                "precision": precision,
            },
        }
    )
    stub = SupervisorStub(run.socket, send_at=send_at)
    done = run_trainer(run, 1, 180.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    finished = stub.events("trainer_finished")
    assert finished and finished[0].data["reason"] == "completed"
    assert [s.step for s in stub.samples] == list(range(1, STEPS + 1))
    applied = {e.data["kind"]: e.data for e in stub.events("chaos_applied")}
    return stub, applied


def at(samples: list[TelemetrySample], index: int, steps: int) -> list[TelemetrySample]:
    """The samples of the ``steps`` steps from 0-based step ``index`` on (reported 1-based)."""
    return [s for s in samples if index < s.step <= index + steps]


def assert_samples_per_step_constant(samples: list[TelemetrySample]) -> None:
    assert all(s.samples == GLOBAL_BATCH * s.step for s in samples)
    assert all(s.micro_batch * s.grad_accum * s.world_size == GLOBAL_BATCH for s in samples)


def assert_one_failed_save_then_saves(stub: SupervisorStub, applied_step: int) -> None:
    failed = [e.data["step"] for e in stub.events("checkpoint_failed")]
    saved = [e.data["step"] for e in stub.events("checkpoint_saved")]
    assert len(failed) == 1 and failed[0] > applied_step, (failed, saved)
    assert any(step > failed[0] for step in saved), (failed, saved)
    assert "injected" in stub.events("checkpoint_failed")[0].data["reason"]


def test_every_trainer_kind_in_fp32_is_applied_and_training_goes_on() -> None:
    early = [
        inject("c-ballast", Ballast(bytes=8 << 20, steps=3)),
        inject("c-slow", SlowSteps(steps=2, delay_s=0.02, jitter=0.5)),
        inject("c-disk", DiskFull(saves=1)),
        inject("c-nan", NanLoss(steps=2)),
    ]
    later = [inject("c-oom", Oom(phase="backward")), inject("c-over", Overflow(steps=2))]
    stub, applied = chaos_run("fp32", {2: early, 12: later})
    samples = stub.samples
    assert set(applied) == {"ballast", "slow_steps", "disk_full", "nan_loss", "oom", "overflow"}
    assert applied["nan_loss"]["chaos_id"] == "c-nan" and applied["oom"]["chaos_id"] == "c-oom"
    assert "not applicable" in applied["overflow"]["detail"]

    # NaN loss: the two steps report it and are skipped by the trainer (no optimizer or LR
    # step); every other step's loss is finite: the weights never took a NaN.
    nan_at = applied["nan_loss"]["step"]
    skipped = at(samples, nan_at, 2)
    assert [math.isnan(s.loss) and s.overflow for s in skipped] == [True, True]
    assert skipped[-1].skipped_steps == samples[-1].skipped_steps == 2
    assert skipped[0].lr == skipped[1].lr == at(samples, nan_at + 2, 1)[0].lr  # the schedule held
    rest = [s for s in samples if s not in skipped]
    assert all(math.isfinite(s.loss) and not s.overflow for s in rest)  # (fp32 stage 0: no grad norm)

    slowed = at(samples, applied["slow_steps"]["step"], 2)
    assert all(s.step_time_s >= 0.02 for s in slowed)  # the sleep is inside the step's time

    oom = [e.data for e in stub.events("memory_adapted") if e.data["kind"] == "oom"]
    # chaos_applied names the boundary before the step (0-based); the OOM event, the step redone
    assert len(oom) == 1 and oom[0]["step"] == applied["oom"]["step"] + 1 and oom[0]["to_micro_batch"] == 2
    redone = at(samples, applied["oom"]["step"], 1)[0]
    assert (redone.step, redone.micro_batch) == (oom[0]["step"], 2)
    assert samples[-1].micro_batch == 2
    assert_samples_per_step_constant(samples)
    assert_one_failed_save_then_saves(stub, applied["disk_full"]["step"])


def test_fp16_nan_loss_and_an_overflow_burst_are_skipped_by_deepspeed() -> None:
    stub, applied = chaos_run(
        "fp16",
        {
            3: [inject("c-nan", NanLoss(steps=2, value="inf"))],
            12: [inject("c-over", Overflow(steps=3)), inject("c-disk", DiskFull(saves=1))],
        },
        background=True,  # the write fails in line; the seal never starts
    )
    samples = stub.samples
    nan = at(samples, applied["nan_loss"]["step"], 2)
    assert all(math.isinf(s.loss) and s.overflow for s in nan)
    burst_at = applied["overflow"]["step"]
    burst = at(samples, burst_at, 3)
    assert all(s.overflow and math.isfinite(s.loss) for s in burst)  # only the gradients overflow
    before = at(samples, burst_at - 1, 1)[0].loss_scale
    assert before is not None and burst[-1].loss_scale is not None and burst[-1].loss_scale < before
    after = [s for s in samples if s.step > burst_at + 3]
    assert after and all(math.isfinite(s.loss) and s.grad_norm is not None for s in after)
    assert_samples_per_step_constant(samples)
    assert_one_failed_save_then_saves(stub, applied["disk_full"]["step"])


@pytest.mark.parametrize(("precision", "stage"), [("fp32", 2), ("bf16", 0), ("bf16", 1)])
def test_the_trainers_own_skip_of_a_nan_loss_step_holds_at_every_stage(precision: str, stage: int) -> None:
    run = make_run(
        {
            "name": "skip",
            "steps": 10,
            "checkpoint": {"every_steps": 0},
            "train": {
                "micro_batch": 4,
                "global_batch": GLOBAL_BATCH,
                "warmup_steps": 2,
                "precision": precision,
                "zero_stage": stage,
            },
        }
    )
    stub = SupervisorStub(run.socket, send_at={2: [inject("c-nan", NanLoss(steps=2))]})
    done = run_trainer(run, 1, 180.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    samples = stub.samples
    [applied] = [e.data for e in stub.events("chaos_applied")]
    skipped = at(samples, applied["step"], 2)
    assert len(skipped) == 2 and all(math.isnan(s.loss) and s.overflow for s in skipped)
    rest = [s for s in samples if s not in skipped]
    assert len(rest) == 8 and all(math.isfinite(s.loss) and not s.overflow for s in rest)
    assert samples[-1].skipped_steps == 2
    assert_samples_per_step_constant(samples)


def test_a_skipped_step_leaves_no_trace_in_the_weights_or_the_optimizer() -> None:
    """The weights after (skip step 2, train step 3) equal those after (train step 3) alone."""
    cases = ["fp32:0", "fp32:2", "bf16:0", "bf16:1", "fp16:1"]
    done = subprocess.run(
        [sys.executable, "tests/trainer/skip_probe.py", *cases],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    probes = [json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert [f"{p['precision']}:{p['stage']}" for p in probes] == cases
    for p in probes:
        assert p["same"], p
        assert (p["loss"], p["global_steps"], p["global_samples"], p["skipped_steps"]) == ("nan", 4, 32, 1), p


def test_two_ranks_skip_the_same_nan_loss_steps_and_fail_the_same_save() -> None:
    """Rank 0 alone hears the supervisor; the ranks agree on its chaos at the boundary, or a
    step skipped on one rank only would hang the other in the gradient all-reduce."""
    train = {"ranks": 2, "zero_stage": 1, "micro_batch": 4, "global_batch": 16, "warmup_steps": 2}
    train["precision"] = "fp32"
    run = make_run({"name": "ranks", "steps": 12, "checkpoint": {"every_steps": 4}, "train": train})
    early = [inject("c-nan", NanLoss(steps=2)), inject("c-disk", DiskFull(saves=1))]
    stub = SupervisorStub(run.socket, send_at={2: early})
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=2"]
    done = subprocess.run(
        [sys.executable, *torchrun, "-m", "engine.trainer", str(run.path), "--attempt", "1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    samples = stub.samples
    applied = {e.data["kind"]: e.data for e in stub.events("chaos_applied")}
    assert set(applied) == {"nan_loss", "disk_full"}  # rank 0 speaks for both
    skipped = at(samples, applied["nan_loss"]["step"], 2)
    assert len(skipped) == 2 and all(math.isnan(s.loss) and s.overflow for s in skipped)
    assert [s.step for s in samples] == list(range(1, 13)) and samples[-1].skipped_steps == 2
    assert all(math.isfinite(s.loss) for s in samples if s not in skipped)
    assert all(s.samples == 16 * s.step for s in samples)
    assert_one_failed_save_then_saves(stub, applied["disk_full"]["step"])
