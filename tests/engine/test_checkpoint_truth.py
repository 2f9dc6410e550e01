"""What the run says of its checkpoints is what is on disk: ``status`` names the newest tag
that verifies in full (a corrupted one is named as such), and a tag sealed just before its
trainer died gets its ``checkpoint_saved`` (reconciled) before the next launch."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from checkpoint_samples import FIELDS, writer

from engine.chaos.kinds.corrupt_checkpoint import CorruptCheckpoint
from engine.checkpoints.store import CheckpointStore
from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.reports.endurance_report import endurance_report
from engine.run.storage.store import Store
from engine.wire.protocol import Chaos, Status
from memtui.cli.live_status import fetch_status, status_from_result
from memtui.endurance_markdown import figure_rows
from memtui.status_report import checkpoint_text
from tests.waiting import is_event

pytestmark = pytest.mark.slow  # starts real processes (tests/conftest.py)


def seal(checkpoints: Path, step: int) -> None:
    """A tag sealed as the trainer's store does, with no event about it."""
    store = CheckpointStore(checkpoints)
    outcome = store.save(step, writer(checkpoints, step), dict(FIELDS, samples=step * 8), estimate_bytes=1000)
    assert outcome.status == "saved"


async def test_a_tag_sealed_before_a_sigkill_is_announced_at_the_restart(
    run: RunDir, start, connect, fake_env
) -> None:
    run.write_config(build_run_config(steps=100000, restart={"backoff_initial_s": 0.1}))
    running = await start()
    client = await connect(replay_from=0)
    launched, _ = await client.until(is_event("trainer_launched"))
    await client.until(is_event("trainer_started"))
    seal(run.checkpoints, 40)  # ... and the trainer is killed before it says checkpoint_saved
    os.kill(launched.event.data["pid"], signal.SIGKILL)
    await client.until(is_event("trainer_started", attempt=2))
    running.supervisor.request_stop("test over")
    assert await running.result() == 0
    with Store(run.store, readonly=True) as store:
        saved = [e for e in store.events_since(0) if e.type == "checkpoint_saved"]
    assert [(e.data["tag"], e.data["reconciled"], e.attempt) for e in saved] == [("global_step40", True, 1)]
    assert "never announced" in saved[0].message


async def test_status_names_the_newest_checkpoint_that_verifies_not_the_latest_pointer(
    run: RunDir, start, connect, fake_env, wait_until
) -> None:
    run.write_config(build_run_config(steps=100000))
    seal(run.checkpoints, 250)
    seal(run.checkpoints, 500)  # ``latest`` points here
    running = await start()
    client = await connect(replay_from=0)
    await client.until(is_event("trainer_started"))
    await wait_until(lambda: running.supervisor.status().checkpoint_step == 500, "step 500 to verify")
    await client.answer(Chaos(id="c", request=CorruptCheckpoint()))  # bytes of global_step500 flipped

    def told() -> Any:
        return running.supervisor.status()

    await wait_until(lambda: told().checkpoint_step == 250, "status to name the tag a resume loads")
    ok, _ = await client.answer(Status(id="st"))
    live = status_from_result(ok.result)
    assert live.checkpoint_step == 250 and "global_step500: checksum mismatch" in live.checkpoint_rejected[0]
    assert checkpoint_text(live).startswith("step 250 (does not verify: global_step500: checksum mismatch")
    running.supervisor.request_stop("test over")
    assert await running.result() == 0
    offline = fetch_status(run)  # nobody serves it now: read from disk, verified the same way
    assert (offline.checkpoint_step, offline.checkpoint_rejected) == (250, live.checkpoint_rejected)


async def test_a_stop_during_a_resumed_trainers_start_up_is_not_a_failed_resume(
    run: RunDir, start, connect, fake_env, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"  # the fake trainer's first step waits for it
    fake_env(gate=gate)
    gate.touch()
    run.write_config(build_run_config(steps=100000, restart={"backoff_initial_s": 0.1}))
    running = await start()
    client = await connect(replay_from=0)
    launched, _ = await client.until(is_event("trainer_launched"))
    await client.until(lambda m: m.kind == "telemetry")  # attempt 1 stepped
    gate.unlink()  # attempt 2 will wait at its start-up
    os.kill(launched.event.data["pid"], signal.SIGKILL)
    await client.until(is_event("trainer_launched", attempt=2))
    running.supervisor.request_stop("operator")  # while the resumed trainer starts up
    assert await running.result() == 0
    with Store(run.store, readonly=True) as store:
        report = endurance_report(run, store)
    assert (report.resumes, report.resumes_stepped, report.resumes_stopped) == (0, 0, 1)
    assert report.resume_success is None
    assert (
        dict(figure_rows(report))["resume success"]
        == "0/0 (-); 1 stopped on request during start-up, not counted"
    )
