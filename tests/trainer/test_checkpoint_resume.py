"""Durable checkpoints with real DeepSpeed on the CPU: a full disk, damaged tags, refusal.

One run, several trainer processes against a stand-in supervisor (see trainer_harness).
"""

from __future__ import annotations

import os
import signal

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer, start_trainer, wait_while_alive

from engine.checkpoints.catalog import committed_tags, latest_tag
from engine.config.config_file import build_run_config
from engine.domain import EXIT_NO_CHECKPOINT
from engine.run.directory import RunDir

pytestmark = pytest.mark.deepspeed

RAW = {"name": "ckpt", "steps": 8, "checkpoint": {"every_steps": 2, "keep": 4}}


def attempt(run: RunDir, n: int, *extra: str) -> tuple[int, SupervisorStub, str]:
    if run.socket.exists():
        run.socket.unlink()
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, n, 120.0, *extra)
    stub.close()
    return done.returncode, stub, done.stdout + done.stderr


def model_file(run: RunDir, step: int) -> str:
    return os.fspath(run.checkpoints / f"global_step{step}" / "mp_rank_00_model_states.pt")


def test_full_disk_then_damaged_tags_then_refusal() -> None:
    run = make_run(RAW)
    code, stub, out = attempt(run, 1)
    assert code == 0, out
    assert [s for s, _ in committed_tags(run.checkpoints)] == [2, 4, 6, 8]
    saved = stub.events("checkpoint_saved")[-1].data
    assert saved["seconds"] > 0 and saved["size_bytes"] > 100_000 and "write_s" in saved

    # A disk too full for another checkpoint: saves are skipped with an alert, the run goes on.
    full_disk = {**RAW, "steps": 12, "checkpoint": {**RAW["checkpoint"], "min_free_mb": 10**9}}
    run.write_config(build_run_config(full_disk))
    before = {p: p.stat().st_mtime_ns for p in run.checkpoints.rglob("*") if p.is_file()}
    code, stub, out = attempt(run, 2)
    assert code == 0, out
    assert [s.step for s in stub.samples] == list(range(9, 13))
    loading = [e.data for e in stub.events("startup_phase") if e.data["phase"] == "loading_checkpoint"]
    assert loading == [
        {
            "phase": "loading_checkpoint",
            "attempt": 2,
            "op": None,
            "cache": None,
            "lock": None,
            "holder": None,
            "tag": "global_step8",
            "rendezvous": None,
        }
    ]
    skipped = stub.events("checkpoint_skipped")
    # Periodic saves at 10 and 12, then the final save at 12 tries again.
    assert [e.data["step"] for e in skipped] == [10, 12, 12] and all(
        e.severity == "critical" for e in skipped
    )
    assert "not enough free disk" in skipped[0].message
    assert {p: p.stat().st_mtime_ns for p in run.checkpoints.rglob("*") if p.is_file()} == before

    # Flip a byte in 8, truncate 6, delete a file of 4: resume falls back to 2, naming each.
    with open(model_file(run, 8), "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.truncate(model_file(run, 6), 4096)
    os.unlink(model_file(run, 4))
    run.write_config(build_run_config({**RAW, "steps": 5}))
    code, stub, out = attempt(run, 3)
    assert code == 0, out
    problems = {e.data["tag"]: e.data["problem"] for e in stub.events("checkpoint_rejected")}
    assert problems["global_step8"].startswith("checksum mismatch in mp_rank_00_model_states.pt")
    assert problems["global_step6"].startswith("truncated file mp_rank_00_model_states.pt: 4096 of")
    assert problems["global_step4"] == "missing file mp_rank_00_model_states.pt"
    assert stub.events("checkpoint_loaded")[0].data["step"] == 2
    assert [s.step for s in stub.samples] == [3, 4, 5]
    assert latest_tag(run.checkpoints) == "global_step5"
    assert len(list((run.checkpoints / "quarantine").iterdir())) == 3

    # Nothing verifies: refuse (exit 66, a critical event); --fresh starts over at step 0.
    for _, tag in committed_tags(run.checkpoints):
        os.truncate(run.checkpoints / tag / "mp_rank_00_model_states.pt", 10)
    code, stub, out = attempt(run, 4)
    assert code == EXIT_NO_CHECKPOINT, out
    error = stub.events("trainer_error")[0]
    assert (
        error.severity == "critical"
        and "no checkpoint verifies" in error.message
        and "--fresh" in error.message
    )
    code, stub, out = attempt(run, 5, "--fresh")
    assert code == 0, out
    assert stub.events("fresh_start") and [s.step for s in stub.samples] == [1, 2, 3, 4, 5]


def test_resume_after_sigkill_is_exact() -> None:
    """Killed past checkpoint 10, resumed: steps 11.. match an uninterrupted run of the seed."""
    raw = {"name": "exact", "steps": 1000, "checkpoint": {"every_steps": 10, "keep": 2}}
    run = make_run(raw)
    stub = SupervisorStub(run.socket)
    trainer = start_trainer(run)
    # Past step 13 with checkpoint 10 sealed (sealing runs in the background while training
    # goes on); polled often: the kill must land before checkpoint 20.
    wait_while_alive(
        trainer,
        lambda: any(s.step >= 13 for s in stub.samples) and stub.events("checkpoint_saved"),
        what="step 13 and checkpoint 10",
        seen=lambda: [s.step for s in stub.samples][-3:],
        every_s=0.01,
    )
    trainer.send_signal(signal.SIGKILL)
    trainer.communicate(timeout=30)
    stub.close()
    assert max(s.step for s in stub.samples) < 20  # so the newest checkpoint is step 10

    run.socket.unlink()
    resumed = SupervisorStub(run.socket, stop_at_step=15)
    done = run_trainer(run, 2)
    resumed.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert resumed.events("checkpoint_loaded")[0].data["step"] == 10

    straight = make_run(raw)
    reference = SupervisorStub(straight.socket, stop_at_step=15)
    done = run_trainer(straight)
    reference.close()
    expected = {s.step: s for s in reference.samples}
    after = [s for s in resumed.samples if s.step <= 15]
    assert [s.step for s in after] == [11, 12, 13, 14, 15]
    for sample in after:
        assert sample.samples == expected[sample.step].samples  # the same data position
        assert sample.loss == pytest.approx(expected[sample.step].loss, abs=1e-3)
