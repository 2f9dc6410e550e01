"""Two data-parallel ranks under torchrun, through the real supervisor and store.

``train.ranks = 2`` makes the supervisor start ``torch.distributed.run --nproc-per-node=2``;
rank 0 talks to the supervisor and the ranks agree at every step boundary. Checked from
telemetry.sqlite and the checkpoint directory:

- memory pressure on rank 1 alone (ballast) shrinks the micro-batch of *both* ranks at the
  same step and grows it back (a geometry on one rank only would hang the all-reduce), the
  global batch kept at every step;
- every rank's memory arrives every ``rank_report_every`` steps, rank 1's showing its ballast;
- a ZeRO-1 checkpoint holds both ranks' optimizer shards and verifies;
- after a SIGKILL of the whole group the supervisor restarts both ranks from that checkpoint;
- an OOM on one rank restarts the group from the checkpoint at a smaller micro-batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from trainer_harness import REPO_ROOT, make_run, wait_while_alive

from engine.checkpoints.catalog import committed_tags
from engine.checkpoints.manifest import verify_tag
from engine.domain import Event
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.trainer.memory.ballast import BALLAST_ENV, BALLAST_RANK_ENV
from engine.trainer.memory.oom_injection import INJECT_OOM_ENV, INJECT_OOM_RANK_ENV

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e]

GIB = 1 << 30
TWO_RANKS = {"ranks": 2, "zero_stage": 1, "micro_batch": 8, "global_batch": 16, "warmup_steps": 5}


def restartable_run(steps: int) -> RunDir:
    """Two ranks, a checkpoint every 10 steps, restarts after 0.1 s."""
    raw = {"name": "ranks", "steps": steps, "checkpoint": {"every_steps": 10}, "train": TWO_RANKS}
    return make_run({**raw, "restart": {"backoff_initial_s": 0.1}})


def supervise(run: RunDir, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "supervise", os.fspath(run.path)],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def logs(run: RunDir, proc: subprocess.Popen[str]) -> str:
    out = proc.stdout.read() if proc.stdout and proc.poll() is not None else ""
    return out + "".join(p.read_text() for p in sorted(run.logs.glob("trainer-*.log")))


def test_pressure_on_one_rank_adapts_both_and_every_rank_reports() -> None:
    run = make_run(
        {
            "name": "ranks",
            "steps": 40,
            "checkpoint": {"every_steps": 40},
            "train": {**TWO_RANKS, "rank_report_every": 5},
            # throughput_margin 0.99: these runs test pressure, not the choice by measured speed;
            # on a loaded machine a smaller size can time faster and keep the group below 8.
            "memory": {"budget": GIB, "steady_steps": 3, "cooldown_steps": 4, "throughput_margin": 0.99},
        }
    )
    proc = supervise(run, {BALLAST_ENV: "10:768M,20:0", BALLAST_RANK_ENV: "1"})
    returncode = proc.wait(timeout=300)
    assert returncode == 0, logs(run, proc)
    with Store(run.store, readonly=True) as store:
        steps = store.steps()
        state = store.read_meta().state
        exits = [e.data["returncode"] for e in store.events_since(0) if e.type == "trainer_exited"]
    assert state == "completed", logs(run, proc)
    assert exits == [0], logs(run, proc)  # both ranks ended cleanly: no abort in the teardown
    assert [s.step for s in steps] == list(range(1, 41))
    assert all(s.attempt == 1 and s.world_size == 2 for s in steps)
    assert all(s.micro_batch * s.grad_accum * 2 == 16 and s.samples == 16 * s.step for s in steps)

    micro = [s.micro_batch for s in steps]  # micro[i] ran step i (0-based)
    assert micro[:10] == [8] * 10 and 1 in micro[10:20]  # rank 1's pressure shrank the group
    assert micro[-1] == 8 and max(micro) == 8

    reported = {s.step: s.ranks for s in steps if s.ranks is not None}
    assert sorted(reported) == list(range(5, 41, 5))
    assert all([r.rank for r in ranks] == [0, 1] for ranks in reported.values())
    rank0, rank1 = reported[15]  # after step 15: the ballast (steps 10..19) sits on rank 1 alone
    assert rank1.allocated - rank0.allocated > 600 << 20
    assert abs(reported[30][1].allocated - reported[30][0].allocated) < 300 << 20  # released

    ((step, tag),) = committed_tags(run.checkpoints)
    files = {p.name for p in (run.checkpoints / tag).iterdir()}
    assert step == 40 and {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)} <= files
    verdict = verify_tag(run.checkpoints / tag, step, "full")
    assert verdict.ok and verdict.manifest is not None and verdict.manifest.world_size == 2


def test_a_killed_group_restarts_both_ranks_from_the_checkpoint() -> None:
    run = restartable_run(steps=200)
    proc = supervise(run)
    try:
        wait_while_alive(
            proc,
            lambda: any(step >= 20 for step, _ in committed_tags(run.checkpoints)),
            what="checkpoint 20",
            seen=lambda: logs(run, proc),
        )
        with Store(run.store, readonly=True) as store:
            pid = store.read_meta().trainer_pid  # torchrun, leader of the ranks' process group
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        returncode = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert returncode == 0, logs(run, proc)
    with Store(run.store, readonly=True) as store:
        steps = store.steps()
        loaded = [e for e in store.events_since(0) if e.type == "checkpoint_loaded"]
    assert {s.attempt for s in steps} == {1, 2}
    resumed_at = loaded[-1].data["step"]
    assert resumed_at >= 20 and resumed_at % 10 == 0
    second = [s.step for s in steps if s.attempt == 2]
    assert second == list(range(resumed_at + 1, 201))  # both ranks went on from the checkpoint
    assert all(s.samples == 16 * s.step for s in steps)


def test_data_is_sharded_without_overlap() -> None:
    from engine.trainer.workloads.sample_window import for_rank

    drawn: list[tuple[int, int]] = []

    def batch(step: int, micro: int, micro_batch: int) -> tuple[()]:
        drawn.append((step, micro))
        return ()

    for rank in (0, 1, 2):
        shard = for_rank(batch, rank, 3)
        for micro in range(4):
            shard(7, micro, 2)
    assert sorted(drawn) == [(7, m) for m in range(12)]  # each global micro index exactly once
    assert for_rank(batch, 0, 1) is batch


def test_an_oom_on_one_rank_restarts_the_group_with_a_smaller_micro_batch() -> None:
    """docs/deepspeed.md: an OOM on one rank mid-collective leaves the others waiting; the
    group restart from the newest checkpoint, with the smaller micro-batch, is the answer."""
    run = restartable_run(steps=24)
    proc = supervise(run, {INJECT_OOM_ENV: "14:0:backward:8", INJECT_OOM_RANK_ENV: "1"})
    returncode = proc.wait(timeout=300)
    assert returncode == 0, logs(run, proc)
    with Store(run.store, readonly=True) as store:
        steps = store.steps()
        restarted = [e for e in store.events_since(0) if e.type == "trainer_restarted"]
        exited = [e for e in store.events_since(0) if e.type == "trainer_exited"]
        state = store.read_meta().state
    assert state == "completed" and len(restarted) == 1, logs(run, proc)
    error = exited[0].data["error"]  # rank 1's word, via memory.json; steps numbered as telemetry
    assert "OOM at rank 1 of 2 in step 15" in error and "backward of step 15 " in error, error
    assert restarted[0].data["candidate_step"] == 10
    first = [s for s in steps if s.attempt == 1]
    second = [s for s in steps if s.attempt == 2]
    assert [s.step for s in first] == list(range(1, 15)) and {s.micro_batch for s in first} == {8}
    assert [s.step for s in second] == list(range(11, 25))  # from the checkpoint, nothing skipped
    assert {(s.micro_batch, s.grad_accum) for s in second} == {(4, 2)}  # memory.json's geometry
    assert all(s.samples == 16 * s.step for s in steps)


def test_a_pause_holds_both_ranks_and_they_go_on_together() -> None:
    """Rank 0 hears the pause; the agreement holds rank 1 at the same boundary."""
    from engine.wire.protocol import Pause
    from memtui.client import request_once

    run = make_run(
        {
            "name": "ranks",
            "steps": 100_000,
            "checkpoint": {"every_steps": 0},
            "train": TWO_RANKS,
            "alerts": {"doctor_interval_s": 0.5},  # a clock the test can read: a stored report each 0.5 s
        }
    )
    proc = supervise(run)
    try:
        wait_for_step(run, proc, 5)
        request_once(run.socket, Pause(id="hold"))
        paused = wait_for_event(run, proc, "run_paused")
        held = paused.data["step"]  # the trainer's word: steps done when it stopped at the boundary
        # While the supervisor files three doctor reports (over a second: ~25 steps when
        # running), the store gets no step.
        wait_while_alive(
            proc,
            lambda: len([e for e in events(run) if e.type == "doctor_report" and e.seq > paused.seq]) >= 3,
            what="three doctor reports during the pause",
            seen=lambda: [e.type for e in events(run)][-10:],
        )
        assert latest_step(run) == held and state(run) == "paused"
        request_once(run.socket, Pause(id="go", paused=False))
        wait_for_step(run, proc, held + 5)
        assert state(run) == "running"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the supervisor stops the run: final checkpoint
            proc.wait(timeout=120)
    with Store(run.store, readonly=True) as store:
        steps = [s.step for s in store.steps()]
        continued = [e for e in store.events_since(0) if e.type == "run_continued"]
    assert steps == list(range(1, len(steps) + 1))  # nothing skipped or repeated across the pause
    assert continued and continued[0].data["step"] == held
    assert continued[0].data["paused_s"] > 0


def latest_step(run: RunDir) -> int:
    if not run.store.exists():  # the supervisor is still starting
        return 0
    with Store(run.store, readonly=True) as store:
        sample = store.latest_step()
    return sample.step if sample else 0


def state(run: RunDir) -> str | None:
    with Store(run.store, readonly=True) as store:
        return store.read_meta().state


def events(run: RunDir) -> list[Event]:
    if not run.store.exists():  # the supervisor is still starting
        return []
    with Store(run.store, readonly=True) as store:
        return store.events_since(0)


def wait_for_step(run: RunDir, proc: subprocess.Popen[str], step: int) -> None:
    wait_while_alive(
        proc, lambda: latest_step(run) >= step, what=f"step {step}", seen=lambda: logs(run, proc)
    )


def wait_for_event(run: RunDir, proc: subprocess.Popen[str], type_: str) -> Event:
    """The first stored event of type ``type_``, once there is one."""
    wait_while_alive(
        proc,
        lambda: any(e.type == type_ for e in events(run)),
        what=f"a {type_} event",
        seen=lambda: logs(run, proc),
    )
    return next(e for e in events(run) if e.type == type_)
