"""The supervisor in-process, with the torch-free fake trainer as its child."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.domain import RunStatus, TelemetrySample
from engine.run.directory import RunDir
from engine.run.meta import RunMeta
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store
from engine.supervisor.channel import peer
from engine.supervisor.channel.console_outbox import ConsoleClient
from engine.supervisor.daemon import Supervisor
from engine.supervisor.trainers import trainer_process
from engine.supervisor.trainers.trainer_process import TrainerExit, ending
from engine.wire.protocol import (
    MAX_LINE_BYTES,
    Error,
    Hello,
    Pause,
    Ping,
    Replay,
    Status,
    StepReport,
    Stop,
    TrainerEvent,
)
from tests.fakes.fake_trainer import NO_CONNECT_READY, as_message, started

pytestmark = pytest.mark.timeout(180)  # each wait ends when its condition holds


def kind(name: str) -> Any:
    return lambda m: m.kind == name


def event(type_: str) -> Any:
    return lambda m: m.kind == "event" and m.event.type == type_


def stored(run: RunDir) -> tuple[RunMeta, list[Any]]:
    with Store(run.store, readonly=True) as store:
        return store.read_meta(), store.events_since(0)


@pytest.mark.slow
async def test_console_gets_welcome_history_telemetry(run: RunDir, start, connect, fake_env) -> None:
    fake_env(rate_hz=200)  # far above TELEMETRY_HZ: telemetry must coalesce
    await start()
    client = await connect(replay_from=0)
    welcome = await client.recv()
    assert welcome.kind == "welcome" and welcome.run_id == run.run_id and welcome.protocol == 1
    first, before = await client.until(kind("telemetry"))
    types = [m.event.type for m in before if m.kind == "event"]
    assert types[:3] == ["run_started", "state_changed", "trainer_launched"]
    # Telemetry until one message stood for several samples: the samples it replaced are
    # counted, so consecutive messages are exactly coalesced + 1 steps apart (the rate is
    # bench/telemetry_rate.py's to measure).
    telemetry = [first]
    while len(telemetry) < 3 or not any(t.coalesced for t in telemetry[1:]):
        message, _ = await client.until(kind("telemetry"))
        telemetry.append(message)
    steps = [t.sample.step for t in telemetry]
    gaps = zip(steps, steps[1:], telemetry[1:], strict=False)
    assert all(b - a == t.coalesced + 1 for a, b, t in gaps), [
        (t.sample.step, t.coalesced) for t in telemetry
    ]
    assert telemetry[-1].state == "running"


@pytest.mark.slow
async def test_welcome_carries_the_runs_thresholds(run: RunDir, start, connect, fake_env) -> None:
    config = build_run_config(
        {"memory": {"warn": 0.6, "critical": 0.7}, "alerts": {"loss_scale_floor": 4.0}}, steps=100
    )
    run.write_config(config)
    await start()
    welcome = await (await connect()).recv()
    assert welcome.thresholds == config.thresholds()  # what consoles colour memory by
    assert (welcome.thresholds.memory_warn, welcome.thresholds.loss_scale_floor) == (0.6, 4.0)


@pytest.mark.slow
async def test_telemetry_off_sends_none(start, connect, fake_env) -> None:
    await start()
    client = await connect(telemetry=False)
    control = await connect()  # telemetry on: shows that telemetry went out meanwhile
    await client.recv()
    await control.recv()
    ok, seen = await client.answer(Ping(id="p1"))
    for _ in range(3):
        await control.until(kind("telemetry"))
    ok2, seen2 = await client.answer(Ping(id="p2"))
    assert ok.kind == ok2.kind == "ok"
    assert not [m for m in seen + seen2 if m.kind == "telemetry"]


@pytest.mark.slow
async def test_bad_input_gets_errors_while_others_stream(start, connect, fake_env, wait_until) -> None:
    await start()
    watcher = await connect()
    await watcher.recv()
    stuck = await connect(replay_from=0)  # never reads a byte: must not slow anyone down
    steps: list[int] = []

    async def watch() -> None:
        while True:
            message = await watcher.recv()
            if message is not None and message.kind == "telemetry":
                steps.append(message.sample.step)

    watching = asyncio.create_task(watch())
    try:
        await wait_until(lambda: steps, "the watcher's first telemetry")
        abuser = await connect()
        await abuser.recv()

        async def expect_error(line: bytes, reason: str, request_id: str | None = None) -> None:
            await abuser.send(line)
            error, _ = await abuser.until(kind("error"))
            assert reason in error.reason and error.id == request_id
            pong, _ = await abuser.answer(Ping(id="still-there"))  # the connection goes on
            assert pong.kind == "ok"

        await expect_error(b"x" * (MAX_LINE_BYTES + 10) + b"\n", "limit")
        await expect_error(b'{"kind": "ping", "id": \n', "malformed JSON")
        await expect_error(b'{"kind": "self_destruct", "id": "k"}\n', "unknown kind", "k")
        await expect_error(b'{"kind": "status", "id": 5}\n', "status: field 'id'")
        await expect_error(b'{"kind": "replay", "id": "r", "since": "yesterday"}\n', "since", "r")
        await expect_error(b'{"kind": "stop", "id": "s", "why": 1}\n', "unknown field", "s")
        await expect_error(b"[]\n", "JSON object")
        step_report = StepReport(sample=_fake_sample(1))
        await expect_error(step_report.model_dump_json().encode() + b"\n", "only from the trainer")
        await expect_error(
            TrainerEvent(type="trainer_finished").model_dump_json().encode() + b"\n", "only from"
        )
        await expect_error(Hello(protocol=1).model_dump_json().encode() + b"\n", "hello already")

        for first_line, reason in [
            (Hello(protocol=99).model_dump_json().encode() + b"\n", "version mismatch"),
            (b'{"kind": "ping", "id": "p"}\n', "expected hello"),
            (b"nonsense\n", "malformed JSON"),
            (b"y" * (MAX_LINE_BYTES + 1) + b"\n", "limit"),
        ]:
            bad = await connect(hello=False)
            await bad.send(first_line)
            error = await bad.recv()
            assert error.kind == "error" and reason in error.reason
            assert await bad.recv() is None  # a bad hello closes the connection

        at_abuse_end = len(steps)
        await wait_until(lambda: len(steps) > at_abuse_end + 1, "the watcher's telemetry after the abuse")
        assert steps == sorted(set(steps))
    finally:
        watching.cancel()
    assert stuck is not None


def _fake_sample(step: int) -> TelemetrySample:
    return TelemetrySample(
        step=step,
        ts=0.0,
        samples=step,
        tokens=step,
        loss=1.0,
        lr=1e-3,
        step_time_s=0.1,
        tokens_per_s=1.0,
        micro_batch=1,
        grad_accum=1,
    )


@pytest.mark.slow
async def test_status_matches_offline_status(run: RunDir, start, connect, fake_env) -> None:
    running = await start()
    client = await connect()
    await client.recv()
    await client.until(kind("telemetry"))
    ok, _ = await client.answer(Status(id="st"))
    status = RunStatus.model_validate(ok.result)
    assert status.state == "running" and status.step >= 1 and status.run_id == run.run_id
    assert status.supervisor_pid == os.getpid() and status.trainer_pid and status.attempt == 1
    assert status.target_steps == 100 and status.micro_batch == 8 and status.mem_kind == "cpu-rss"
    figures = status.throughput  # the run-wide tokens/s, from the store
    assert figures is not None and figures.attempt == 1 and figures.steps >= 1
    assert figures.run_avg_tokens_per_s
    sup = running.supervisor
    sup.store.flush()
    assert sup.status() == offline_status(run)


@pytest.mark.slow
async def test_replay_after_reconnect_is_exact(run: RunDir, start, connect, fake_env, wait_until) -> None:
    fake_env(rate_hz=200, event_every=1)  # an event per step: replay races live events
    running = await start()
    first = await connect(replay_from=0)
    await first.recv()
    _, seen = await first.until(lambda m: m.kind == "event" and m.event.seq >= 30)
    seqs = [m.event.seq for m in seen if m.kind == "event"]
    assert seqs == list(range(1, 30))
    await first.close()
    live = running.supervisor.store
    await wait_until(lambda: live.last_seq() > 45, "events while nobody listens")

    second = await connect(replay_from=29)
    welcome = await second.recv()
    assert welcome.last_seq > 30
    _, seen = await second.until(lambda m: m.kind == "event" and m.event.seq >= welcome.last_seq + 40)
    events = [m.event for m in seen if m.kind == "event"]
    assert [e.seq for e in events] == list(range(30, welcome.last_seq + 40))  # no gap, no duplicate
    with Store(run.store, readonly=True) as store:
        assert events[: welcome.last_seq - 29] == store.events_since(29, limit=welcome.last_seq - 29)

    # Replay on request: the asked-for events again, then the Ok. Live events already on
    # their way when the request arrived come first (all newer than what was read so far).
    newest_read = events[-1].seq
    ok, seen = await second.answer(Replay(id="again", since=10))
    replayed = [m.event.seq for m in seen if m.kind == "event"]
    count = ok.result["replayed"]
    assert ok.kind == "ok" and count >= 30
    start = replayed.index(11)
    assert all(seq > newest_read for seq in replayed[:start])  # in flight, none missed or repeated
    assert replayed[start : start + count] == list(range(11, 11 + count))
    # Live events recorded while the replay waited for the console to read (a loaded
    # machine: the outbox filled) were held and follow it, before the Ok, without a gap.
    held = replayed[start + count :]
    assert held == list(range(11 + count, 11 + count + len(held)))
    # Live events go on after it without a gap.
    _, after = await second.until(lambda m: m.kind == "event" and m.event.seq >= replayed[-1] + 20)
    live = [m.event.seq for m in after if m.kind == "event"]
    assert live == list(range(replayed[-1] + 1, replayed[-1] + 20))


@pytest.mark.slow
async def test_stop_ends_the_run_cleanly(run: RunDir, start, connect, fake_env) -> None:
    running = await start()
    mode = stat.S_IMODE(os.stat(run.socket).st_mode)
    assert mode == 0o600 and stat.S_IMODE(os.stat(run.path).st_mode) == 0o700
    assert run.pid_file.read_text().strip() == str(os.getpid())
    client = await connect()
    await client.recv()
    await client.until(kind("telemetry"))
    ok, before_ok = await client.answer(Stop(id="stop", reason="test over"))
    assert ok.result == {"state": "stopping"}
    ended, seen = await client.until(event("run_ended"))
    types = [m.event.type for m in before_ok + seen if m.kind == "event"]
    assert types.index("stop_requested") < types.index("trainer_finished") < types.index("trainer_exited")
    assert ended.event.data["state"] == "stopped"
    assert await running.result() == 0
    assert not run.socket.exists() and not run.pid_file.exists()
    meta, events = stored(run)
    assert meta.state == "stopped" and "test over" in (meta.exit_reason or "")
    assert meta.trainer_pid is None and meta.ended_at is not None and meta.attempt == 1
    assert events[-1].type == "run_ended" and [e.seq for e in events] == list(range(1, len(events) + 1))
    changes = [(e.data["from"], e.data["to"]) for e in events if e.type == "state_changed"]
    assert changes == [
        (None, "starting"),
        ("starting", "running"),
        ("running", "stopping"),
        ("stopping", "stopped"),
    ]
    status = offline_status(run)
    assert status.state == "stopped" and status.step >= 1


@pytest.mark.slow
async def test_pause_holds_the_trainer_then_it_goes_on_and_a_stop_still_works(
    run: RunDir, start, connect, fake_env
) -> None:
    fake_env(steps=100_000)
    running = await start()
    client = await connect()
    await client.until(kind("telemetry"))
    ok, _ = await client.answer(Pause(id="p1"))
    assert ok.kind == "ok" and ok.result["paused"] is True
    paused, _ = await client.until(event("run_paused"))
    await client.until(lambda m: m.kind == "event" and m.event.data.get("to") == "paused")
    held_at = paused.event.data["step"]
    status, _ = await client.answer(Status(id="s1"))  # the step it holds at is the newest one
    assert status.result["state"] == "paused" and status.result["step"] == held_at

    ok, _ = await client.answer(Pause(id="p2", paused=False))
    assert ok.result["paused"] is False
    await client.until(event("run_continued"))
    await client.until(lambda m: m.kind == "telemetry" and m.sample.step > held_at)
    went_on = running.supervisor.store.steps(since_step=held_at - 1)  # from the step it held at
    assert [s.step for s in went_on][:2] == [held_at, held_at + 1]

    await client.answer(Pause(id="p3"))
    await client.until(event("run_paused"))
    await client.answer(Stop(id="stop", reason="stopped while paused"))
    refused, _ = await client.answer(Pause(id="p4", paused=False))
    assert refused.kind == "error" and "stopping" in refused.reason
    ended, _ = await client.until(event("run_ended"))
    assert ended.event.data["state"] == "stopped" and await running.result() == 0
    _, events = stored(run)
    types = [e.type for e in events]
    assert types.count("pause_requested") == 2 and types.count("continue_requested") == 1
    changes = [(e.data["from"], e.data["to"]) for e in events if e.type == "state_changed"]
    assert ("running", "paused") in changes and ("paused", "running") in changes
    assert changes[-2:] == [("paused", "stopping"), ("stopping", "stopped")]


@pytest.mark.slow
async def test_a_run_whose_supervisor_died_while_paused_comes_back_paused(
    run: RunDir, start, connect, fake_env
) -> None:
    first = await start()
    client = await connect()
    await client.until(kind("telemetry"))
    await client.answer(Pause(id="p1"))
    await client.until(event("run_paused"))
    assert stored(run)[0].hold is True  # what a SIGKILLed supervisor leaves behind
    first.task.cancel()  # an in-process supervisor cannot be SIGKILLed: end it without a stop
    await asyncio.gather(first.task, return_exceptions=True)
    await client.close()

    await start()  # as memtui resume does
    client = await connect(replay_from=0)
    await client.until(event("pause_kept"))
    paused, _ = await client.until(event("run_paused"))  # the new trainer holds at once
    status, _ = await client.answer(Status(id="s1"))
    assert status.result["state"] == "paused" and status.result["step"] == paused.event.data["step"]
    await client.answer(Pause(id="p2", paused=False))
    await client.until(event("run_continued"))
    await client.until(lambda m: m.kind == "telemetry" and m.sample.step > paused.event.data["step"])
    assert stored(run)[0].hold is False
    await client.answer(Stop(id="stop", reason="done"))
    await client.until(event("run_ended"))


@pytest.mark.slow
async def test_trainer_exit_code_fails_the_run(run: RunDir, start, connect, fake_env) -> None:
    run.write_config(build_run_config(steps=100, restart={"max_restarts": 0}))  # restarts: test_recovery
    fake_env(steps=5, exit_code=3)
    running = await start()
    assert await running.result() == 0
    meta, events = stored(run)
    assert meta.state == "failed"
    assert meta.exit_reason == "trainer exited with code 3: fake trainer failing on purpose with code 3"
    exited = next(e for e in events if e.type == "trainer_exited")
    assert exited.data["returncode"] == 3 and exited.severity == "critical" and exited.attempt == 1
    assert events[-1].type == "run_ended" and events[-1].data["state"] == "failed"
    assert offline_status(run).state == "failed"


@pytest.mark.slow
async def test_trainer_reaching_its_steps_completes(run: RunDir, start, fake_env) -> None:
    fake_env(steps=5, nan_at=3)
    running = await start()
    assert await running.result() == 0
    meta, _ = stored(run)
    assert meta.state == "completed"
    with Store(run.store, readonly=True) as store:
        steps = store.steps()
    assert [s.step for s in steps] == [1, 2, 3, 4, 5]
    assert steps[2].loss != steps[2].loss  # NaN stored as NaN


@pytest.mark.slow
async def test_stuck_trainer_is_killed_after_the_grace(run: RunDir, start, connect, fake_env) -> None:
    fake_env(ignore_stop=1)
    running = await start(stop_grace_s=0.5)
    client = await connect()
    await client.recv()
    await client.until(kind("telemetry"))
    await client.answer(Stop(id="s"))
    assert await running.result() == 0
    meta, events = stored(run)
    assert meta.state == "stopped" and "SIGKILL" in (meta.exit_reason or "")
    assert next(e for e in events if e.type == "trainer_exited").data["signal"] == "SIGKILL"


def _catches_sigterm(pid: int | None) -> bool:
    """True once process ``pid`` has a SIGTERM handler (SigCgt in /proc/PID/status)."""
    if pid is None:
        return False
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.slow
async def test_silent_trainer_gets_sigterm(run: RunDir, start, fake_env, wait_until) -> None:
    fake_env(no_connect=1)
    running = await start()
    attempts = running.supervisor.attempts
    log = run.logs / "trainer-1.log"
    # The fake trainer says so in its log once its handler is in: a SIGTERM before that
    # would kill it outright, and SigCgt alone may still be a forked parent's handler.
    await wait_until(lambda: log.exists() and NO_CONNECT_READY in log.read_text(), "the trainer's word")
    await wait_until(lambda: _catches_sigterm(attempts.pid), "the trainer's SIGTERM handler")
    assert running.supervisor.request_stop("test") == "stopping"
    assert await running.result(timeout=120) == 0  # a loaded machine: it ends when it ends
    meta, _ = stored(run)
    assert meta.state == "stopped" and meta.exit_reason == "on request (test)"


@pytest.mark.slow
async def test_trainer_that_cannot_start_fails_the_run(run: RunDir, start) -> None:
    running = await start(trainer_cmd=[str(run.path / "no-such-trainer")])
    assert await running.result() == 0
    meta, events = stored(run)
    assert meta.state == "failed" and "could not launch the trainer" in (meta.exit_reason or "")
    assert any(e.type == "trainer_launch_failed" for e in events)


def _damage_restart(run: RunDir) -> None:
    doc = json.loads(run.config_file.read_text())
    doc["config"]["restart"]["max_restarts"] = "many"
    run.config_file.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda run: run.config_file.write_text("{oops"), "not valid JSON"),
        (_damage_restart, "restart.max_restarts"),
        (lambda run: run.config_file.unlink(), "No such file"),
    ],
)
async def test_an_unusable_run_json_fails_the_run_with_the_reason(run: RunDir, damage, named: str) -> None:
    damage(run)
    supervisor = Supervisor(run, [str(run.path / "never-launched")])
    assert await asyncio.wait_for(supervisor.serve(), 15) == 1
    meta, events = stored(run)
    assert meta.state == "failed" and "run config unusable" in (meta.exit_reason or "")
    assert named in (meta.exit_reason or "") and str(run.config_file) in (meta.exit_reason or "")
    assert [e.type for e in events] == ["run_started", "state_changed", "state_changed", "run_ended"]
    assert events[-1].severity == "critical" and named in events[-1].message
    assert not run.socket.exists() and not run.pid_file.exists()
    status = offline_status(run)
    assert status.state == "failed" and status.exit_reason == meta.exit_reason


@pytest.mark.slow
async def test_trainer_cannot_forge_supervisor_events(
    run: RunDir, start, connect, fake_env, wait_until
) -> None:
    fake_env(no_connect=1)
    running = await start()
    trainer = await connect(role="trainer")
    assert (await trainer.recv()).kind == "welcome"
    await trainer.send(TrainerEvent(type="run_ended", data={"state": "completed"}))
    error = await trainer.recv()
    assert error.kind == "error" and "supervisor's" in error.reason
    await trainer.send(Status(id="s"))
    assert "not a trainer message" in (await trainer.recv()).reason
    second = await connect(role="trainer")
    assert "already connected" in (await second.recv()).reason
    await trainer.send(TrainerEvent(type="trainer_started", data={"attempt": 1}))
    error = await trainer.recv()  # a known type's data must fit its payload
    assert error.kind == "error" and error.reason.startswith("trainer_started: data.pid: ")
    await trainer.send(as_message(started(1), "hi"))
    await wait_until(lambda: running.supervisor.state == "running", "the run to be running")


@pytest.mark.slow
async def test_foreign_uid_is_refused(run: RunDir, start, connect, fake_env) -> None:
    await start(owner_uid=os.getuid() + 4242)  # as if we were someone else
    client = await connect(hello=False)
    error = await client.recv()
    assert isinstance(error, Error) and "refused" in error.reason and "not the run's owner" in error.reason
    assert await client.recv() is None


def test_refusal_decision() -> None:
    me = peer.PeerCredentials(pid=1, uid=1000, gid=1000)
    assert peer.refusal(me, owner_uid=1000) is None
    assert "uid 1001" in (peer.refusal(peer.PeerCredentials(2, 1001, 1001), owner_uid=1000) or "")
    assert peer.refusal(None, owner_uid=1000) is None


def test_peer_credentials_of_a_real_socket() -> None:
    import socket

    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        creds = peer.peer_credentials(a)
    assert creds == peer.PeerCredentials(os.getpid(), os.getuid(), os.getgid())


class _StuckWriter:
    """A console that never reads: drain never returns."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.closed = False
        self.transport = self

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    async def drain(self) -> None:
        await asyncio.Event().wait()

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        await asyncio.Event().wait()

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def test_a_console_too_far_behind_is_dropped_with_a_reason(wait_until) -> None:
    from engine.domain import Event

    writer = _StuckWriter()
    client = ConsoleClient(writer, Hello(protocol=1), queue_max=8)  # type: ignore[arg-type]
    for seq in range(1, 30):  # the supervisor never waits for it
        client.push_event(Event(seq=seq, ts=0.0, type="tick"))
    await wait_until(lambda: client.closed and writer.closed, "the console to be dropped")
    assert b"too slow" in writer.lines[-1] and b"replay_from" in writer.lines[-1]


