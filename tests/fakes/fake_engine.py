"""A scripted fake supervisor that speaks the real wire protocol.

Like httpx's mock transport: the console and CLI are tested against it without torch or a real
engine. It serves a Unix socket with ``engine.protocol`` framing, answers ``Hello`` with a
``Welcome`` and a replay of its scripted events, streams scripted telemetry at a rate, answers
Status/Stop/Ping/Replay with ``Ok`` (or a scripted ``Error``), and records every message it
received so tests can assert on them. ``ranks=2`` plays a two-rank run: every sample says
``world_size=2`` and every ``rank_report_every``-th step carries both ranks' memory
(``RankMemory``), as the trainer's ranks exchange it. ``thresholds`` are the run's levels its
Welcome carries (None: a supervisor that sends none). Directives: ``propose`` announces one
(``directive_proposed``); Approve/Clamp/Reject decide it (``directive_decided``), a clamp
outside the directive's bounds is refused as the policy would. Chaos is recorded as a ``chaos``
event and answered Ok. ``Pause`` is answered Ok at once; ``pause_after_s`` later the "trainer"
holds (``state_changed`` to paused, ``run_paused``) and the telemetry stream waits, until
``Pause(paused=False)`` (``state_changed`` to running, ``run_continued``); a run that has ended
or is stopping refuses it::

    async with FakeEngine(sock, events=[...], telemetry=[...]) as engine:
        ...
        assert [m.kind for m in engine.requests] == ["status"]

``FakeEngine.in_thread(...)`` runs one on its own loop for synchronous callers (the CLI).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.domain import TERMINAL_STATES, Event, RankMemory, RunState, RunStatus, TelemetrySample, Thresholds
from engine.events import DoctorReported, Payload
from engine.hardware_report import Finding, HardwareSnapshot, SoftwareReport
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


def make_sample(step: int, **over: Any) -> TelemetrySample:
    """A plausible CPU step sample; ``over`` replaces any field."""
    fields: dict[str, Any] = dict(
        step=step,
        ts=1_700_000_000.0 + step * 0.05,
        samples=step * 8,
        tokens=step * 8 * 128,
        loss=5.5 - step * 0.01,
        lr=3e-3,
        grad_norm=0.8,
        loss_scale=4096.0,
        step_time_s=0.05,
        tokens_per_s=20_480.0,
        mem_allocated=300 * 2**20,
        mem_reserved=420 * 2**20,
        mem_peak=450 * 2**20,
        mem_capacity=2 * 2**30,
        mem_kind="cpu-rss",
        micro_batch=8,
        grad_accum=1,
    )
    fields.update(over)
    return TelemetrySample(**fields)


RANK_SKEW = 96 * 2**20
"""Bytes each further rank holds more than the one before (a rank that holds more than its
peers, e.g. the one with the embedding's shard, is what per-rank rows are for)."""


def make_ranks(sample: TelemetrySample, ranks: int) -> list[RankMemory]:
    """``ranks`` ranks' memory around ``sample``'s own (rank 0's), each a little fuller."""
    return [
        RankMemory(
            rank=r,
            allocated=sample.mem_allocated + r * RANK_SKEW,
            reserved=sample.mem_reserved + r * RANK_SKEW + r * 2**20 * 16,
            peak=sample.mem_peak + r * RANK_SKEW,
            capacity=sample.mem_capacity,
        )
        for r in range(ranks)
    ]


def make_directive(directive_id: str = "d-1", **over: Any) -> DirectiveView:
    """A pending rule-planner directive: lower the LR, clamped by the policy to its bound."""
    fields: dict[str, Any] = dict(
        id=directive_id,
        source="rules",
        created_at=1_700_000_000.0,
        expires_at=1_700_000_000.0 + 300,
        step=200,
        requested={"lr_multiplier": 0.5, "gradient_clip_norm": 2.0},
        allowed={"lr_multiplier": 0.5, "gradient_clip_norm": 1.25},
        bounds={"lr_multiplier": (0.1, 0.85), "gradient_clip_norm": (0.1, 1.25)},
        reasons=["loss spiked 3x over its 50-step mean", "gradient_clip_norm clamped to 1.25"],
    )
    fields.update(over)
    return DirectiveView(**fields)


def make_event(seq: int, type: str | Payload = "note", message: str | None = None, **over: Any) -> Event:
    """An event as the store numbers it; ``type`` may be a typed payload (its type and data)."""
    if isinstance(type, Payload):
        over.setdefault("data", type.data())
        over.setdefault("severity", type.severity)
        type = type.event_type
    fields: dict[str, Any] = dict(
        seq=seq, ts=1_700_000_000.0 + seq, type=type, message=message or f"event {seq}"
    )
    fields.update(over)  # ``ts`` too
    return Event(**fields)


def doctor_data(
    verdict: str = "degraded",
    findings: tuple[tuple[str, str], ...] = (),
    hardware: HardwareSnapshot | None = None,
) -> dict[str, Any]:
    """A ``doctor_report`` event's data as the supervisor records it: ``findings`` are
    (level, message) pairs; the software report is a bare one."""
    report = DoctorReported(
        ts=1_700_000_000.0,
        verdict=verdict,  # type: ignore[arg-type]
        findings=[Finding(level=level, message=message) for level, message in findings],  # type: ignore[arg-type]
        software=SoftwareReport(python="3.11"),
        hardware=hardware or HardwareSnapshot(ts=1_700_000_000.0),
    )
    return report.data()


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.hello: Hello | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def send(self, message: Any) -> None:
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
        hardware: HardwareSnapshot | None = None,
        ranks: int = 1,
        rank_report_every: int = 4,
        thresholds: Thresholds | None = None,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.run_id = run_id
        self.state: RunState = state
        self.events: list[Event] = list(events)
        """The store: every event ever, in seq order."""
        self.telemetry = list(telemetry)
        self.telemetry_hz = telemetry_hz
        self.status = status or RunStatus(
            run_id=run_id, name="fake", state=state, run_dir=str(self.socket_path.parent)
        )
        self.refuse = dict(refuse or {})
        """kind -> reason: answer that request kind with an Error."""
        self.stop_after_s = stop_after_s
        self.pause_after_s = pause_after_s
        """Seconds from a Pause request to the trainer holding (its step boundary)."""
        self.hardware = hardware
        """The newest hardware reading: sent to each telemetry client on joining."""
        self.ranks = ranks
        """Ranks the run plays: above one, samples carry world_size and rank reports."""
        self.rank_report_every = rank_report_every
        """Steps between two rank reports (steps divisible by it carry one)."""
        self.thresholds = thresholds
        """The run's levels sent in each Welcome; None plays a supervisor that sends none."""
        self.requests: list[ClientMessage] = []
        """Every message received after a Hello, in arrival order."""
        self.hellos: list[Hello] = []
        self.directives: dict[str, DirectiveView] = {}
        """id -> the newest version of each proposed directive."""
        self.on_stopped: Callable[[], None] | None = None
        """Called once a Stop has run its course (e.g. to play a supervisor exiting)."""
        self._connections: list[_Connection] = []
        self.step = 0
        """The newest step sent (a pause holds after it)."""
        self._pausing: asyncio.TimerHandle | None = None  # a hold or release on its way
        self._server: asyncio.AbstractServer | None = None

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

    def add_event(self, type: str | Payload = "note", message: str = "", **over: Any) -> Event:
        """Store an event with the next seq and send it to every console; ``type`` may be a
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
            if conn.hello is not None and conn.hello.role != "cli":
                conn.send(EventMessage(event=event))
        return event

    def propose(self, directive: DirectiveView) -> Event:
        """Announce a pending directive as the supervisor will (``directive_proposed``)."""
        self.directives[directive.id] = directive
        return self.add_event(
            "directive_proposed",
            f"directive {directive.id} from {directive.source}",
            data={"directive": directive.model_dump(mode="json")},
        )

    def _decide(self, directive_id: str, state: str, reason: str, **update: Any) -> Error | None:
        directive = self.directives.get(directive_id)
        if directive is None or directive.state != "pending":
            return Error(reason=f"no pending directive {directive_id!r}")
        decided = directive.model_copy(update={"state": state, **update})
        self.directives[directive_id] = decided
        self.add_event(
            "directive_decided",
            f"directive {directive_id} {state}: {reason}",
            data={"directive": decided.model_dump(mode="json")},
        )
        return None

    def _clamp(self, message: Clamp) -> Error | None:
        directive = self.directives.get(message.directive_id)
        for field, value in message.values.items():
            low, high = (directive.bounds.get(field) if directive else None) or (value, value)
            if not low <= value <= high:
                return Error(reason=f"policy: {field} {value} outside [{low}, {high}]")
        return self._decide(message.directive_id, "clamped", "by the operator", allowed=dict(message.values))

    def set_state(self, state: RunState) -> None:
        """Change state and announce it as the supervisor does (``state_changed`` from/to)."""
        previous, self.state = self.state, state
        self.add_event("state_changed", f"{previous} -> {state}", data={"from": previous, "to": state})

    def send_telemetry(self, sample: TelemetrySample) -> None:
        sample = self.as_ranked(sample)
        self.step = sample.step
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
            while True:
                try:
                    line = await read_line(reader)
                except ProtocolError as err:
                    conn.send(Error(reason=err.reason))
                    continue
                if line is None:
                    return
                await self._handle_line(conn, line)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if conn in self._connections:
                self._connections.remove(conn)
            writer.close()

    async def _handle_line(self, conn: _Connection, line: bytes) -> None:
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
            Welcome(run_id=self.run_id, state=self.state, last_seq=last_seq, thresholds=self.thresholds)
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
            conn.send(Telemetry(sample=self.as_ranked(sample), state=self.state))
            await asyncio.sleep(1.0 / self.telemetry_hz)  # simulated: the trainer's step rate

    def _answer(self, conn: _Connection, message: ClientMessage) -> Ok | Error:
        request_id = getattr(message, "id", None)
        if message.kind in self.refuse:
            return Error(id=request_id, reason=self.refuse[message.kind])
        if isinstance(message, Status):
            status = self.status.model_copy(update={"state": self.state, "last_seq": len(self.events)})
            return Ok(id=message.id, result=status.model_dump(mode="json"))
        if isinstance(message, Stop):
            self._begin_stop()
            return Ok(id=message.id, result={"state": self.state})
        if isinstance(message, Pause):
            return self._answer_pause(message)
        if isinstance(message, Ping):
            return Ok(id=message.id, result={"pong": True})
        if isinstance(message, (Approve, Clamp, Reject)):
            return self._answer_directive(message)
        if isinstance(message, Chaos):
            self.add_event(
                "chaos",
                f"chaos: {message.action}",
                severity="warning",
                data={"action": message.action, "params": message.params},
            )
            return Ok(id=message.id, result={"action": message.action})
        if isinstance(message, Replay):
            replay = [e for e in self.events if e.seq > message.since]
            for event in replay:
                conn.send(EventMessage(event=event))
            return Ok(id=message.id, result={"count": len(replay)})
        return Error(id=request_id, reason=f"the fake does not handle {message.kind!r}")

    def _answer_directive(self, message: Approve | Clamp | Reject) -> Ok | Error:
        if isinstance(message, Approve):
            refused = self._decide(message.directive_id, "approved", "by the operator")
        elif isinstance(message, Clamp):
            refused = self._clamp(message)
        else:
            refused = self._decide(message.directive_id, "rejected", message.reason)
        if refused is not None:
            return refused.model_copy(update={"id": message.id})
        return Ok(
            id=message.id, result={"directive": self.directives[message.directive_id].model_dump(mode="json")}
        )

    def _answer_pause(self, message: Pause) -> Ok | Error:
        """Ok at once (the state as it is now); the hold or release follows at a step boundary."""
        if self.state in TERMINAL_STATES or self.state == "stopping":
            return Error(id=message.id, reason=f"the run is {self.state}: it can neither pause nor go on")
        if self._pausing is not None:
            self._pausing.cancel()
        self._pausing = asyncio.get_running_loop().call_later(
            self.pause_after_s, self._hold if message.paused else self._release, message.reason
        )
        return Ok(id=message.id, result={"state": self.state, "paused": message.paused})

    def _hold(self, reason: str) -> None:
        self._pausing = None
        if self.state in TERMINAL_STATES or self.state in ("stopping", "paused"):
            return
        self.set_state("paused")
        step = self.step
        self.add_event(
            "run_paused", f"paused at step {step} ({reason})", data={"step": step, "reason": reason}
        )

    def _release(self, reason: str) -> None:
        self._pausing = None
        if self.state != "paused":
            return
        self.set_state("running")
        self.add_event("run_continued", f"continued ({reason})", data={"reason": reason})

    def _begin_stop(self) -> None:
        if self.state in TERMINAL_STATES or self.state == "stopping":
            return
        self.set_state("stopping")
        asyncio.get_running_loop().call_later(self.stop_after_s, self._finish_stop)

    def _finish_stop(self) -> None:
        self.set_state("stopped")
        if self.on_stopped is not None:
            self.on_stopped()

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
