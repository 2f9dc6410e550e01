"""A scripted fake supervisor that speaks the real wire protocol.

Like httpx's mock transport: the console and CLI are tested against it without torch or a real
engine. It serves a Unix socket with ``engine.protocol`` framing and answers as the real
supervisor does (``tests/test_engine_contract.py`` runs the same conversations against both):
``Hello`` with a ``Welcome`` (the run's ``thresholds``) and a replay of its events after
``replay_from``; Status, Ping, Replay, Stop, Pause, Chaos and the directive requests with an
``Ok`` or an ``Error`` naming the reason; a malformed line, an unknown kind or a trainer's
message with an ``Error`` while the conversation goes on; a bad first line with an ``Error``
and the end of the connection. What the requests do to the run is played by
``FakeLifecycle`` (stop, pause, a kill's restart) and ``FakeDirectives`` (propose, approve,
clamp, reject, the trainer's echo), each event built from its ``engine.events`` payload.

It streams scripted telemetry to each telemetry client at ``telemetry_hz`` (every sample,
``coalesced=0``; a held trainer sends none) and records every message it received so tests can
assert on them. ``ranks=2`` plays a two-rank run: every sample says ``world_size=2`` and every
``rank_report_every``-th step carries both ranks' memory (``RankMemory``). ``thresholds`` are
the levels its Welcome carries (default: the run config's defaults; None: a supervisor that
sends none). ``refuse`` answers a request kind with a scripted Error. Unlike the real
supervisor, which closes its connections once its consoles have the final events, the fake
goes on serving after its run ended (the contract test holds the real one open likewise)::

    async with FakeEngine(sock, events=[...], telemetry=[...]) as engine:
        ...
        assert [m.kind for m in engine.requests] == ["status"]

``chaos`` names the chaos kinds its Welcome advertises and it accepts (default: every kind, as
the real supervisor); a subset lets a console be tested against an engine that offers less.
``FakeEngine.in_thread(...)`` runs one on its own loop for synchronous callers (the CLI).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.chaos.table import KINDS, chaos_specs
from engine.config import RunConfig
from engine.domain import (
    TERMINAL_STATES,
    Event,
    RunState,
    RunStatus,
    Severity,
    StartupStatus,
    TelemetrySample,
    Thresholds,
)
from engine.events import Payload, PhaseName, StartupPhase
from engine.hardware_report import HardwareSnapshot
from engine.protocol import (
    STREAM_LIMIT,
    Approve,
    Chaos,
    Clamp,
    ClientMessage,
    DirectiveView,
    Error,
    EventMessage,
    Hardware,
    Hello,
    Ok,
    Pause,
    Ping,
    Propose,
    ProtocolError,
    Reject,
    Replay,
    Status,
    Stop,
    Telemetry,
    Welcome,
    check_hello,
    decode_client,
    encode,
    read_line,
)

from .fake_directives import FakeDirectives
from .fake_lifecycle import FakeLifecycle
from .run_script import (  # noqa: F401  (the builders tests import from here)
    doctor_data,
    make_directive,
    make_event,
    make_ranks,
    make_sample,
    started_history,
)

RUN_DEFAULTS = RunConfig()
"""The config a fake run plays: its thresholds, policy bounds and limits are the defaults."""
DEFAULT_THRESHOLDS = RUN_DEFAULTS.thresholds()


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.hello: Hello | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def send(self, message: BaseModel) -> None:
        if not self.writer.is_closing():
            self.writer.write(encode(message))


class FakeEngine:
    """A scripted supervisor on ``socket_path``."""

    def __init__(
        self,
        socket_path: Path | str,
        *,
        run_id: str = "fake-run",
        state: RunState = "running",
        events: Sequence[Event] = (),
        telemetry: Sequence[TelemetrySample] = (),
        telemetry_hz: float = 50.0,
        status: RunStatus | None = None,
        refuse: dict[str, str] | None = None,
        stop_after_s: float = 0.05,
        pause_after_s: float = 0.02,
        restart_after_s: float = 0.05,
        apply_after_s: float = 0.02,
        hardware: HardwareSnapshot | None = None,
        ranks: int = 1,
        rank_report_every: int = 4,
        thresholds: Thresholds | None = DEFAULT_THRESHOLDS,
        chaos: Sequence[str] | None = None,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.run_id = run_id
        self.events: list[Event] = list(events)
        """The store: every event ever, in seq order."""
        self.telemetry = list(telemetry)
        self.telemetry_hz = telemetry_hz
        self.status = status or RunStatus(
            run_id=run_id, name="fake", state=state, run_dir=str(self.socket_path.parent)
        )
        self.refuse = dict(refuse or {})
        """kind -> reason: answer that request kind with an Error."""
        self.apply_after_s = apply_after_s
        """Seconds from an admitted directive to the trainer's echo (its step boundary)."""
        self.hardware = hardware
        """The newest hardware reading: sent to each telemetry client on joining."""
        self.ranks = ranks
        """Ranks the run plays: above one, samples carry world_size and rank reports."""
        self.rank_report_every = rank_report_every
        """Steps between two rank reports (steps divisible by it carry one)."""
        self.thresholds = thresholds
        """The run's levels sent in each Welcome; None plays a supervisor that sends none."""
        self.chaos = list(KINDS) if chaos is None else list(chaos)
        """The chaos kinds each Welcome advertises (``chaos_specs`` of them, in menu order)."""
        self.requests: list[ClientMessage] = []
        """Every message received after a Hello, in arrival order."""
        self.hellos: list[Hello] = []
        self.step = 0
        """The newest step sent (a pause holds after it)."""
        self.lifecycle = FakeLifecycle(
            self.record,
            state,
            run_dir=str(self.socket_path.parent),
            step=lambda: self.step,
            stop_after_s=stop_after_s,
            pause_after_s=pause_after_s,
            restart_after_s=restart_after_s,
            performs=self.chaos,
        )
        self._directives = FakeDirectives(self.record, RUN_DEFAULTS)
        self.lifecycle.on_ending = self._directives.end_run
        self._startup: StartupStatus | None = None
        """The phase the trainer said last (``enter_phase``), until the next telemetry."""
        self._connections: list[_Connection] = []
        self._server: asyncio.AbstractServer | None = None

    @property
    def state(self) -> RunState:
        return self.lifecycle.state

    @property
    def directives(self) -> dict[str, DirectiveView]:
        """id -> the newest view of each directive."""
        return self._directives.views

    @property
    def on_stopped(self) -> Callable[[], None] | None:
        """Called once a Stop has run its course (e.g. to play a supervisor exiting)."""
        return self.lifecycle.on_stopped

    @on_stopped.setter
    def on_stopped(self, callback: Callable[[], None] | None) -> None:
        self.lifecycle.on_stopped = callback

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeEngine:
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(self.socket_path), limit=STREAM_LIMIT
        )
        return self

    async def close(self) -> None:
        await self.drop_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def __aenter__(self) -> FakeEngine:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def drop_connections(self) -> None:
        """Close every client connection; the server keeps listening."""
        for conn in list(self._connections):
            for task in conn.tasks:
                task.cancel()
            conn.writer.close()
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()
        self._connections.clear()

    # ------------------------------------------------------------------ scripting

    def record(self, payload: Payload, message: str = "", *, severity: Severity | None = None) -> Event:
        """Store an event of the payload's type and send it to every client (``Recorder``)."""
        return self.add_event(payload, message, severity=severity or payload.severity)

    def add_event(self, type: str | Payload = "note", message: str = "", **over: Any) -> Event:
        """Store an event with the next seq and send it to every client; ``type`` may be a
        typed payload (its type and data)."""
        if isinstance(type, Payload):
            over.setdefault("data", type.data())
            over.setdefault("severity", type.severity)
            type = type.event_type
        seq = (self.events[-1].seq if self.events else 0) + 1
        event = Event(
            seq=seq, ts=over.pop("ts", time.time()), type=type, message=message or f"event {seq}", **over
        )
        self.events.append(event)
        for conn in self._connections:
            if conn.hello is not None:
                conn.send(EventMessage(event=event))
        return event

    def propose(self, directive: DirectiveView) -> None:
        """Announce a pending directive as the supervisor does (``directive_proposed``)."""
        self._directives.propose(directive)

    def set_state(self, state: RunState) -> None:
        """Change state and announce it as the supervisor does (``state_changed`` from/to)."""
        self.lifecycle.set_state(state)

    def enter_phase(self, phase: PhaseName, **details: Any) -> Event:
        """The trainer enters a start-up phase, said as the real one says it (``startup_phase``
        from the current attempt); the status carries it until the next step."""
        payload = StartupPhase(phase=phase, attempt=self.lifecycle.attempt, **details)
        event = self.add_event(payload, payload.label(), attempt=self.lifecycle.attempt)
        attempt = self.lifecycle.attempt
        self._startup = StartupStatus(phase=phase, label=payload.label(), since=event.ts, attempt=attempt)
        return event

    def send_telemetry(self, sample: TelemetrySample) -> None:
        sample = self.as_ranked(sample)
        self.step = sample.step
        self._startup = None  # the first step ends the start-up
        for conn in self._connections:
            if conn.hello is not None and conn.hello.telemetry:
                conn.send(Telemetry(sample=sample, state=self.state))

    def as_ranked(self, sample: TelemetrySample) -> TelemetrySample:
        """``sample`` as this fake's run reports it: with world_size and, on report steps, ranks."""
        if self.ranks <= 1 or sample.ranks is not None:
            return sample
        report = sample.step % self.rank_report_every == 0
        ranks = make_ranks(sample, self.ranks) if report else None
        return sample.model_copy(update={"world_size": self.ranks, "ranks": ranks})

    def send_hardware(self, snapshot: HardwareSnapshot) -> None:
        """A new hardware reading to every telemetry client (the supervisor's ``Hardware``)."""
        self.hardware = snapshot
        for conn in self._connections:
            if conn.hello is not None and conn.hello.telemetry:
                conn.send(Hardware(snapshot=snapshot))

    @property
    def clients(self) -> int:
        return sum(1 for c in self._connections if c.hello is not None)

    # ------------------------------------------------------------------ serving

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer)
        self._connections.append(conn)
        try:
            while not writer.is_closing():
                try:
                    line = await read_line(reader)
                except ProtocolError as err:  # an over-long line
                    conn.send(Error(reason=err.reason))
                    if conn.hello is None:
                        return
                    continue
                if line is None:
                    return
                if conn.hello is None or line.strip():  # blank lines between messages are skipped
                    self._handle_line(conn, line)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if conn in self._connections:
                self._connections.remove(conn)
            writer.close()

    def _handle_line(self, conn: _Connection, line: bytes) -> None:
        try:
            message = decode_client(line)
            if conn.hello is None:
                self._welcome(conn, check_hello(message))
                return
        except ProtocolError as err:
            conn.send(Error(id=err.request_id, reason=err.reason))
            if conn.hello is None:
                conn.writer.close()
            return
        self.requests.append(message)
        conn.send(self._answer(conn, message))

    def _welcome(self, conn: _Connection, hello: Hello) -> None:
        conn.hello = hello
        self.hellos.append(hello)
        last_seq = self.events[-1].seq if self.events else 0
        conn.send(
            Welcome(
                supervisor_pid=os.getpid(),  # as the real supervisor says who answers
                run_id=self.run_id,
                state=self.state,
                last_seq=last_seq,
                thresholds=self.thresholds,
                chaos=chaos_specs(self.chaos),
            )
        )
        if hello.replay_from is not None:
            for event in self.events:
                if event.seq > hello.replay_from:
                    conn.send(EventMessage(event=event))
        if hello.telemetry and self.hardware is not None:
            conn.send(Hardware(snapshot=self.hardware))
        if hello.telemetry and self.telemetry:
            conn.tasks.append(asyncio.ensure_future(self._stream_telemetry(conn)))

    async def _stream_telemetry(self, conn: _Connection) -> None:
        for sample in self.telemetry:
            while self.state == "paused":  # simulated: a held trainer takes no steps
                await asyncio.sleep(0.01)
            self.step = sample.step
            self._startup = None  # the first step ends the start-up
            conn.send(Telemetry(sample=self.as_ranked(sample), state=self.state))
            await asyncio.sleep(1.0 / self.telemetry_hz)  # simulated: the trainer's step rate

    def _answer(self, conn: _Connection, message: ClientMessage) -> BaseModel:
        """What the real ``ConnectionServer`` answers a console's message with."""
        request_id = getattr(message, "id", None)
        if message.kind in self.refuse:
            return Error(id=request_id, reason=self.refuse[message.kind])
        if isinstance(message, Status):
            return Ok(id=message.id, result=self._status().model_dump(mode="json"))
        if isinstance(message, Ping):
            return Ok(id=message.id, result={"time": time.time()})
        if isinstance(message, Stop):
            return Ok(id=message.id, result={"state": self.lifecycle.request_stop(message.reason)})
        if isinstance(message, Pause):
            return self.lifecycle.request_pause(message.paused, message.reason, message.id)
        if isinstance(message, Chaos):
            answer = self.lifecycle.chaos(message)
            if isinstance(answer, Ok) and message.request.kind == "drop_consoles":
                asyncio.ensure_future(self._drop_consoles(answer.result["chaos_id"]))
            return answer
        if isinstance(message, (Approve, Clamp, Reject, Propose)):
            return self._answer_directive(message)
        if isinstance(message, Replay):
            replay = [e for e in self.events if e.seq > message.since]
            for event in replay:
                conn.send(EventMessage(event=event))
            return Ok(id=message.id, result={"replayed": len(replay)})
        if isinstance(message, Hello):
            return Error(reason="hello already received on this connection")
        return Error(reason=f"{message.kind!r} is accepted only from the trainer")

    async def _drop_consoles(self, chaos_id: str) -> None:
        """Every console closed once the answer went out, then recovered, as the real one."""
        await asyncio.sleep(0)  # the answer is written first
        dropped = self.clients
        await self.drop_connections()
        detail = f"{dropped} console connection{'s' if dropped != 1 else ''} closed"
        self.lifecycle._recovered(chaos_id, "drop_consoles", detail)

    def _status(self) -> RunStatus:
        """The scripted status, with what the run did since: state, attempts, the ending."""
        run, status = self.lifecycle, self.status
        update: dict[str, Any] = {
            "state": run.state,
            "last_seq": self.events[-1].seq if self.events else 0,
            "restarts": status.restarts + run.restarts,
            "attempt": max(status.attempt, run.attempt),
            "startup": self._startup if run.state not in TERMINAL_STATES else None,
        }
        if run.exit_reason is not None:
            update["exit_reason"] = run.exit_reason
        return status.model_copy(update=update)

    def _answer_directive(self, message: Approve | Clamp | Reject | Propose) -> Ok | Error:
        answer, admitted = self._directives.answer(message, self.step)
        if admitted is not None:  # the trainer applies it at its next step boundary
            asyncio.get_running_loop().call_later(self.apply_after_s, self._apply, admitted)
        return answer

    def _apply(self, directive_id: str) -> None:
        if self.lifecycle.trainer_alive:
            self._directives.applied(directive_id, self.step)

    # ------------------------------------------------------------------ threads

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls, socket_path: Path | str, **kwargs: Any) -> Iterator[FakeEngine]:
        """Serve on a private event loop in a thread (for synchronous code like the CLI)."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        holder: dict[str, FakeEngine] = {}

        async def main() -> None:
            holder["engine"] = await cls(socket_path, **kwargs).start()
            ready.set()

        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(main(), loop).result(5)
        ready.wait(5)
        engine = holder["engine"]
        try:
            yield engine
        finally:
            asyncio.run_coroutine_threadsafe(engine.close(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()
