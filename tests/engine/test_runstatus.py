"""Status from disk when no supervisor answers."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from engine.domain import TelemetrySample
from engine.run.directory import RunDir
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _sample(step: int) -> TelemetrySample:
    return TelemetrySample(
        step=step,
        ts=time.time(),
        samples=8 * step,
        tokens=1024 * step,
        loss=float("nan"),
        lr=1e-3,
        step_time_s=0.1,
        tokens_per_s=1e4,
        model_tflops=0.25,
        mfu=0.125,
        micro_batch=4,
        grad_accum=2,
        loss_scale=512.0,
        mem_peak=99,
    )


def _write(run: RunDir, *, state: str, pid: int, steps: int = 0) -> None:
    with Store(run.store) as store:
        store.update_meta(
            state=state, supervisor_pid=pid, trainer_pid=pid + 1, attempt=1, started_at=123.0, restarts=0
        )
        store.append_event("run_started")
        for step in range(1, steps + 1):
            store.add_step(_sample(step))
    run.pid_file.write_text(f"{pid}\n")


@pytest.mark.slow
def test_running_run_without_its_supervisor_is_interrupted(run: RunDir) -> None:
    _write(run, state="running", pid=_dead_pid(), steps=3)
    status = offline_status(run)
    assert status.state == "interrupted" and "supervisor gone while running" in (status.exit_reason or "")
    assert status.step == 3 and status.micro_batch == 4 and status.grad_accum == 2 and status.mem_peak == 99
    assert status.mfu == 0.125 and status.model_tflops == 0.25  # stored per step, read back
    assert status.loss != status.loss  # NaN as recorded
    assert status.supervisor_pid is None and status.trainer_pid is None
    assert status.last_seq == 1 and status.started_at == 123.0 and status.name == "demo"
    assert status.target_steps == 100


@pytest.mark.slow
def test_ended_run_keeps_its_state(run: RunDir) -> None:
    _write(run, state="completed", pid=_dead_pid())
    assert offline_status(run).state == "completed"


def test_live_supervisor_state_is_reported(run: RunDir) -> None:
    _write(run, state="running", pid=os.getpid(), steps=1)
    status = offline_status(run)
    assert status.state == "running" and status.supervisor_pid == os.getpid()


def test_no_store_yet(run: RunDir) -> None:
    assert offline_status(run).state == "interrupted"  # nobody serves it
    run.pid_file.write_text(f"{os.getpid()}\n")
    status = offline_status(run)
    assert status.state == "starting" and status.step == 0 and status.last_seq == 0


def test_damaged_store_does_not_raise(run: RunDir) -> None:
    run.store.write_bytes(b"this is not sqlite" * 100)
    status = offline_status(run)
    assert status.state == "interrupted" and "store unreadable" in (status.exit_reason or "")


def test_damaged_run_json_still_lists(run: RunDir) -> None:
    run.config_file.write_text("{oops")
    status = offline_status(run)
    assert status.run_id == run.run_id and status.name == run.run_id and status.target_steps == 0


@pytest.mark.slow
def test_several_ranks_report_the_newest_rank_report_between_reports(run: RunDir) -> None:
    from engine.domain import RankMemory
    from memtui.status_report import render_status

    _write(run, state="completed", pid=_dead_pid())
    ranks = [
        RankMemory(rank=r, allocated=(r + 1) << 20, reserved=2 << 20, peak=3 << 20, capacity=1 << 30)
        for r in (0, 1)
    ]
    with Store(run.store) as store:
        for step in range(1, 13):  # a report on step 10 only, as with rank_report_every = 10
            two = _sample(step).model_copy(update={"world_size": 2, "ranks": ranks if step == 10 else None})
            store.add_step(two)
    status = offline_status(run)
    assert status.step == 12 and status.ranks == ranks and status.ranks_step == 10
    text = render_status(status, now=time.time())
    assert "rank 0       1.00 MiB allocated" in text and "rank 1       2.00 MiB allocated" in text
    assert "peak 3.00 MiB (step 10)" in text


@pytest.mark.slow
def test_one_rank_has_no_rank_rows(run: RunDir) -> None:
    _write(run, state="completed", pid=_dead_pid(), steps=3)
    status = offline_status(run)
    assert status.ranks is None and status.ranks_step is None


@pytest.mark.slow
def test_status_says_each_ranks_own_step_time_and_the_slowest(run: RunDir) -> None:
    from engine.domain import RankMemory
    from memtui.status_report import render_status

    _write(run, state="completed", pid=_dead_pid())
    ranks = [
        RankMemory(
            rank=r, allocated=1 << 20, reserved=2 << 20, peak=3 << 20, capacity=1 << 30, step_s=s, comm_s=c
        )
        for r, s, c in ((0, 0.25, 0.5), (1, 0.75, None))  # rank 1 from an older trainer: no comm_s
    ]
    with Store(run.store) as store:
        store.add_step(_sample(10).model_copy(update={"world_size": 2, "ranks": ranks}))
    status = offline_status(run)
    assert [r.step_s for r in status.ranks or []] == [0.25, 0.75]  # and so in status --json
    text = render_status(status, now=time.time())
    assert "peak 3.00 MiB, 0.250 s own step time, 0.500 s collective (step 10)" in text
    assert "peak 3.00 MiB, 0.750 s own step time (slowest) (step 10)" in text
