"""Bad input at the supervisor's socket: answered, logged with the peer named, rate-limited;
hostile but valid messages cannot take it down; a burst of connections is queued, not refused."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

import pytest

from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.supervisor.channel import bad_input_log, connections
from engine.supervisor.channel.bad_input_log import FULL_LINES, BadInputLog, LogBudget
from engine.supervisor.channel.peer import PeerCredentials
from engine.wire.protocol import (
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    STREAM_LIMIT,
    Hello,
    Ping,
    StepReport,
    TrainerEvent,
    decode_server,
    encode,
    read_line,
)
from tests.engine.test_supervisor import _fake_sample, kind

pytestmark = pytest.mark.timeout(120)

LOGGER = bad_input_log.log.name
ME = f"pid {os.getpid()} uid {os.getuid()}"  # the peer, as the log names it (our own process)


def bad_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    return caplog


# ------------------------------------------------------------------- the log itself


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_lines_in_full_then_counts_then_a_summary(logged: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    bad = BadInputLog(PeerCredentials(pid=42, uid=7, gid=7), LogBudget(clock=clock), clock=clock)
    bad.role = "console"
    for i in range(10_000):
        bad.note(f"malformed JSON #{i}")
        clock.now += 0.01  # 100 s in all: one count line after COUNT_INTERVAL_S
    bad.close()
    lines = bad_lines(logged)
    assert lines[:FULL_LINES] == [
        f"bad input from pid 42 uid 7 (console): malformed JSON #{i}" for i in range(5)
    ]
    assert "counted from now on" in lines[FULL_LINES]
    counts = [line for line in lines if "suppressed" in line]
    assert len(counts) == 1 and "pid 42" in counts[0]
    assert lines[-1] == (
        "connection from pid 42 uid 7 (console) closed after 10000 bad inputs, 9995 not shown; "
        "latest: malformed JSON #9999"
    )
    assert len(lines) == FULL_LINES + 3


def test_a_connection_with_few_bad_lines_logs_each_once(logged: pytest.LogCaptureFixture) -> None:
    bad = BadInputLog(None, LogBudget())
    bad.note("x" * 100_000)
    bad.close()
    assert bad_lines(logged) == [f"bad input from a peer of unknown pid (before hello): {'x' * 300}"]


def test_the_budget_caps_all_connections_together(logged: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    budget = LogBudget(per_s=1.0, burst=20, clock=clock)
    for pid in range(1000):  # a storm of connections, one bad line each
        BadInputLog(PeerCredentials(pid, 7, 7), budget, clock=clock).note("nonsense")
    assert len(bad_lines(logged)) == 20 and budget.dropped == 980
    clock.now += 1.0
    BadInputLog(PeerCredentials(1, 7, 7), budget, clock=clock).note("later")
    assert bad_lines(logged)[-2:] == [
        "980 lines about bad input were not logged (over 1 lines/s)",
        "bad input from pid 1 uid 7 (before hello): later",
    ]


# ------------------------------------------------------------------ the live socket


@pytest.mark.slow
async def test_a_bad_line_is_logged_once_with_the_peer_named(
    start, connect, fake_env, logged: pytest.LogCaptureFixture
) -> None:
    await start()
    client = await connect(telemetry=False)
    assert (await client.recv()).kind == "welcome"
    await client.send(b'{"kind": "ping", "id": \n')
    error, _ = await client.until(kind("error"))
    assert "malformed JSON" in error.reason
    pong, _ = await client.answer(Ping(id="p"))  # answered in order: the bad line was handled before
    assert pong.kind == "ok"
    lines = bad_lines(logged)
    assert lines == [f"bad input from {ME} (console): {error.reason}"]


def _line(message: Any) -> bytes:
    return encode(message)


@pytest.mark.slow
async def test_a_line_of_max_line_bytes_with_its_newline_is_read_and_one_more_refused(
    start, connect, fake_env
) -> None:
    await start()
    client = await connect(telemetry=False)
    assert (await client.recv()).kind == "welcome"
    for request_id, size in (("exact", MAX_LINE_BYTES), ("over", MAX_LINE_BYTES + 1), ("after", 100)):
        body = b'{"kind": "ping", "id": "%s"}' % request_id.encode()
        await client.send(body + b" " * (size - len(body) - 1) + b"\n")  # spaces: still one ping
    answers = []
    while len(answers) < 3:
        message = await client.recv()
        if message.kind in ("ok", "error"):
            answers.append((message.kind, message.id, getattr(message, "reason", "")))
    assert answers == [
        ("ok", "exact", ""),
        ("error", None, f"line exceeds the {MAX_LINE_BYTES}-byte limit"),
        ("ok", "after", ""),
    ]


@pytest.mark.parametrize(
    ("hello", "line", "reason"),
    [
        (False, b"nonsense\n", "(before hello): malformed JSON"),
        (False, b"z" * (MAX_LINE_BYTES + 1) + b"\n", "(before hello): line exceeds"),
        (False, b'{"kind": "hello", "protocol": true}\n', "(before hello): hello: field 'protocol'"),
        (False, b'{"kind": "ping", "id": "p"}\n', "(before hello): expected hello first, got 'ping'"),
        (False, _line(Hello(protocol=PROTOCOL_VERSION + 1)), "(before hello): protocol version mismatch"),
        (False, b"", "(before hello): closed the connection without a hello"),
        (True, b'{"kind": "launch", "id": "k"}\n', "(console): unknown kind 'launch'"),
        (
            True,
            _line(StepReport(sample=_fake_sample(1))),
            "(console): 'step' is accepted only from the trainer",
        ),
        (True, _line(Hello(protocol=PROTOCOL_VERSION)), "(console): hello already received"),
    ],
    ids=[
        "malformed",
        "oversized",
        "bool-version",
        "not-hello",
        "version",
        "no-hello",
        "unknown-kind",
        "trainer-msg",
        "hello-again",
    ],
)
@pytest.mark.slow
async def test_each_kind_of_bad_input_is_logged(
    start,
    connect,
    fake_env,
    logged: pytest.LogCaptureFixture,
    wait_until,
    hello: bool,
    line: bytes,
    reason: str,
) -> None:
    await start()
    client = await connect(hello=hello, telemetry=False)
    if hello:
        assert (await client.recv()).kind == "welcome"
    if line:
        await client.send(line)
        answer = await client.recv()
        while answer.kind in ("event", "telemetry", "hardware"):  # the run's own news may come first
            answer = await client.recv()
        assert answer.kind == "error", answer
    else:
        await client.close()
    lines = await wait_until(lambda: bad_lines(logged), "the bad input in the log")
    assert len(lines) == 1 and lines[0].startswith(f"bad input from {ME} {reason}"), lines


@pytest.mark.slow
async def test_a_console_that_never_says_hello_is_logged(
    start, connect, fake_env, logged: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "HELLO_TIMEOUT_S", 0.2)
    await start()
    silent = await connect(hello=False)
    error = await silent.recv()
    assert error.kind == "error" and "no hello" in error.reason
    assert bad_lines(logged) == [f"bad input from {ME} (before hello): no hello within 0 s"]


@pytest.mark.slow
async def test_the_trainers_bad_input_is_logged(
    run: RunDir, start, connect, fake_env, logged: pytest.LogCaptureFixture
) -> None:
    fake_env(no_connect=1)
    await start()
    trainer = await connect(role="trainer")
    assert (await trainer.recv()).kind == "welcome"
    await trainer.send(TrainerEvent(type="run_ended", data={"state": "completed"}))
    assert "supervisor's" in (await trainer.recv()).reason
    impostor = await connect(role="trainer")
    assert "already connected" in (await impostor.recv()).reason
    assert bad_lines(logged) == [
        f"bad input from {ME} (trainer): event type 'run_ended' is the supervisor's to record",
        f"bad input from {ME} (trainer): a trainer is already connected (pid {os.getpid()})",
    ]


@pytest.mark.slow
async def test_a_flood_of_bad_lines_costs_a_bounded_log(
    start, connect, fake_env, logged: pytest.LogCaptureFixture, wait_until
) -> None:
    flood, batch = 10_000, 500  # in batches: a console that does not read its errors is dropped
    await start()
    client = await connect(telemetry=False)
    assert (await client.recv()).kind == "welcome"
    errors = 0
    for start_at in range(0, flood, batch):
        await client.send(b"".join(b"bad line %d\n" % i for i in range(start_at, start_at + batch)))
        while errors < start_at + batch:  # live events come too
            message = await client.recv()
            errors += message.kind == "error"
    pong, _ = await client.answer(Ping(id="still-there"))
    assert errors == flood and pong.kind == "ok"
    await client.close()
    summary = await wait_until(
        lambda: [line for line in bad_lines(logged) if "closed after" in line], "the connection's summary"
    )
    assert f"closed after {flood} bad inputs, {flood - FULL_LINES} not shown" in summary[0]
    assert ME in summary[0]
    assert len(bad_lines(logged)) <= FULL_LINES + 4  # full lines, "counted", a count or two, summary


@pytest.mark.slow
async def test_hostile_but_valid_trainer_messages_do_not_take_the_supervisor_down(
    run: RunDir, start, connect, fake_env, wait_until
) -> None:
    fake_env(no_connect=1)
    running = await start()
    trainer = await connect(role="trainer")
    assert (await trainer.recv()).kind == "welcome"
    edge = 2**63 - 1
    absurd = _fake_sample(edge).model_copy(
        update=dict(
            ts=float("inf"), loss=float("nan"), lr=-1e308, tokens_per_s=1e308, mem_peak=edge, samples=edge
        )
    )
    await trainer.send(StepReport(sample=absurd))
    deep: Any = 0
    for _ in range(60):
        deep = [deep]
    data = {"deep": deep, "nan": float("nan"), "big": edge, "text": "\u2028\U0001f600" * 1000, "": {"": None}}
    await trainer.send(TrainerEvent(type="fake.hostile", message="m" * 4096, data=data))
    await trainer.send(b'{"kind": "trainer_event", "type": "fake.dup", "data": {"a": 1, "a": 2}}\n')
    console = await connect(replay_from=0, telemetry=False)
    assert (await console.recv()).kind == "welcome"
    replayed, _ = await console.until(lambda m: m.kind == "event" and m.event.type == "fake.dup")
    assert replayed.event.data == {"a": 2}
    pong, _ = await console.answer(Ping(id="alive"))
    assert pong.kind == "ok" and not running.task.done()
    with Store(run.store, readonly=True) as store:
        types = [e.type for e in store.events_since(0)]
    assert "fake.hostile" in types


# ------------------------------------------------------------------ the listen backlog

BURST = 300  # connections at once, none accepted before the last has connected


@pytest.mark.slow
async def test_a_burst_of_connections_is_queued_not_refused(run: RunDir, start, fake_env) -> None:
    if connections.listen_backlog() < BURST:
        pytest.skip(f"this system queues at most {connections.listen_backlog()} pending connections")
    await start()
    socks: list[socket.socket] = []
    try:
        for i in range(BURST):  # no await in here: the server cannot accept any of them yet
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setblocking(False)
            try:
                sock.connect(str(run.socket))
            except BlockingIOError:
                pytest.fail(f"connection {i + 1} of {BURST} refused: the listen backlog is full")

        async def hello(sock: socket.socket) -> Any:
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=STREAM_LIMIT)
            writer.write(encode(Hello(protocol=PROTOCOL_VERSION, role="cli", telemetry=False)))
            await writer.drain()
            line = await asyncio.wait_for(read_line(reader), 60)
            writer.close()
            return None if line is None else decode_server(line)

        answers = await asyncio.gather(*(hello(sock) for sock in socks))
    finally:
        for sock in socks:
            sock.close()
    assert [a.kind if a else None for a in answers] == ["welcome"] * BURST
