"""The two engines ``tests/test_engine_contract.py`` holds to one behaviour, behind one adapter.

``FakeUnderTest`` is the scripted fake supervisor the console tests run against
(``tests/fakes/fake_engine.py``); ``RealUnderTest`` is the real ``Supervisor``, in process,
launching the torch-free fake trainer (``tests/fakes/fake_trainer.py``). Each starts a run that
is running (and reaches "paused" or "stopped" the same way on both: by a console's request),
and opens console connections (``Console``) that keep every message they read.

What a console may observe and the test compares is ``observed``: replies and events, not
telemetry or hardware readings (streams whose rate is a timing matter) nor the events the
real supervisor's timers record about the machine it runs on (doctor reports, alerts other
than a restart's). A real run ends by closing its connections once its consoles have the
final events; ``RealUnderTest`` holds it open after ``run_ended`` (until the test ends), so
that a console can still talk to an ended run, as it can in that moment, and as it can to
the fake, which goes on serving. The helpers at the end read what a conversation brought:
kinds, event signatures, an Ok's shape, a Welcome and its replay, "nothing more".
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine import protocol
from engine.config_file import build_run_config
from engine.domain import Event, RunState, RunStatus
from engine.events import AlertRaised, StateChanged, payload_of
from engine.protocol import Error, EventMessage, Hello, Ok, Pause, Ping, ServerMessage, Status, Stop, Welcome
from engine.run.directory import RunDir
from engine.supervisor.daemon import Supervisor
from engine.supervisor.trainer_process import TrainerExit
from tests.fakes.fake_engine import FakeEngine, make_sample, started_history
from tests.waiting import until

FAKE_TRAINER = Path(__file__).resolve().parent / "fakes" / "fake_trainer.py"
FAKE_TRAINER_ENV = {"FAKE_TRAINER_RATE_HZ": "100", "FAKE_TRAINER_STEPS": "100000"}
"""The fake trainer's pace (steps per second) and length (it runs until stopped)."""
RUN_CONFIG = {"restart": {"backoff_initial_s": 0.05}}
"""The real run's config: a short restart backoff (s), so a kill's restart comes soon."""
TIMEOUT_S = 15.0  # s any one awaited condition may take before the test fails
BACKGROUND_EVENTS = frozenset({"doctor_report"})
"""Events the real supervisor's timers record about its machine, whatever the console asks."""


def observed(message: ServerMessage) -> bool:
    """A reply or an event a request can cause (not a stream, not the machine's own report)."""
    if message.kind not in ("ok", "error", "event", "welcome"):
        return False
    if isinstance(message, EventMessage):
        event = message.event
        alert = AlertRaised.of(event)
        return event.type not in BACKGROUND_EVENTS and (alert is None or alert.rule == "restart")
    return True


def signature(event: Event) -> str:
    """An event's type, and for a change of state the state it went to."""
    changed = StateChanged.of(event)
    return f"state_changed->{changed.to}" if changed is not None else event.type


def events_of(messages: list[ServerMessage]) -> list[Event]:
    return [m.event for m in messages if isinstance(m, EventMessage)]


class Console:
    """A console connection speaking the real protocol; ``log`` keeps every message read."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.log: list[ServerMessage] = []

    @classmethod
    async def open(cls, socket: Path, *, hello: bool = True, **fields: Any) -> Console:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(socket), limit=protocol.STREAM_LIMIT), TIMEOUT_S
        )
        console = cls(reader, writer)
        if hello:
            fields.setdefault("protocol", protocol.PROTOCOL_VERSION)
            await console.send(Hello(**fields))
        return console

    async def send(self, *messages: BaseModel | bytes) -> None:
        """Send ``messages`` in one write (raw bytes as they are)."""
        data = b"".join(m if isinstance(m, bytes) else protocol.encode(m) for m in messages)
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> ServerMessage | None:
        """The next message; None at the end of the connection."""
        line = await asyncio.wait_for(protocol.read_line(self.reader), TIMEOUT_S)
        if line is None:
            return None
        message = protocol.decode_server(line)
        self.log.append(message)
        return message

    async def until(self, predicate: Callable[[ServerMessage], bool]) -> list[ServerMessage]:
        """Observed messages up to and including the first that matches ``predicate``."""
        seen: list[ServerMessage] = []
        while True:
            message = await self.recv()
            if message is None:
                raise EOFError(f"connection closed; seen {[m.kind for m in seen]}")
            if observed(message):
                seen.append(message)
                if predicate(message):
                    return seen

    async def until_event(self, sig: str) -> list[ServerMessage]:
        """Observed messages up to the first event whose ``signature`` is ``sig``."""
        return await self.until(lambda m: isinstance(m, EventMessage) and signature(m.event) == sig)

    async def answer(self, *requests: BaseModel | bytes) -> list[ServerMessage]:
        """Send ``requests`` (one write) and read up to the answer to the last one."""
        await self.send(*requests)
        last = requests[-1]
        wanted = getattr(last, "id", None) if isinstance(last, BaseModel) else None
        return await self.until(lambda m: isinstance(m, (Ok, Error)) and (wanted is None or m.id == wanted))

    async def at_end(self) -> bool:
        """True once the supervisor closed the connection (reading what came before)."""
        while await self.recv() is not None:
            pass
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


class EngineUnderTest:
    """What the contract test drives: start a run, connect consoles, close."""

    name = "?"

    def __init__(self, home: Path) -> None:
        self.home = home
        self.run = RunDir.create(build_run_config(RUN_CONFIG, steps=100), home=home)
        self.consoles: list[Console] = []

    @property
    def socket(self) -> Path:
        return self.run.socket

    async def start(self, state: RunState = "running") -> None:
        """A running run; "paused" and "stopped" are reached from it by a console's request."""
        await self._start_running()
        if state == "running":
            return
        console = await self.connect(telemetry=False)
        await console.until(lambda m: m.kind == "welcome")
        if state == "paused":
            await console.answer(Pause(id="to-paused"))
            await console.until_event("state_changed->paused")
        elif state == "stopped":
            await console.answer(Stop(id="to-stopped"))
            await console.until_event("run_ended")
        else:
            raise ValueError(f"the contract starts runs running, paused or stopped, not {state}")

    async def connect(self, *, hello: bool = True, **fields: Any) -> Console:
        console = await Console.open(self.socket, hello=hello, **fields)
        self.consoles.append(console)
        return console

    async def close(self) -> None:
        for console in self.consoles:
            await console.close()

    async def _start_running(self) -> None:
        raise NotImplementedError


