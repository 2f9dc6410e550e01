"""The real trainer (``python -m engine.trainer``) with real DeepSpeed on the CPU.

Each test starts the trainer as a subprocess against a stand-in supervisor, so every run
gets a fresh torch.distributed world and the command line is what is tested.
"""

from __future__ import annotations

import math
import signal
from pathlib import Path

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer, start_trainer, wait_while_alive

from engine.config.config_file import build_run_config
from engine.extension_cache import EXTENSIONS_ENV
from engine.run.directory import RunDir
from engine.trainer.checkpoints.checkpoint import tags_on_disk

pytestmark = pytest.mark.deepspeed


def _run(raw: dict, **stub: int) -> tuple[RunDir, SupervisorStub, int, str]:
    run = make_run(raw)
    supervisor = SupervisorStub(run.socket, **stub)
    done = run_trainer(run)
    supervisor.close()
    return run, supervisor, done.returncode, done.stdout + done.stderr


def _assert_consecutive(steps: list[int], first: int, last: int) -> None:
    assert steps == list(range(first, last + 1))


def test_run_reports_every_step_learns_and_checkpoints() -> None:
    run, supervisor, code, output = _run(
        {
            "name": "learn",
            "steps": 150,
            "checkpoint": {"every_steps": 50, "keep": 2},
            "train": {"warmup_steps": 10},
        }
    )
    assert code == 0, output
    assert supervisor.hello is not None and supervisor.hello.role == "trainer"
    samples = supervisor.samples
    _assert_consecutive([s.step for s in samples], 1, 150)
    assert all(s.samples == s.step * 8 and s.tokens == s.samples * 128 for s in samples)
    assert all(math.isfinite(s.loss) for s in samples)
    first, last = samples[:10], samples[-10:]
    assert sum(s.loss for s in last) / 10 < sum(s.loss for s in first) / 10 - 1.0  # ~5.4 -> ~2.9
    assert 5.0 < samples[0].loss < 6.0  # ~ln(256) at init

    sample = samples[-1]
    assert sample.loss_scale == 4096.0 and sample.grad_norm is not None and 0 < sample.grad_norm < 100
    assert (
        sample.micro_batch == 8 and sample.grad_accum == 1 and sample.world_size == 1 and sample.attempt == 1
    )
    assert sample.mem_kind == "cpu-rss" and 0 < sample.mem_allocated <= sample.mem_peak < sample.mem_capacity
    assert sample.step_time_s > 0 and sample.tokens_per_s > 0
    assert samples[0].lr < samples[9].lr and samples[-1].lr == pytest.approx(3e-4, rel=1e-2)

    started = supervisor.events("trainer_started")[0].data
    assert started["device"] == "cpu" and started["precision"] == "fp16" and started["zero_stage"] == 0
    assert started["params"] > 100_000 and started["resumed_from_step"] is None
    # MFU: the CPU's matmul probe gives the peak; every step carries model TFLOP/s and MFU
    assert started["peak_source"] == "measured" and started["peak_tflops"] > 0
    per_token = started["flops_per_token"]
    assert sample.model_tflops == pytest.approx(per_token * sample.tokens_per_s / 1e12)
    assert sample.mfu == pytest.approx(sample.model_tflops / started["peak_tflops"])
    saved = supervisor.events("checkpoint_saved")
    assert [e.data["step"] for e in saved] == [50, 100, 150]
    # the save's stall rides on the next step report (saving is synchronous), once
    stalls = {s.step: s.checkpoint_stall_s for s in samples if s.checkpoint_stall_s is not None}
    assert stalls.keys() == {51, 101}
    assert stalls[51] == pytest.approx(saved[0].data["seconds"], abs=1e-4) and stalls[51] > 0
    assert stalls[101] == pytest.approx(saved[1].data["seconds"], abs=1e-4)
    assert [tag for _, tag in tags_on_disk(run.checkpoints)] == ["global_step100", "global_step150"]
    assert (run.checkpoints / "latest").read_text().strip() == "global_step150"
    finished = supervisor.events("trainer_finished")[0].data
    assert finished == {"reason": "completed", "step": 150}
    assert supervisor.messages[-1].type == "trainer_finished"


def test_a_default_run_builds_no_deepspeed_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed's CPU backend would compile its shared-memory op (inference only) the first time
    an environment starts a process group; the trainer declines it, so a run on an empty op
    cache trains without a compiler and leaves the cache empty."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(EXTENSIONS_ENV, str(cache))
    _, supervisor, code, output = _run({"name": "cache", "steps": 2})
    assert code == 0, output
    assert f"DeepSpeed op cache: {cache}" in output  # the user's TORCH_EXTENSIONS_DIR wins
    assert not (cache / "deepspeed_shm_comm").exists()
    assert [s.step for s in supervisor.samples] == [1, 2]
    phases = [e.data["phase"] for e in supervisor.events("startup_phase")]
    assert "building_op" not in phases and "waiting_for_build" not in phases