@pytest.mark.parametrize(
    ("outcome", "stop", "state", "reason"),
    [
        (TrainerExit(1, 0, "completed"), None, "completed", "target step"),
        (
            TrainerExit(1, 0, "stopped"),
            None,
            "stopped",
            "preempted: the trainer saved and stopped on SIGTERM",
        ),
        (TrainerExit(1, 0, None), "operator", "stopped", "on request (operator)"),
        (TrainerExit(1, -9, None), "operator", "stopped", "SIGKILL"),
        (TrainerExit(1, -9, None), None, "failed", "trainer killed by SIGKILL"),
        (TrainerExit(1, 1, None, "CUDA OOM"), None, "failed", "trainer exited with code 1: CUDA OOM"),
        (TrainerExit(1, 0, None), None, "failed", "without reporting trainer_finished"),
        (TrainerExit(1, None, launch_error="no such file"), None, "failed", "no such file"),
        (TrainerExit(1, None), "operator", "stopped", "before the trainer started"),
    ],
)
def test_ending(outcome: TrainerExit, stop: str | None, state: str, reason: str) -> None:
    got_state, got_reason = ending(outcome, stop)
    assert got_state == state and reason in got_reason


def test_trainer_command_from_env() -> None:
    assert trainer_process.default_trainer_command({}) == [sys.executable, "-m", "engine.trainer"]
    assert trainer_process.default_trainer_command({"MEMTUI_TRAINER_CMD": "python 'a b.py' -x"}) == [
        "python",
        "a b.py",
        "-x",
    ]