class FakeUnderTest(EngineUnderTest):
    """The fake engine, with the history a real run has once its trainer reports."""

    name = "fake"

    async def _start_running(self) -> None:
        run = self.run
        self.fake = FakeEngine(
            run.socket,
            run_id=run.run_id,
            events=started_history(run.run_id, str(run.path)),
            telemetry=[make_sample(step) for step in range(1, 3001)],  # 30 s of steps
            telemetry_hz=100.0,
        )
        await self.fake.start()

    async def close(self) -> None:
        await super().close()
        if hasattr(self, "fake"):
            await self.fake.close()


class LingeringSupervisor(Supervisor):
    """A real supervisor that, once its run ended, keeps serving until ``release`` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()

    async def _finish(self, outcome: TrainerExit) -> None:
        await super()._finish(outcome)
        await self.release.wait()


class RealUnderTest(EngineUnderTest):
    """The real supervisor in process, with the fake trainer (the environment must carry
    ``FAKE_TRAINER_ENV``)."""

    name = "real"

    async def _start_running(self) -> None:
        self.supervisor = LingeringSupervisor(self.run, [sys.executable, str(FAKE_TRAINER)])
        self.task = asyncio.create_task(self.supervisor.serve())
        await until(
            lambda: self.supervisor.serving.is_set() or self.task.done(), timeout=TIMEOUT_S, what="the socket"
        )
        if self.task.done():
            self.task.result()  # raises what went wrong
        await until(
            lambda: self.supervisor.state == "running", timeout=TIMEOUT_S, what="the trainer's first step"
        )

    async def close(self) -> None:
        await super().close()
        if not hasattr(self, "task"):
            return
        self.supervisor.release.set()
        if not self.supervisor.journal.ended:
            self.task.cancel()  # its cleanup kills the trainer
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self.task, TIMEOUT_S)


# ------------------------------------------------------- what a console observes


def kinds(messages: list[ServerMessage]) -> list[str]:
    return [m.kind for m in messages]


def signatures(messages: list[ServerMessage]) -> list[str]:
    return [signature(e) for e in events_of(messages)]


def json_type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def shape(result: dict[str, Any]) -> dict[str, str]:
    """Each key of an Ok's result and the JSON type of its value."""
    return {key: json_type(value) for key, value in result.items()}


def typed(events: list[Event]) -> list[Event]:
    """``events``, each checked to parse with its payload model."""
    for event in events:
        assert payload_of(event) is not None, f"{event.type} does not fit its payload: {event.data}"
    return events


def ok(messages: list[ServerMessage]) -> Ok:
    answer = messages[-1]
    assert isinstance(answer, Ok), answer
    return answer


def error(messages: list[ServerMessage]) -> Error:
    answer = messages[-1]
    assert isinstance(answer, Error), answer
    return answer


async def welcomed(engine: EngineUnderTest, **hello: Any) -> tuple[Console, Welcome, list[ServerMessage]]:
    """A console, its Welcome and the events replayed up to the Welcome's ``last_seq``."""
    console = await engine.connect(**hello)
    welcome = (await console.until(lambda m: m.kind == "welcome"))[-1]
    assert isinstance(welcome, Welcome)
    replayed: list[ServerMessage] = []
    if hello.get("replay_from") is not None and welcome.last_seq > hello["replay_from"]:
        replayed = await console.until(lambda m: m.kind == "event" and m.event.seq == welcome.last_seq)
    return console, welcome, replayed


async def nothing_more(console: Console, tag: str) -> None:
    """Nothing was recorded or sent since the last answer: a Ping's answer comes alone."""
    assert kinds(await console.answer(Ping(id=f"ping-{tag}"))) == ["ok"]


async def state_of(console: Console) -> str:
    status = RunStatus.model_validate(ok(await console.answer(Status(id="state"))).result)
    return status.state
