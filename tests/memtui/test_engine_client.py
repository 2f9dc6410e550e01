"""EngineClient against the scripted transport (real protocol and framing, no supervisor)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import pytest

from engine.domain import RunStatus
from engine.run.directory import RunDir
from engine.wire.protocol import (
    PROTOCOL_VERSION,
    ClientMessage,
    Error,
    EventMessage,
    Ok,
    Ping,
    ServerMessage,
    Status,
    Telemetry,
)
from memtui.client import (
    EngineClient,
    EngineRefused,
    EngineUnavailable,
    new_request_id,
    request_once,
)
from tests.fakes.run_script import make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, answer_ok, telemetry, welcome_for
from tests.waiting import until


@pytest.fixture
def sock() -> AsyncIterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))
    yield path / "engine.sock"
    shutil.rmtree(path, ignore_errors=True)


class Inbox:
    def __init__(self) -> None:
        self.messages: list[ServerMessage] = []

    def __call__(self, message: ServerMessage) -> None:
        self.messages.append(message)

    @property
    def seqs(self) -> list[int]:
        return [m.event.seq for m in self.messages if isinstance(m, EventMessage)]


async def test_hello_welcome_replay_and_telemetry(sock: Path) -> None:
    events = [make_event(i) for i in (1, 2, 3)]
    stream = telemetry([make_sample(1), make_sample(2)])
    async with ScriptedEngine(sock, welcome_for("r1"), events=events, stream=stream) as fake:
        inbox, states = Inbox(), []
        client = EngineClient(sock, on_message=inbox, on_state=states.append, clock=lambda: 42.0)
        task = asyncio.create_task(client.run())
        await until(
            lambda: inbox.seqs == [1, 2, 3] and sum(isinstance(m, Telemetry) for m in inbox.messages) == 2
        )
        hello = fake.hellos[0]
        assert (hello.protocol, hello.role, hello.replay_from, hello.telemetry) == (
            PROTOCOL_VERSION,
            "console",
            0,
            True,
        )
        assert hello.client.startswith("memtui ")
        assert client.welcome is not None and client.welcome.run_id == "r1"
        assert states[:2] == ["connecting", "connected"] and client.state == "connected"
        assert client.last_seq == 3 and client.newest_data_at == 42.0
        await client.close()
        await task
        assert client.state == "disconnected"


async def test_requests_are_matched_by_id_and_errors_raise(sock: Path) -> None:
    def reply(message: ClientMessage) -> list[ServerMessage]:
        if isinstance(message, Ping):
            return [Ok(id=message.id, result={"time": 1.0})]
        if message.kind == "stop":
            return [Error(id=message.id, reason="stopping is not allowed in this test")]
        return answer_ok(message)

    status = RunStatus(run_id="r", name="r", state="running", run_dir=str(sock.parent))
    async with ScriptedEngine(sock, welcome_for("r"), reply=reply, status=status) as fake:
        client = EngineClient(sock, telemetry=False)
        task = asyncio.create_task(client.run())
        ping, status = await asyncio.gather(client.ping(), client.status())
        assert set(ping.result) == {"time"} and status.result["state"] == "running"
        with pytest.raises(EngineRefused, match="not allowed") as info:
            await client.stop()
        assert info.value.request_id == fake.requests[-1].id
        assert [m.kind for m in fake.requests] == ["ping", "status", "stop"]
        assert len({m.id for m in fake.requests}) == 3
        await client.close()
        await task


async def test_reconnect_replays_from_last_seq_without_loss_or_duplicates(sock: Path) -> None:
    async with ScriptedEngine(sock, welcome_for("r"), events=[make_event(i) for i in range(1, 6)]) as fake:
        inbox = Inbox()
        client = EngineClient(sock, on_message=inbox, backoff_initial=0.05)
        task = asyncio.create_task(client.run())
        await until(lambda: inbox.seqs == [1, 2, 3, 4, 5])
        await fake.drop_connections()
        await until(lambda: client.state != "connected" or fake.clients == 0)
        for _ in range(3):  # happen while the console is away
            fake.add_event("note")
        await until(lambda: len(fake.hellos) == 2 and client.state == "connected")
        fake.add_event("note")
        fake.add_event("note")
        await until(lambda: len(inbox.seqs) >= 10, seen=lambda: inbox.seqs)
        await client.ping()  # answered after everything sent before it: no late duplicate to come
        assert inbox.seqs == list(range(1, 11))
        assert fake.hellos[1].replay_from == 5
        await client.close()
        await task


async def test_events_seen_but_never_stored_do_not_hide_the_next_supervisors(sock: Path) -> None:
    # The console saw events 6..8 from a supervisor that exited while its disk refused
    # writes: its store kept 1..5, and the next supervisor numbers on from 6.
    async with ScriptedEngine(sock, welcome_for("r"), events=[make_event(i) for i in range(1, 6)]) as fake:
        inbox = Inbox()
        client = EngineClient(sock, on_message=inbox, replay_from=8)
        task = asyncio.create_task(client.run())
        await until(lambda: client.state == "connected")
        fake.add_event("note")
        await until(lambda: inbox.seqs == [6], seen=lambda: inbox.seqs)
        assert fake.hellos[0].replay_from == 8 and client.last_seq == 6
        await client.close()
        await task


async def test_backoff_keeps_trying_until_the_supervisor_appears(sock: Path) -> None:
    inbox, states = Inbox(), []
    client = EngineClient(
        sock, on_message=inbox, on_state=states.append, backoff_initial=0.02, backoff_max=0.05
    )
    task = asyncio.create_task(client.run())
    await until(lambda: states.count("connecting") >= 2, what="a second attempt", seen=lambda: states)
    assert client.state != "connected"
    async with ScriptedEngine(sock, welcome_for("r"), events=[make_event(1)]):
        await until(lambda: inbox.seqs == [1])
        await client.close()
        await task


async def test_request_without_connection_is_unavailable(sock: Path) -> None:
    client = EngineClient(sock)
    with pytest.raises(EngineUnavailable):
        await client.connect()
    with pytest.raises(EngineUnavailable):
        await client.request(Ping(id=new_request_id()), timeout=0.05)


async def test_protocol_mismatch_is_a_clear_final_error(sock: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memtui.client

    monkeypatch.setattr(memtui.client, "PROTOCOL_VERSION", PROTOCOL_VERSION + 1)
    refused = Error(
        reason=f"protocol version mismatch: client speaks {PROTOCOL_VERSION + 1}, supervisor speaks"
    )
    async with ScriptedEngine(sock, refused):  # what the supervisor's check_hello answers
        client = EngineClient(sock)
        with pytest.raises(EngineRefused, match="protocol version mismatch"):
            await client.run()


async def test_messages_iterator_without_callback(sock: Path) -> None:
    async with (
        ScriptedEngine(sock, welcome_for("r"), events=[make_event(1), make_event(2)]),
        EngineClient(sock, telemetry=False) as client,
    ):
        reader = asyncio.create_task(client._pump())
        seen = []
        async for message in client.messages():
            seen.append(message.kind)
            if len(seen) == 3:
                break
        assert seen == ["welcome", "event", "event"]
        reader.cancel()


def test_request_once_is_synchronous(sock: Path) -> None:
    status = RunStatus(run_id="r9", name="r9", state="running", run_dir=str(sock.parent))
    with ScriptedEngine.in_thread(sock, welcome_for("r9"), status=status) as fake:
        ok = request_once(sock, Status(id=new_request_id()), timeout=30)  # ends when answered
        assert ok.result["run_id"] == "r9"
        assert fake.hellos[0].role == "cli" and fake.hellos[0].telemetry is False
        assert fake.hellos[0].replay_from is None
    with pytest.raises(EngineUnavailable):
        request_once(sock, Status(id=new_request_id()), timeout=1)


async def test_a_connection_dropped_while_a_request_waits_is_unavailable_not_a_crash(sock: Path) -> None:
    """A supervisor on its way out welcomes a ``memtui status`` and closes; the close is read
    between the request's wait for the connection and its write: EngineUnavailable (status
    then reads the store), never an AssertionError."""

    class DroppedOnWake(asyncio.Event):
        async def wait(self) -> Literal[True]:
            await super().wait()
            client._drop_connection()  # the pump reading the close, as the wait hands back
            return True

    async with ScriptedEngine(sock, welcome_for("r")):
        client = EngineClient(sock, role="cli", telemetry=False, replay_from=None)
        await client.connect()
        client._connected = DroppedOnWake()
        client._connected.set()
        with pytest.raises(EngineUnavailable, match="dropped"):
            await client.request(Status(id=new_request_id()), timeout=5.0)
        await client.close()


def test_a_request_waits_for_a_live_supervisors_socket_to_come_back(live_run: RunDir) -> None:
    """``engine.sock`` deleted under a live supervisor: it binds it again within seconds, and
    a one-shot request (``memtui stop``, ``approve``...) waits for it instead of saying
    "no supervisor". With no live supervisor it fails at once."""
    import threading

    from engine.wire.protocol import Ping
    from memtui.client import EngineUnavailable, request_once

    assert not live_run.socket.exists()
    back, done = threading.Event(), threading.Event()

    def serve_later() -> None:
        with ScriptedEngine.in_thread(live_run.socket, welcome_for(live_run.run_id)):
            back.set()
            done.wait(30)

    server = threading.Timer(0.5, serve_later)
    server.start()
    try:
        ok = request_once(live_run.socket, Ping(id="p1"), timeout=10.0)  # asked before it is back
        assert back.is_set() and ok.id == "p1"
    finally:
        done.set()
        server.join(30)

    live_run.pid_file.unlink()  # nobody serves the run now
    with pytest.raises(EngineUnavailable, match="no supervisor at"):
        request_once(live_run.socket, Ping(id="p2"), timeout=10.0)
