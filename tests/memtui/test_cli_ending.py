"""``memtui stop`` and ``memtui status`` tell the truth about saves: a final save that failed on
a full disk is named, and so is the newest checkpoint that verifies (where a resume starts),
instead of a bare "stopped at step 1054"."""

from __future__ import annotations

import json
import os

import pytest

import memtui.cli.runs.lifecycle_commands
from engine.checkpoints.store import CheckpointStore
from engine.domain import RunStatus
from engine.events import CheckpointFailed, CheckpointSaved, CheckpointSkipped, Payload
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import ClientMessage, ServerMessage
from memtui.cli.main import main
from tests.fakes.run_script import make_sample
from tests.fakes.scripted_engine import ScriptedEngine, answer_ok, welcome_for

DISK_FULL = "writing failed: disk full ([Errno 28] No space left on device)"
FIELDS = {"samples": 0, "config_hash": "c" * 64, "micro_batch": 8, "grad_accum": 1}


def checkpoint(run: RunDir, step: int) -> None:
    """A real, verified checkpoint ``global_step<step>`` (a fake writer's files)."""

    def write(staging: str) -> None:
        (run.checkpoints / staging).mkdir()
        (run.checkpoints / staging / "mp_rank_00_model_states.pt").write_bytes(os.urandom(2048))

    outcome = CheckpointStore(run.checkpoints).save(step, write, dict(FIELDS), estimate_bytes=1000)
    assert outcome.status == "saved", outcome.reason


def record(run: RunDir, payload: Payload, attempt: int) -> None:
    with Store(run.store) as store:
        store.append_event(payload.event_type, data=payload.data(), attempt=attempt)


def stopped_after_a_failed_final_save(run: RunDir) -> None:
    """The live run as we saw it: saved at 300, then the disk filled; stopped at 1054."""
    checkpoint(run, 300)
    with Store(run.store) as store:
        for step in (299, 300, 301, 1054):
            store.add_step(make_sample(step))
        store.update_meta(state="stopped", started_at=1_700_000_000.0, attempt=2, exit_reason="memtui stop")
    record(
        run,
        CheckpointSaved(
            step=300,
            tag="global_step300",
            seconds=1.0,
            write_s=0.5,
            seal_s=0.5,
            background=True,
            size_bytes=2048,
        ),
        attempt=1,
    )
    record(run, CheckpointSkipped(step=600, tag="global_step600", reason="not enough free disk"), attempt=2)
    record(run, CheckpointFailed(step=1054, tag="global_step1054", reason=DISK_FULL), attempt=2)


def test_stop_names_a_failed_final_save_and_the_newest_verified_checkpoint(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped_after_a_failed_final_save(run_dir)
    assert main(["stop", run_dir.run_id]) == 1  # the run stopped, but its final save did not happen
    assert capsys.readouterr().out.splitlines() == [
        f"{run_dir.run_id}: was already stopped at step 1054 (memtui stop)",
        f"  the final save (step 1054) failed: {DISK_FULL}",
        "  newest verified checkpoint: step 300 (global_step300); a resume redoes the 754 steps after it",
    ]

    assert main(["stop", run_dir.run_id, "--json"]) == 1
    ending = json.loads(capsys.readouterr().out)
    assert (ending["state"], ending["step"], ending["save_missed"]) == ("stopped", 1054, True)
    assert ending["last_save"] == {
        "outcome": "failed",
        "step": 1054,
        "tag": "global_step1054",
        "reason": DISK_FULL,
        "attempt": 2,
    }
    assert (ending["checkpoint_step"], ending["checkpoint_tag"], ending["checkpoints_on_disk"]) == (
        300,
        "global_step300",
        1,
    )


def test_status_shows_the_checkpoint_a_resume_starts_from_and_the_missed_save(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped_after_a_failed_final_save(run_dir)
    assert main(["status", run_dir.run_id, "--json"]) == 0
    status = RunStatus.model_validate_json(capsys.readouterr().out)
    assert status.checkpoint_step == 300 and status.step == 1054
    assert status.last_save is not None
    assert (status.last_save.outcome, status.last_save.step, status.last_save.reason) == (
        "failed",
        1054,
        DISK_FULL,
    )
    assert main(["status", run_dir.run_id]) == 0
    rows = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert rows["checkpoint"] == f"step 300; the last save (step 1054) failed: {DISK_FULL}"


def test_a_live_stop_whose_final_save_fails_says_so(
    live_run: RunDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint(live_run, 4)
    with Store(live_run.store) as store:
        for step in (4, 5):
            store.add_step(make_sample(step))
        store.update_meta(state="running", attempt=1)
    monkeypatch.setattr(memtui.cli.runs.lifecycle_commands, "STOP_POLL_S", 0.02)

    def supervisor_exits() -> None:  # a real supervisor records the trainer's event, then ends
        record(live_run, CheckpointFailed(step=5, tag="global_step5", reason=DISK_FULL), attempt=1)
        with Store(live_run.store) as store:
            store.update_meta(state="stopped")
        live_run.pid_file.unlink()

    def stopping(message: ClientMessage) -> list[ServerMessage]:
        if message.kind == "stop":
            supervisor_exits()
        return answer_ok(message)

    with ScriptedEngine.in_thread(live_run.socket, welcome_for(live_run.run_id), reply=stopping):
        assert main(["stop"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{live_run.run_id}: stopped at step 5"
    assert out[1:] == [
        f"  the final save (step 5) failed: {DISK_FULL}",
        "  newest verified checkpoint: step 4 (global_step4); a resume redoes the 1 step after it",
    ]


def test_a_good_final_save_reads_as_one_and_exits_0(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint(run_dir, 5)
    with Store(run_dir.store) as store:
        store.add_step(make_sample(5))
        store.update_meta(state="completed", attempt=1)
    record(
        run_dir,
        CheckpointSaved(
            step=5,
            tag="global_step5",
            seconds=1.0,
            write_s=0.5,
            seal_s=0.5,
            background=False,
            size_bytes=2048,
        ),
        attempt=1,
    )
    assert main(["stop", run_dir.run_id]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["  newest verified checkpoint: step 5 (global_step5)"]
    assert main(["status", run_dir.run_id, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["checkpoint_step"] == 5 and status["last_save"]["outcome"] == "saved"