def test_several_ranks_run_under_torchrun_unless_a_command_is_given() -> None:
    two_ranks = trainer_process.Placement.of(build_run_config({"train": {"ranks": 2, "global_batch": 16}}))
    command = trainer_process.default_trainer_command({}, two_ranks)
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in command and "--max-restarts=0" in command  # we restart, not torchrun
    assert command[-2:] == ["-m", "engine.trainer"]
    assert trainer_process.default_trainer_command({"MEMTUI_TRAINER_CMD": "fake"}, two_ranks) == ["fake"]


@pytest.mark.slow
async def test_status_says_the_start_up_phase_until_the_first_step(
    run: RunDir, start, fake_env, wait_until
) -> None:
    gate = run.path / "gate"
    fake_env(phases="importing,building_op,initialising", gate=gate)
    running = await start()
    sup = running.supervisor
    await wait_until(
        lambda: sup.status().startup is not None and sup.status().startup.phase == "initialising",
        "initialising",
    )
    startup = sup.status().startup
    assert startup is not None and startup.label == "initialising DeepSpeed" and startup.attempt == 1
    _, events = stored(run)
    phases = [e for e in events if e.type == "startup_phase"]
    assert [e.data["phase"] for e in phases] == ["importing", "building_op", "initialising"]
    assert startup.since == phases[-1].ts
    assert (
        sup.alerts.rules._last_beat is not None and sup.alerts.rules._last_beat >= phases[-1].ts
    )  # heartbeat
    assert "building DeepSpeed op deepspeed_shm_comm (once per environment)" in phases[1].message
    gate.touch()
    await wait_until(lambda: sup.status().step > 0, "the first step")
    assert sup.status().startup is None