def test_stop_command_checkpoints_and_a_new_attempt_resumes_identically() -> None:
    raw = {"name": "resume", "steps": 1000, "checkpoint": {"every_steps": 0}}
    run = make_run(raw)
    supervisor = SupervisorStub(run.socket, stop_at_step=12)
    done = run_trainer(run)
    supervisor.close()
    assert done.returncode == 0, done.stdout + done.stderr
    stopped_at = supervisor.samples[-1].step
    assert stopped_at >= 12  # the stop lands at the next step boundary
    assert supervisor.events("checkpoint_saved")[0].data["step"] == stopped_at
    assert supervisor.events("trainer_finished")[0].data == {"reason": "stopped", "step": stopped_at}

    run.socket.unlink()
    resumed = SupervisorStub(run.socket, stop_at_step=stopped_at + 5)
    done = run_trainer(run, attempt=2)
    resumed.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert resumed.events("checkpoint_loaded")[0].data["step"] == stopped_at
    assert resumed.events("trainer_started")[0].data["resumed_from_step"] == stopped_at
    after = resumed.samples
    assert after[0].step == stopped_at + 1 and after[0].samples == (stopped_at + 1) * 8
    assert all(s.attempt == 2 for s in after)

    # The same run without the interruption sees the same data, lr and weights.
    straight = make_run(raw)
    reference = SupervisorStub(straight.socket, stop_at_step=stopped_at + 3)
    done = run_trainer(straight)
    reference.close()
    assert done.returncode == 0, done.stdout + done.stderr
    expected = {s.step: s for s in reference.samples}
    for sample in after[:3]:
        assert sample.lr == pytest.approx(expected[sample.step].lr, rel=1e-9)
        assert sample.loss == pytest.approx(expected[sample.step].loss, abs=1e-3)


def test_sigterm_finishes_the_step_and_checkpoints() -> None:
    run = make_run({"name": "term", "steps": 100000, "checkpoint": {"every_steps": 0}})
    supervisor = SupervisorStub(run.socket)
    trainer = start_trainer(run)
    wait_while_alive(trainer, lambda: len(supervisor.samples) >= 5, what="five steps")
    trainer.send_signal(signal.SIGTERM)
    output, _ = trainer.communicate(timeout=60)
    supervisor.close()
    assert trainer.returncode == 0, output
    saved = supervisor.events("checkpoint_saved")
    assert saved and saved[0].data["step"] == supervisor.samples[-1].step
    assert supervisor.events("trainer_finished")[0].data["reason"] == "stopped"


def test_supervisor_gone_means_checkpoint_and_exit() -> None:
    run, supervisor, code, output = _run(
        {"name": "orphan", "steps": 100000, "checkpoint": {"every_steps": 0}}, hang_up_at_step=5
    )
    assert code == 0, output
    tags = tags_on_disk(run.checkpoints)
    assert tags and tags[-1][0] >= 5


@pytest.mark.parametrize(
    ("precision", "zero_stage"),
    # fp16 at stage 0 is the default run above; bf16 here goes through real DeepSpeed too,
    # not only through the config builder.
    [("fp16", 2), ("fp16", 3), ("fp32", 0), ("fp32", 1), ("bf16", 1)],
)
def test_other_precisions_and_zero_stages(precision: str, zero_stage: int) -> None:
    run, supervisor, code, output = _run(
        {
            "name": "geom",
            "steps": 6,
            "checkpoint": {"every_steps": 3, "keep": 1},
            "train": {"precision": precision, "zero_stage": zero_stage, "micro_batch": 4, "global_batch": 8},
        }
    )
    assert code == 0, output
    samples = supervisor.samples
    _assert_consecutive([s.step for s in samples], 1, 6)
    assert all(s.grad_accum == 2 and s.micro_batch == 4 and s.samples == 8 * s.step for s in samples)
    assert all(math.isfinite(s.loss) for s in samples)
    assert (samples[-1].loss_scale is not None) is (precision == "fp16")
    if zero_stage:
        assert samples[-1].grad_norm is not None
    assert [tag for _, tag in tags_on_disk(run.checkpoints)] == ["global_step6"]
    # DeepSpeed itself, not only our config, ran the stage: its checkpoint layout says so
    # (ZeRO >= 1 shards optimizer states; ZeRO-3 shards the model states too).
    files = [f.name for f in (run.checkpoints / "global_step6").iterdir()]
    assert any("optim_states" in f for f in files) is (zero_stage > 0), files
    sharded_model = any(f.startswith("zero_pp_rank") and "model_states" in f for f in files)
    assert sharded_model is (zero_stage == 3), files
    assert "FutureWarning" not in output  # ZeRO-3 once printed two per step: a log that grows for days


def test_a_broken_workload_reports_a_critical_error() -> None:
    config = build_run_config({"name": "broken", "workload": "no_such_module_xyz:build"})
    run, supervisor, code, output = _run(config.model_dump(mode="json"))
    assert code == 1
    errors = supervisor.events("trainer_error")
    assert errors and errors[0].severity == "critical" and "no_such_module_xyz" in errors[0].message


def test_no_supervisor_is_a_clear_error() -> None:
    run = make_run({"name": "alone"})
    done = run_trainer(run, 1, 60.0, "--connect-timeout", "0.5")
    assert done.returncode == 1
    assert "no supervisor" in done.stderr
